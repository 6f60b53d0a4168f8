// Lower bounds on the simulated iteration time (the paths are documented in bounds.h).
#include "planner/bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "planner/memory_model.h"
#include "planner/partition.h"
#include "planner/time_model.h"

namespace pipeplan {
namespace {

// The collective that reduces a candidate's gradients: ZeRO-1 reduce-scatters them.
Collective gradient_reduction(const Candidate& candidate) {
  return candidate.zero == 1 ? Collective::kReduceScatter : Collective::kAllReduce;
}

// min over t >= 0 with Σ t = total of max_k (Σ_{s<k} t_s + m·t_k): total / (1 − (1 − 1/m)^pp).
double path_bound(double total, int num_micro_batches, int pp) {
  const double keep = 1.0 - 1.0 / num_micro_batches;
  return total / (1.0 - std::pow(keep, pp));
}

// Stage 0's gradient reduction, optimizer step (ZeRO-1: over 1/dp of the parameters) and
// all-gather (ZeRO-1) over at least layer 0, which end every path: layer 0's gradients complete
// last, so the bucket holding them is reduced after the last backward even with overlap.
double tail_ms(const PlanningContext& context, const LayerTable& table,
               const Candidate& candidate) {
  const CollectiveCosts costs = collective_costs(*context.profile);
  const int64_t bytes = table.param_count(0, 1) * kGradientBytesPerParameter;
  const int dp = candidate.dp;
  const double gather =
      candidate.zero == 1
          ? cheapest_collective_ms(costs, Collective::kAllGather, bytes, dp, context.cluster)
          : 0;
  return cheapest_collective_ms(costs, gradient_reduction(candidate), bytes, dp, context.cluster) +
         gather + to_ms(table.optimizer_ns(0, 1)) / (candidate.zero == 1 ? dp : 1);
}

// Probes of min_path_ns: whether pp stages can split the layers with every
// max_k (Σ_{s<k} c_s + m·c_k) <= limit, each stage greedily as long as the limit allows and
// leaving a layer for each later stage. Greedy is exact here: a later start only lowers a
// stage's value (m >= 1), so the greedy ends lie at or after those of any split that fits.
class PathProbe {
 public:
  PathProbe(const LayerTable& table, int pp, int64_t m, bool recompute, int64_t boundary_ns)
      : pp_(pp), m_(m), boundary_ns_(boundary_ns), prefix_ns_(table.num_layers() + 1) {
    // Σ c over layers [0, position), once per call instead of at every probe's every step.
    for (int pos = 0; pos <= table.num_layers(); ++pos)
      prefix_ns_[pos] = table.path_compute_ns(0, pos) + (recompute ? table.fwd_ns(0, pos) : 0);
  }

  /// Σ c over every layer.
  int64_t path_ns() const { return prefix_ns_.back(); }

  /// Whether `limit` fits. When it does, *bracket is the largest stage value of the greedy
  /// split (<= limit): that split fits it, so it fits too. When it does not, *bracket is the
  /// least value above `limit` that would lengthen a greedy stage: below it the greedy split is
  /// the same, so it fails too.
  bool fits(int64_t limit, int64_t* bracket) const {
    const int layers = static_cast<int>(prefix_ns_.size()) - 1;
    int64_t used = 0;
    int64_t next = kNone;
    int start = 0;
    for (int stage_idx = 0; stage_idx < pp_; ++stage_idx) {
      const int64_t chain = prefix_ns_[start] + stage_idx * boundary_ns_;
      auto value = [&](int end) { return chain + m_ * (prefix_ns_[end] - prefix_ns_[start]); };
      const int last_end = layers - (pp_ - stage_idx - 1);
      if (value(start + 1) > limit) {
        *bracket = std::min(next, value(start + 1));
        return false;
      }
      // The last end up to last_end that fits (fits holds up to some end, then fails).
      const int end = last_passing(start + 1, last_end, [&](int e) { return value(e) <= limit; });
      used = std::max(used, value(end));
      if (end < last_end) next = std::min(next, value(end + 1));
      if (stage_idx == pp_ - 1) {
        *bracket = end == layers ? used : next;
        return end == layers;
      }
      start = end;
    }
    *bracket = next;
    return false;
  }

