// The exact partitioner: phase 1 finds the optimal bottleneck, phase 2 the best split under it,
// and a third DP explains infeasibility with the split that needs the least memory.
#include "planner/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "common/error.h"
#include "common/units.h"

namespace pipeplan {

std::string needs_text(int64_t needed_bytes, int64_t device_bytes) {
  std::string needed = format_size(needed_bytes);
  std::string device = format_size(device_bytes);
  if (needed == device) {
    needed = detail::concat(needed_bytes, " B");
    device = detail::concat(device_bytes, " B");
  }
  return needed + " > " + device;
}

std::string split_text(const std::vector<int>& boundaries) {
  std::string text;
  for (size_t idx = 0; idx + 1 < boundaries.size(); ++idx)
    text += detail::concat(idx == 0 ? "" : ",", boundaries[idx], ":", boundaries[idx + 1]);
  return text;
}

namespace {

constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max();
// The greedy upper bound stops probing once its interval is this tight (relative) or after
// this many probes.
constexpr double kGreedyPrecision = 1.0 / 512;
constexpr int kGreedyProbes = 24;

// The same downwards: the first position in [limit, known] from which `passes` holds up to
// `known`, where it holds.
template <typename Passes>
int first_passing(int known, int limit, Passes passes) {
  return -last_passing(-known, -limit, [&](int negated) { return passes(-negated); });
}

// The smallest start that may_fit each end of one stage, for ends asked in increasing order:
// it never decreases as the end grows, so after a search down from the first end the scan
// costs O(1) per end amortised (a stage's band lies far from position stage_idx for large pp).
class FirstStart {
 public:
  FirstStart(const StageEvaluator& ev, int stage_idx, int64_t bound)
      : ev_(ev), stage_idx_(stage_idx), bound_(bound), start_(-1) {}
  /// The smallest start >= stage_idx that may fit up to `end`, or `end` when none does.
  int at(int end) {
    if (start_ < 0) {  // may_fit holds from some start on (the range shrinks as it grows)
      int lo = stage_idx_, hi = end;
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (ev_.may_fit(stage_idx_, mid, end, bound_))
          hi = mid;
        else
          lo = mid + 1;
      }
      start_ = lo;
    }
    while (start_ < end && !ev_.may_fit(stage_idx_, start_, end, bound_)) ++start_;
    return start_;
  }

 private:
  const StageEvaluator& ev_;
  int stage_idx_;
  int64_t bound_;
  int start_;  // -1 before the first end
};

// For each stage s, the end positions that can lead to a split whose every stage passes
// may_fit: the first s + 1 stages must hold [0, j) and the other pp − s − 1 stages [j, L).
// Packing stages greedily is exact for monotone constraints, so the band of stage s is
// [earliest start that pp − s − 1 stages can carry to L, most layers s + 1 stages can hold].
std::vector<std::pair<int, int>> end_bands(const StageEvaluator& ev, int64_t bound) {
  const int layers = ev.num_layers();
  const int pp = ev.pp();
  std::vector<int> most(pp + 1, 0), earliest(pp + 1, layers);
  for (int count = 1; count <= pp; ++count) {
    const int from = most[count - 1];  // the largest end that may fit
    most[count] = last_passing(from, layers,
                               [&](int end) { return ev.may_fit(count - 1, from, end, bound); });
    const int to = earliest[count - 1];  // the smallest start that may fit
    earliest[count] = first_passing(
        to, 0, [&](int start) { return ev.may_fit(pp - count, start, to, bound); });
  }
  std::vector<std::pair<int, int>> bands(pp);
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    const int later = pp - stage_idx - 1;
    bands[stage_idx] = {std::max(stage_idx + 1, earliest[later]),
                        std::min(most[stage_idx + 1], layers - later)};
  }
  return bands;
}

// The start chosen for each (stage, end), kept only over each stage's band of ends.
class Parents {
 public:
  explicit Parents(const std::vector<std::pair<int, int>>& bands) : bands_(bands) {
    for (const auto& [lo, hi] : bands) rows_.emplace_back(std::max(hi - lo + 1, 0), -1);
  }
  int& at(int stage_idx, int end) { return rows_[stage_idx][end - bands_[stage_idx].first]; }
  /// The boundaries of the split ending at `layers`, following the chosen starts back.
  std::vector<int> split(int layers) {
    const int pp = static_cast<int>(rows_.size());
    std::vector<int> boundaries(pp + 1, layers);
    for (int stage_idx = pp - 1; stage_idx >= 0; --stage_idx)
      boundaries[stage_idx] = at(stage_idx, boundaries[stage_idx + 1]);
    return boundaries;
  }