 private:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int pp_;
  int64_t m_;
  int64_t boundary_ns_;
  std::vector<int64_t> prefix_ns_;
};

// What follows a stage's last compute in every iteration: its gradient reduction — all of it
// without overlap; with overlap at least the bucket holding its chunk 0's first layer, which is
// ready only when that last compute (chunk 0's last backward or W) ends — then the optimizer
// step and ZeRO-1's all-gather.
double stage_tail_ms(const SimulationInput& input, const StageCosts& stage) {
  double reduction = stage.allreduce_ms;
  if (input.overlap_allreduce && !stage.buckets.empty()) {
    reduction = 0;
    for (const BucketPrediction& bucket : stage.buckets)
      if (bucket.chunk == 0 && bucket.ready_fraction >= 1)
        reduction = std::max(reduction, bucket.comm_ms);
  }
  return reduction + stage.optimizer_ms + (input.all_gather ? stage.allgather_ms : 0);
}

// iteration_lower_bound_ms(input) of interleaved-1f1b: the paths through the chunks and each
// stage's work (bounds.h).
double interleaved_lower_bound_ms(const SimulationInput& input) {
  const int m = input.num_micro_batches;
  const double tail = stage_tail_ms(input, input.stages[0]);
  std::vector<double> stage_work_ms(input.pp, 0);
  double bound = 0;
  double chain = 0;  // Σ_{c<k}: forward, recompute, backward and the transfers between them
  for (size_t chunk = 0; chunk < input.chunks.size(); ++chunk) {
    const StageCosts& c = input.chunks[chunk];
    const double work = c.fwd_ms + c.recompute_ms + c.bwd_ms;
    stage_work_ms[chunk % input.pp] += work;
    bound = std::max(bound, chain + m * work + tail);
    chain += work;
    if (chunk + 1 < input.chunks.size())
      chain += input.activation_ms[0][chunk] + input.gradient_ms[0][chunk];
  }
  bound = std::max(bound, chain + tail);
  for (int stage_idx = 0; stage_idx < input.pp; ++stage_idx) {
    const StageCosts& s = input.stages[stage_idx];
    bound = std::max(bound, m * stage_work_ms[stage_idx] + stage_tail_ms(input, s));
  }
  return bound;
}

}  // namespace

int64_t least_boundary_ns(const Cluster& cluster, const LayerTable& table) {
  const LinkCosts links = link_costs(cluster);
  const int64_t bytes = table.min_inner_boundary_bytes();
  double least_ms =
      transfer_ms(bytes, links.intra_node_bandwidth_bytes_per_s, links.latency_ms);
  if (cluster.devices_per_node < cluster.devices)
    least_ms = std::min(
        least_ms, transfer_ms(bytes, links.inter_node_bandwidth_bytes_per_s, links.latency_ms));
  // Whole ns rounded down (to_ns rounds): the bound must not pass the simulated transfers.
  return std::max<int64_t>(0, 2 * to_ns(least_ms) - 2);
}

int64_t min_path_ns(const LayerTable& table, int pp, int num_micro_batches, bool recompute,
                    int64_t boundary_ns) {
  const int layers = table.num_layers();
  const PathProbe probe(table, pp, num_micro_batches, recompute, boundary_ns);
  const int64_t total = table.compute_ns(0, layers) + (recompute ? table.fwd_ns(0, layers) : 0) +
                        (pp - 1) * boundary_ns;
  // Any split fits m · total (path_compute_ns <= compute_ns) (each path is at most that), and
  // its greedy split's largest value; lo = −1 stands for "nothing fits".
  int64_t lo = -1;
  int64_t hi = total * num_micro_batches;
  const bool fits_all = probe.fits(hi, &hi);
  PIPEPLAN_ASSERT(fits_all);
  // Bisection on the value, where each probe also moves its side of the interval to the value
  // that decides it (PathProbe::fits): the answer, the least value that fits, is the same in
  // fewer probes. The first probe tries the bound for continuous stage times, usually close
  // below the answer.
  int64_t mid = static_cast<int64_t>(
      path_bound(static_cast<double>(probe.path_ns()), num_micro_batches, pp));
  while (hi - lo > 1) {
    if (mid <= lo || mid >= hi) mid = lo + (hi - lo) / 2;
    int64_t bracket = 0;
    if (probe.fits(mid, &bracket))
      hi = bracket;
    else
      lo = bracket - 1;
    mid = -1;
  }
  return hi;
}

double refined_iteration_lower_bound_ms(const PlanningContext& context, const LayerTable& table,
                                        const Candidate& candidate, int64_t path_ns) {
  return std::max(iteration_lower_bound_ms(context, table, candidate),
                  to_ms(path_ns) + tail_ms(context, table, candidate));
}

double iteration_lower_bound_ms(const PlanningContext& context, const LayerTable& table,
                                const Candidate& candidate) {
  const int layers = table.num_layers();
  const int m = candidate.num_micro_batches;
  const int pp = candidate.pp;
  int64_t total_ns = table.compute_ns(0, layers);
  // zb-h1 (a split table): the paths back to stage 0 run B alone, not W.
  int64_t path_ns = table.path_compute_ns(0, layers);
  if (candidate.policy == CheckpointPolicy::kAll) {
    total_ns += table.fwd_ns(0, layers);
    path_ns += table.fwd_ns(0, layers);
  }
  const double total = to_ms(total_ns);
  const double path_total = to_ms(path_ns);
  const double slowest_stage = std::max(total / pp, to_ms(table.max_layer_compute_ns()));
  // interleaved-1f1b: the path runs through the pp·V chunks (bounds.h).
  const int chunks = pp * candidate.virtual_stages;
  double path = std::max({path_total, path_bound(path_total, m, chunks), m * slowest_stage});
  if (candidate.schedule == Schedule::kGpipe)
    path = std::max(path, total + (m - 1) * slowest_stage);
  const double tail = tail_ms(context, table, candidate);
  // Σ over stages of their collectives that the simulator counts busy: the bytes add up, the
  // latency term comes once per stage at least. An overlapped reduction is busy only where it
  // is exposed, so it counts only without overlap; ZeRO-1's all-gather always.
  const CollectiveCosts costs = collective_costs(*context.profile);
  const int64_t bytes = table.param_count(0, layers) * kGradientBytesPerParameter;
  auto summed = [&](Collective collective) {
    return cheapest_collective_ms(costs, collective, bytes, candidate.dp, context.cluster) +
           cheapest_collective_ms(costs, collective, 0, candidate.dp, context.cluster) * (pp - 1);
  };
  double collectives = context.data_parallel.overlap ? 0 : summed(gradient_reduction(candidate));
  if (candidate.zero == 1) collectives += summed(Collective::kAllGather);
  const double optimizer =
      to_ms(table.optimizer_ns(0, layers)) / (candidate.zero == 1 ? candidate.dp : 1);
  const double average_busy = (m * total + collectives + optimizer) / pp;
  return std::max(path + tail, average_busy);
}

double iteration_lower_bound_ms(const SimulationInput& input) {
  if (input.virtual_stages > 1) return interleaved_lower_bound_ms(input);
  const int m = input.num_micro_batches;
  const std::vector<StageCosts>& stages = input.stages;
  const double tail = stage_tail_ms(input, stages[0]);
  double bound = 0;
  double chain = 0;  // Σ_{s<k}: forward, recompute, backward and the transfers between them
  double slowest = 0;
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    const StageCosts& s = stages[stage];
    // zb-h1's W is not on the path back to stage 0: B alone sends the gradient upstream, and
    // stage k runs min(m, k + 1) of its Ws after its last B (plans/schedule.h).
    const double path_work = s.fwd_ms + s.recompute_ms + s.bwd_ms;
    const double work = path_work + s.bwd_weight_ms;
    const int k = static_cast<int>(stage);
    const double before_last_b = m * path_work + (m - std::min(m, k + 1)) * s.bwd_weight_ms;
    slowest = std::max(slowest, work);
    bound = std::max(
        {bound, m * work + stage_tail_ms(input, s), chain + before_last_b + tail});
    chain += path_work;
    if (stage + 1 < stages.size())
      chain += input.activation_ms[0][stage] + input.gradient_ms[0][stage];
  }
  bound = std::max(bound, chain + tail);
  if (input.schedule == Schedule::kGpipe) bound = std::max(bound, chain + (m - 1) * slowest + tail);
  return bound;
}

}  // namespace pipeplan