 private:
  std::vector<std::pair<int, int>> bands_;
  std::vector<std::vector<int>> rows_;
};

// Resets the entries of `values` a DP row wrote over `band` (cheaper than the whole row).
template <typename T>
void reset(std::vector<T>* values, std::pair<int, int> band, const T& empty) {
  for (int j = band.first; j <= band.second; ++j) (*values)[j] = empty;
}

// Phase 1: the smallest bottleneck over splits whose stages all have compute <= bound, or
// kInfinite when there is none. Each end position first tries the start that was best for
// the previous end (optimal starts move with the end), so that the cheap checks of the
// downward scan (compute alone, the prefix's bottleneck) rule out most other starts.
int64_t min_bottleneck(const StageEvaluator& ev, int64_t bound) {
  const int layers = ev.num_layers();
  std::vector<int64_t> prev(layers + 1, kInfinite), cur(layers + 1, kInfinite);
  prev[0] = 0;
  const std::vector<std::pair<int, int>> bands = end_bands(ev, bound);
  std::pair<int, int> cur_written{0, -1}, prev_written{0, 0};
  for (int stage_idx = 0; stage_idx < ev.pp(); ++stage_idx) {
    reset(&cur, cur_written, kInfinite);
    const auto [j_lo, j_hi] = bands[stage_idx];
    int warm = -1;
    FirstStart first_start(ev, stage_idx, bound);
    for (int j = j_lo; j <= j_hi; ++j) {
      int64_t best = kInfinite;
      int best_start = -1;
      auto consider = [&](int i) {
        // The cost is at least least_cost_ns: rule the start out before the memory terms.
        const int64_t least_ns = ev.least_cost_ns(stage_idx, i, j);
        if (least_ns > bound || std::max(prev[i], least_ns) >= best) return;
        const StageChoice choice = ev.evaluate_time(stage_idx, i, j);
        if (!choice.fits || choice.cost_ns > bound) return;
        const int64_t value = std::max(prev[i], choice.cost_ns);
        if (value < best) {
          best = value;
          best_start = i;
        }
      };
      if (warm >= stage_idx && warm < j && prev[warm] != kInfinite) consider(warm);
      for (int i = j - 1, start = first_start.at(j); i >= start; --i) {
        if (ev.cost_lower_bound_ns(i, j) >= best) break;
        if (prev[i] >= best || i == warm) continue;
        consider(i);
      }
      cur[j] = best;
      if (best_start >= 0) warm = best_start;
    }
    std::swap(prev, cur);
    cur_written = prev_written;
    prev_written = bands[stage_idx];
  }
  return prev[layers];
}

// The largest cost any stage can have: every layer with recompute and both sends.
int64_t largest_stage_cost(const StageEvaluator& ev) {
  const LayerTable& table = ev.table();
  const int layers = ev.num_layers();
  return table.compute_ns(0, layers) + table.fwd_ns(0, layers) + 2 * ev.largest_transfer_ns() + 1;
}

// The bottleneck of a greedy split for `limit`: each stage ends as late as it can with its
// cost <= limit while fitting, leaving a layer for each later stage; kInfinite when that
// fails. Greedy is not exact here (costs and memory have boundary terms), but any split it
// finds bounds the optimum from above. The ends that may fit form a prefix of the candidates
// (may_fit is monotone), so each stage's end is the first that fits scanning down from the
// last of them: a few evaluations per stage instead of one per layer.
int64_t greedy_bottleneck(const StageEvaluator& ev, int64_t limit) {
  const int layers = ev.num_layers();
  const int pp = ev.pp();
  int pos = 0;
  int64_t worst = 0;
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    const int first_end = stage_idx == pp - 1 ? layers : pos + 1;
    const int last_end = layers - (pp - stage_idx - 1);
    if (first_end > last_end || !ev.may_fit(stage_idx, pos, first_end, limit)) return kInfinite;
    int end = last_passing(first_end, last_end,
                           [&](int last) { return ev.may_fit(stage_idx, pos, last, limit); });
    int64_t cost_ns = kInfinite;
    for (; end >= first_end; --end) {
      if (ev.least_cost_ns(stage_idx, pos, end) > limit) continue;
      const StageChoice choice = ev.evaluate_time(stage_idx, pos, end);
      if (choice.fits && choice.cost_ns <= limit) {
        cost_ns = choice.cost_ns;
        break;
      }
    }
    if (end < first_end) return kInfinite;
    worst = std::max(worst, cost_ns);
    pos = end;
  }
  return worst;
}

// An upper bound of the optimal bottleneck, close to it: the best greedy split over a
// geometric bisection of the limit. kInfinite when greedy finds no split at all.
int64_t greedy_upper_bound(const StageEvaluator& ev, int64_t lower, int64_t ceiling) {
  int64_t best = greedy_bottleneck(ev, ceiling);
  if (best == kInfinite) return kInfinite;
  double lo = static_cast<double>(std::max<int64_t>(lower, 1));
  double hi = static_cast<double>(best);
  for (int probe = 0; probe < kGreedyProbes && hi > lo * (1 + kGreedyPrecision); ++probe) {
    const int64_t mid = static_cast<int64_t>(std::sqrt(lo * hi));
    const int64_t found = greedy_bottleneck(ev, mid);
    if (found == kInfinite) {
      lo = static_cast<double>(mid);
    } else {
      best = std::min(best, found);
      hi = static_cast<double>(found);
    }
  }
  return best;
}

// A lower bound of the optimal bottleneck: the balanced share of the total, or the costliest
// single layer.
int64_t lower_bottleneck(const StageEvaluator& ev) {
  const int layers = ev.num_layers();
  int64_t bound = ev.cost_lower_bound_ns(0, layers) / ev.pp();
  for (int layer_idx = 0; layer_idx < layers; ++layer_idx)
    bound = std::max(bound, ev.cost_lower_bound_ns(layer_idx, layer_idx + 1));
  return bound;
}

// Phase 1 considers every split whose stage costs are all <= its bound, so its result is the
// optimum whenever one split fits under the bound: the greedy split's bottleneck when greedy
// found a split, else the largest cost any stage can have (then kInfinite means infeasible).
int64_t optimal_bottleneck(const StageEvaluator& ev) {
  const int64_t ceiling = largest_stage_cost(ev);
  const int64_t greedy = greedy_upper_bound(ev, lower_bottleneck(ev), ceiling);
  const int64_t found = min_bottleneck(ev, greedy != kInfinite ? greedy : ceiling);
  PIPEPLAN_ASSERT(greedy == kInfinite || found <= greedy, "phase 1 lost the greedy split");
  return found;
}

// Lexicographic value of a prefix split in phase 2: (sum of costs, peak memory).
struct SumPeak {
  int64_t sum = kInfinite;
  int64_t peak = kInfinite;
  bool operator<(const SumPeak& other) const {
    return std::tie(sum, peak) < std::tie(other.sum, other.peak);
  }
};

// Phase 2's best prefix ending at one position: its (sum, peak) and start. The peak of a new
// best sum waits until a tie on the sum needs it (or the end is done), since, without a memory
// limit, most candidates lose on the sum and computing their memory would be wasted.
class BestPrefix {
 public:
  BestPrefix(const StageEvaluator& ev, const std::vector<SumPeak>& prev, int stage_idx, int end)
      : ev_(ev), prev_(prev), stage_idx_(stage_idx), end_(end) {}
  /// Offers the prefix through `start` with the stage `time` (fitting, within the bottleneck):
  /// kept when its (sum, peak) is smaller than the best so far, as a scan in decreasing start
  /// order that keeps the first of equals.
  void offer(int start, const StageChoice& time) {
    const int64_t sum = prev_[start].sum + time.cost_ns;
    if (sum > best_.sum) return;  // worse whatever its memory
    if (sum < best_.sum) {
      best_ = {sum, prev_[start].peak};
      start_ = start;
      time_ = time;
      peak_known_ = false;
      return;
    }
    resolve();
    if (prev_[start].peak >= best_.peak) return;  // not smaller whatever the stage's memory
    const SumPeak value{sum, std::max(prev_[start].peak, ev_.chosen_memory_bytes(
                                                             time, stage_idx_, start, end_))};
    if (value < best_) {
      best_ = value;
      start_ = start;
    }
  }
  /// The best sum so far (kInfinite: none offered).
  int64_t sum() const { return best_.sum; }
  /// The best value with its peak resolved, and its start (-1: none offered).
  const SumPeak& value() {
    resolve();
    return best_;
  }
  int start() const { return start_; }

 private:
  void resolve() {
    if (peak_known_) return;
    best_.peak = std::max(best_.peak, ev_.chosen_memory_bytes(time_, stage_idx_, start_, end_));
    peak_known_ = true;
  }

  const StageEvaluator& ev_;
  const std::vector<SumPeak>& prev_;
  int stage_idx_;
  int end_;
  SumPeak best_;
  int start_ = -1;
  StageChoice time_;
  bool peak_known_ = true;
};

// Phase 2: among splits with every stage cost <= bottleneck, the lexicographically smallest
// (sum, peak); returns the boundaries.
std::vector<int> best_under_bottleneck(const StageEvaluator& ev, int64_t bottleneck) {
  const int layers = ev.num_layers();
  const int pp = ev.pp();
  std::vector<SumPeak> prev(layers + 1), cur(layers + 1);
  prev[0] = {0, 0};
  const std::vector<std::pair<int, int>> bands = end_bands(ev, bottleneck);
  Parents parent(bands);
  std::pair<int, int> cur_written{0, -1}, prev_written{0, 0};
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    reset(&cur, cur_written, SumPeak{});
    const auto [j_lo, j_hi] = bands[stage_idx];
    FirstStart first_start(ev, stage_idx, bottleneck);
    for (int j = j_lo; j <= j_hi; ++j) {
      BestPrefix best(ev, prev, stage_idx, j);
      for (int i = j - 1, start = first_start.at(j); i >= start; --i) {
        // A prefix that cannot reach the best sum so far even with the cheapest stage.
        if (prev[i].sum == kInfinite) continue;
        const int64_t least_ns = ev.least_cost_ns(stage_idx, i, j);
        if (least_ns > bottleneck || prev[i].sum + least_ns > best.sum()) continue;
        const StageChoice choice = ev.evaluate_time(stage_idx, i, j);
        if (choice.fits && choice.cost_ns <= bottleneck) best.offer(i, choice);
      }
      cur[j] = best.value();
      if (best.start() >= 0) parent.at(stage_idx, j) = best.start();
    }
    std::swap(prev, cur);
    cur_written = prev_written;
    prev_written = bands[stage_idx];
  }
  PIPEPLAN_ASSERT(prev[layers].sum != kInfinite, "phase 2 found no split under the bottleneck");
  return parent.split(layers);
}

// The split whose worst stage needs the least memory (ignoring time): explains infeasibility.
std::vector<int> least_memory_split(const StageEvaluator& ev) {
  const int layers = ev.num_layers();
  const int pp = ev.pp();
  std::vector<int64_t> prev(layers + 1, kInfinite), cur(layers + 1, kInfinite);
  prev[0] = 0;
  std::vector<std::pair<int, int>> bands;  // every end a stage can have, ignoring memory
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx)
    bands.emplace_back(stage_idx == pp - 1 ? layers : stage_idx + 1, layers - (pp - stage_idx - 1));
  Parents parent(bands);
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    std::fill(cur.begin(), cur.end(), kInfinite);
    for (int j = bands[stage_idx].first; j <= bands[stage_idx].second; ++j)
      for (int i = j - 1; i >= stage_idx; --i) {
        if (ev.memory_lower_bound_bytes(stage_idx, i, j) >= cur[j]) break;
        if (prev[i] >= cur[j]) continue;
        const int64_t value = std::max(prev[i], ev.evaluate(stage_idx, i, j).memory_bytes);
        if (value < cur[j]) {
          cur[j] = value;
          parent.at(stage_idx, j) = i;
        }
      }
    std::swap(prev, cur);
  }
  return parent.split(layers);
}

// A quick proof that no split fits, from the monotone memory lower bound alone: packing
// stages greedily under it is exact, so when the first pp − 1 stages, packed as full as the
// device allows, leave the last stage more than fits (or a layer fits in no stage at all),
// every split has a stage that does not fit. Returns the reason, or "".
std::string memory_certificate(const StageEvaluator& ev, int64_t* needed_bytes) {
  const int layers = ev.num_layers();
  const int pp = ev.pp();
  const int64_t device = ev.device_memory_bytes();
  int pos = 0;
  for (int stage_idx = 0; stage_idx + 1 < pp; ++stage_idx) {
    *needed_bytes = ev.memory_lower_bound_bytes(stage_idx, pos, pos + 1);
    if (*needed_bytes > device)
      return detail::concat("layer ", pos, " alone needs at least ",
                            needs_text(*needed_bytes, device));
    // The last end that fits.
    pos = last_passing(pos + 1, layers - (pp - stage_idx - 1), [&](int end) {
      return ev.memory_lower_bound_bytes(stage_idx, pos, end) <= device;
    });
  }
  *needed_bytes = ev.memory_lower_bound_bytes(pp - 1, pos, layers);
  if (*needed_bytes <= device) return "";
  const std::string first_stages =
      pp == 2 ? "stage 0 can" : detail::concat("stages 0..", pp - 2, " can");
  return detail::concat(first_stages, " hold at most layers 0..", pos - 1, " within ",
                        format_size(device), " each, leaving layers ", pos, "..", layers - 1,
                        " to stage ", pp - 1, ": at least ", needs_text(*needed_bytes, device));
}

// evaluate_boundaries, with `qualifier` after the infeasibility reason's memory figures.
PartitionResult evaluate_split(const StageEvaluator& evaluator, const std::vector<int>& boundaries,
                               const char* qualifier) {
  PIPEPLAN_ASSERT(static_cast<int>(boundaries.size()) == evaluator.pp() + 1);
  PartitionResult result;
  result.boundaries = boundaries;
  int worst_stage = 0;
  for (int stage_idx = 0; stage_idx < evaluator.pp(); ++stage_idx) {
    const StageChoice choice =
        evaluator.evaluate(stage_idx, boundaries[stage_idx], boundaries[stage_idx + 1]);
    result.checkpoint.push_back(choice.checkpoint);
    result.bottleneck_ns = std::max(result.bottleneck_ns, choice.cost_ns);
    result.total_ns += choice.cost_ns;
    if (choice.memory_bytes > result.peak_memory_bytes) worst_stage = stage_idx;
    result.peak_memory_bytes = std::max(result.peak_memory_bytes, choice.memory_bytes);
  }
  result.feasible = result.peak_memory_bytes <= evaluator.device_memory_bytes();
  if (!result.feasible) {
    result.needed_bytes = result.peak_memory_bytes;
    result.reason = detail::concat(
        "stage ", worst_stage, " needs ",
        needs_text(result.peak_memory_bytes, evaluator.device_memory_bytes()), qualifier);
    if (evaluator.pp() > 1) result.reason += " (split " + split_text(boundaries) + ")";
  }
  return result;
}

}  // namespace

bool PartitionObjective::operator<(const PartitionObjective& other) const {
  return std::tie(bottleneck_ns, total_ns, peak_memory_bytes) <
         std::tie(other.bottleneck_ns, other.total_ns, other.peak_memory_bytes);
}

bool PartitionObjective::operator==(const PartitionObjective& other) const {
  return bottleneck_ns == other.bottleneck_ns && total_ns == other.total_ns &&
         peak_memory_bytes == other.peak_memory_bytes;
}

PartitionObjective objective(const PartitionResult& result) {
  return {result.bottleneck_ns, result.total_ns, result.peak_memory_bytes};
}

PartitionResult evaluate_boundaries(const StageEvaluator& evaluator,
                                    const std::vector<int>& boundaries) {
  return evaluate_split(evaluator, boundaries, "");
}

bool proven_infeasible(const StageEvaluator& evaluator, PartitionResult* proof) {
  if (evaluator.pp() == 1) {  // the one split is its own proof
    *proof = evaluate_boundaries(evaluator, {0, evaluator.num_layers()});
    return !proof->feasible;
  }
  *proof = PartitionResult{};
  proof->reason = memory_certificate(evaluator, &proof->needed_bytes);
  return !proof->reason.empty();
}

PartitionResult optimal_partition(const StageEvaluator& evaluator) {
  PartitionResult proof;
  if (proven_infeasible(evaluator, &proof)) return proof;
  const int64_t bottleneck = optimal_bottleneck(evaluator);
  if (bottleneck == kInfinite) {
    PartitionResult result =
        evaluate_split(evaluator, least_memory_split(evaluator),
                       evaluator.pp() > 1 ? " even in the split that needs least memory" : "");
    PIPEPLAN_ASSERT(!result.feasible, "phase 1 missed a split that fits");
    return result;
  }
  PartitionResult result =
      evaluate_boundaries(evaluator, best_under_bottleneck(evaluator, bottleneck));
  PIPEPLAN_ASSERT(result.feasible && result.bottleneck_ns == bottleneck);
  return result;
}

}  // namespace pipeplan
