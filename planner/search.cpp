// The search: enumerate candidates, order them by a lower bound on their iteration time,
// partition, place and simulate the promising ones, keep the top K by their drawn iterations.
#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "common/error.h"
#include "common/limits.h"
#include "common/units.h"
#include "planner/bounds.h"
#include "planner/interleaved_partition.h"
#include "planner/memory_model.h"
#include "planner/partial_checkpoint.h"
#include "planner/search_space.h"

namespace pipeplan {
namespace {

// Bounds are computed in another order of floating-point additions than the simulation; a
// candidate is skipped only when its bound is below the K-th best by more than this share.
constexpr double kBoundSlack = 1e-9;

// Plans are ranked by whole nanoseconds of their iteration (`better`): one more than 2 ns
// later than another ranks after it.
constexpr double kRankingGapMs = 2e-6;

struct Entry {
  Candidate candidate;
  double bound_ms = 0;
};

// What the search does next with a candidate; each step gives a bound at least as tight.
enum class Step {
  kRefine,     // its bound is iteration_lower_bound_ms: compute the whole-layer one
  kPartition,  // partition it; a feasible split gives the split's bound
  kSimulate,   // simulate its split
};

// A candidate in the search's queue: smallest bound first, then enumeration order (`idx`,
// into the entries), so that the search is deterministic.
struct Queued {
  double bound_ms = 0;
  int idx = 0;
  Step step = Step::kRefine;
  bool operator>(const Queued& other) const {
    return std::tie(bound_ms, idx) > std::tie(other.bound_ms, other.idx);
  }
};

using FamilyKey = std::tuple<int, int, int64_t>;  // dp, pp, micro-batch size
// What an interleaved candidate's chunk split depends on: dp, pp, micro-batch size, V, layout,
// whether every chunk recomputes.
using ChunkSplitKey = std::tuple<int, int, int64_t, int, Layout, bool>;

// What partitioning a candidate found: no split fits, the split gives a plan already seen (under
// another policy), or a new plan, with the lower bound on its iteration its split gives.
enum class Outcome { kInfeasible, kDuplicate, kNewPlan };
struct Evaluation {
  Outcome outcome = Outcome::kInfeasible;
  double bound_ms = 0;  // kNewPlan only
};

struct Family {
  int unevaluated = 0;
  bool feasible = false;
  std::string reason;
  int64_t needed_bytes = 0;
};

}  // namespace

// The search space's helpers (planner/search_space.h), shared with the inference search.
std::vector<int64_t> divisors(int64_t value) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= value; ++d) {
    if (value % d != 0) continue;
    low.push_back(d);
    if (d * d != value) high.push_back(value / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// Whether interleaved-1f1b is the only schedule searched.
static bool interleaved_only(const SearchOptions& options) {
  return options.schedules.size() == 1 && options.schedules[0] == Schedule::kInterleaved1F1B;
}

// The stages an explicit --partition gives: its ranges, or with interleaved-1f1b alone its
// pp·V chunks' pp (one V needed).
static int explicit_stages(const SearchOptions& options) {
  const int ranges = static_cast<int>(options.partition.boundaries.size()) - 1;
  if (!interleaved_only(options)) return ranges;
  PIPEPLAN_CHECK(options.virtual_stages.size() == 1, "--partition: ", ranges,
                 " ranges with --schedule interleaved-1f1b: expected --virtual-stages too (the "
                 "ranges are the pp*V chunks)");
  const int virtual_stages = options.virtual_stages[0];
  PIPEPLAN_CHECK(ranges % virtual_stages == 0, "--partition: ", ranges, " ranges for --virtual-stages ",
                 virtual_stages, ": expected pp*", virtual_stages, " chunk ranges (a multiple of ",
                 virtual_stages, ")");
  return ranges / virtual_stages;
}

// The pp values to search: divisors of the device count up to the layer count, narrowed.
std::vector<int> pipeline_depths(const PlanningContext& context, const SearchOptions& options) {
  const int devices = context.cluster.devices;
  const int layers = context.profile->model.num_layers;
  std::optional<int> pp = options.pp;
  if (options.partition.method == PartitionMethod::kExplicit) {
    const int ranges = explicit_stages(options);
    PIPEPLAN_CHECK(!pp || *pp == ranges, "--partition: ", ranges, " ranges for --pp ", *pp,
                   " (give one range per stage)");
    pp = ranges;
  }
  if (options.dp) {
    PIPEPLAN_CHECK(devices % *options.dp == 0, "--dp: ", *options.dp, " does not divide --devices ",
                   devices);
    PIPEPLAN_CHECK(context.global_batch % *options.dp == 0, "--dp: ", *options.dp,
                   " does not divide --global-batch ", context.global_batch);
    PIPEPLAN_CHECK(!pp || *pp * *options.dp == devices, "--dp ", *options.dp, " times --pp ", *pp,
                   " is not --devices ", devices);
    pp = devices / *options.dp;
  }
  if (pp) {
    PIPEPLAN_CHECK(devices % *pp == 0, "--pp: ", *pp, " does not divide --devices ", devices);
    PIPEPLAN_CHECK(*pp <= layers, "--pp: ", *pp, " stages for a model of ", layers,
                   " layers (choose --pp <= ", layers, ")");
    return {*pp};
  }
  std::vector<int> out;
  for (int64_t depth : divisors(devices))
    if (depth <= layers) out.push_back(static_cast<int>(depth));
  return out;
}

// The micro-batch sizes for one dp: divisors of global_batch / dp (or the forced one) that make
// at most kMaxMicroBatches micro-batches.
std::vector<int64_t> micro_batch_sizes(int64_t global_batch, int dp, const SearchOptions& options) {
  if (global_batch % dp != 0) return {};
  const int64_t per_replica = global_batch / dp;
  std::vector<int64_t> out;
  for (int64_t b : options.micro_batch_size ? std::vector<int64_t>{*options.micro_batch_size}
                                            : divisors(per_replica))
    if (per_replica % b == 0 && per_replica / b <= kMaxMicroBatches) out.push_back(b);
  return out;
}

// Checks that at least one (dp, pp, b) exists; names the flag that excludes them otherwise.
void check_some_family(const PlanningContext& context, const SearchOptions& options,
                       const std::vector<int>& depths) {
  const int64_t batch = context.global_batch;
  for (int pp : depths)
    if (!micro_batch_sizes(batch, context.cluster.devices / pp, options).empty()) return;
  std::string dps;
  for (int pp : depths)
    dps += detail::concat(dps.empty() ? "" : ", ", context.cluster.devices / pp);
  PIPEPLAN_CHECK(!options.micro_batch_size, "--micro-batch-size: ", *options.micro_batch_size,
                 " times dp does not divide --global-batch ", batch, " for any dp in {", dps,
                 "} into at most ", kMaxMicroBatches,
                 " micro-batches (choose a micro-batch size dividing global_batch / dp)");
  PIPEPLAN_CHECK(false, "--global-batch: ", batch, " is not divisible by any dp in {", dps,
                 "} (choose a multiple of dp)");
}

namespace {

class Search {
 public:
  Search(const PlanningContext& context, const SearchOptions& options)
      : context_(context),
        options_(options),
        // zb-h1 needs the profile's B/W split; asked for alone, a profile without it is refused
        // (by its layer table), else zb-h1 is left out.
        zero_bubble_searched_(context.profile->has_backward_split() ||
                              options.schedules.size() == 1) {}

  // Best first: the candidate with the smallest lower bound on its iteration takes its next
  // step, which tightens its bound (the whole-layer bound, then its split's), or simulates
  // it. Once the smallest bound cannot enter the top K, nothing left can: the top K are the
  // exhaustive search's, found with the fewest partitions and simulations the bounds allow.
  SearchResult run() {
    entries_ = enumerate();
    result_.candidates = static_cast<int>(entries_.size());
    // Sorted by bound: when the least cannot beat the rival, no plan of this search is wanted
    // but its best, and the bound says enough of that. Which families cannot fit is not
    // proven either: at 10,000 layers the proofs took longer than the search they save.
    if (options_.prune && options_.rival_samples_per_s && !entries_.empty() &&
        !within(entries_.front().bound_ms, rival_iteration_ms())) {
      result_.pruned = result_.candidates;
      result_.unsearched_bound_ms = entries_.front().bound_ms;
      return std::move(result_);
    }
    splits_.resize(entries_.size());
    for (size_t idx = 0; idx < entries_.size(); ++idx)
      queue_.push({entries_[idx].bound_ms, static_cast<int>(idx), Step::kRefine});
    while (!queue_.empty() && could_enter_top(queue_.top().bound_ms)) {
      const Queued next = queue_.top();
      queue_.pop();
      take_step(next);
    }
    // Skipped candidates cannot be among the best, but the user still learns which families
    // cannot fit at all, as far as the quick memory proof shows.
    for (; !queue_.empty(); queue_.pop()) {
      ++result_.pruned;
      if (queue_.top().step != Step::kSimulate)
        prove_infeasible(entries_[queue_.top().idx].candidate);
    }
    report_infeasible_families();
    result_.plans = std::move(top_);
    return std::move(result_);
  }

 private:
  void take_step(const Queued& queued) {
    Candidate& candidate = entries_[queued.idx].candidate;
    switch (queued.step) {
      case Step::kRefine:
        queue_.push({std::max(queued.bound_ms, whole_layer_bound_ms(candidate)), queued.idx,
                     Step::kPartition});
        break;
      case Step::kPartition: {
        const Evaluation evaluation = evaluate(&candidate, &splits_[queued.idx]);
        if (evaluation.outcome == Outcome::kNewPlan)
          queue_.push(
              {std::max(queued.bound_ms, evaluation.bound_ms), queued.idx, Step::kSimulate});
        break;
      }
      case Step::kSimulate:
        simulate(candidate, splits_[queued.idx]);
        splits_[queued.idx] = {};
        break;
    }
  }

  // The layer table of the candidate's micro-batch size; zb-h1's splits each backward into B
  // and W (LayerTable's split_backward).
  const LayerTable& table(const Candidate& candidate) {
    const bool split = candidate.schedule == Schedule::kZeroBubbleH1;
    const auto key = std::make_pair(candidate.micro_batch_size, split);
    auto it = tables_.find(key);
    if (it == tables_.end())
      it = tables_
               .emplace(key, std::make_unique<LayerTable>(*context_.profile,
                                                          candidate.micro_batch_size,
                                                          context_.optimizer, split))
               .first;
    return *it->second;
  }

  // The send times of the candidate's layer table, shared by its evaluators.
  const std::shared_ptr<const SendTimes>& sends(const Candidate& candidate) {
    const LayerTable& layer_table = table(candidate);
    std::shared_ptr<const SendTimes>& times = sends_[&layer_table];
    if (!times) times = send_times(layer_table, link_costs(context_.cluster));
    return times;
  }

  std::vector<Entry> enumerate() {
    const std::vector<int> depths = pipeline_depths(context_, options_);
    check_some_family(context_, options_, depths);
    std::vector<Entry> entries;
    for (int pp : depths) {
      const int dp = context_.cluster.devices / pp;
      for (int64_t b : micro_batch_sizes(context_.global_batch, dp, options_)) {
        if (!plannable(dp, pp, b)) continue;
        const int num_micro_batches = static_cast<int>(context_.global_batch / (dp * b));
        for (Schedule schedule : options_.schedules)
          for (int virtual_stages : virtual_stage_choices(schedule, pp, num_micro_batches))
            for (CheckpointPolicy policy : options_.policies)
              for (int zero : options_.zero) {
                if (pp == 1 && same_as_one_f_one_b(schedule)) continue;
                if (schedule == Schedule::kZeroBubbleH1 && !zero_bubble_searched_) continue;
                if (virtual_stages > 1 && same_as_needed(policy)) continue;
                if (zero == 1 && dp == 1) continue;  // no replicas to shard over
                Candidate c{dp,     pp,     b, num_micro_batches, schedule, policy,
                            Layout::kReplicaMajor, virtual_stages, zero};
                if (zero == 1 && options_.zero.size() > 1 && !replicated_cannot_fit(c)) continue;
                entries.push_back({c, iteration_lower_bound_ms(context_, table(c), c)});
                ++families_[{dp, pp, b}].unevaluated;
              }
      }
    }
    PIPEPLAN_CHECK(!entries.empty() || !interleaved_only(options_) || interleaved_refusal_.empty(),
                   "--schedule interleaved-1f1b: ", interleaved_refusal_);
    PIPEPLAN_CHECK(!entries.empty() || options_.zero != std::vector<int>{1},
                   "--zero 1: every candidate on ", context_.cluster.devices,
                   " devices has dp = 1: expected room for at least 2 replicas of a stage (lower "
                   "--pp or plan more --devices)");
    auto order = [](const Entry& a, const Entry& b) {
      const Candidate& x = a.candidate;
      const Candidate& y = b.candidate;
      return std::make_tuple(a.bound_ms, x.pp, x.micro_batch_size, x.schedule, x.virtual_stages,
                             x.policy, x.zero) < std::make_tuple(b.bound_ms, y.pp,
                                                                 y.micro_batch_size, y.schedule,
                                                                 y.virtual_stages, y.policy, y.zero);
    };
    std::sort(entries.begin(), entries.end(), order);
    return entries;
  }

  // The V a (pp, m) family is searched with: {1} for the schedules other than interleaved-1f1b;
  // for it each V asked for that the plan's validation accepts (pp >= 2, m a multiple of pp,
  // pp·V <= layers, m·pp·V within kMaxPipelineMicroBatches, an explicit split of pp·V ranges).
  // The first reason one is left out is kept: asked for alone, a search with none says it.
  std::vector<int> virtual_stage_choices(Schedule schedule, int pp, int num_micro_batches) {
    if (schedule != Schedule::kInterleaved1F1B) return {1};
    std::string reason;
    const int layers = context_.profile->model.num_layers;
    if (pp < 2)
      reason = detail::concat("pp=", pp, ": expected pp >= 2 (one stage has no pipeline to interleave)");
    else if (num_micro_batches % pp != 0)
      reason = detail::concat("pp=", pp, " with ", num_micro_batches,
                              " micro-batches: expected a multiple of pp (choose --global-batch, "
                              "--dp or --micro-batch-size so that global_batch / (dp * b) is)");
    std::vector<int> out;
    for (int virtual_stages : reason.empty() ? options_.virtual_stages : std::vector<int>{}) {
      const int64_t chunks = int64_t{pp} * virtual_stages;
      const bool explicit_split = options_.partition.method == PartitionMethod::kExplicit;
      if (chunks > layers)
        reason = detail::concat("pp=", pp, " V=", virtual_stages, ": ", chunks,
                                " chunks for a model of ", layers,
                                " layers (choose a smaller --virtual-stages or --pp)");
      else if (chunks * num_micro_batches > kMaxPipelineMicroBatches)
        reason = detail::concat("pp=", pp, " V=", virtual_stages, " with ", num_micro_batches,
                                " micro-batches: expected at most ", kMaxPipelineMicroBatches,
                                " micro-batches times chunks");
      else if (explicit_split && static_cast<int>(options_.partition.boundaries.size()) != chunks + 1)
        reason = detail::concat("--partition has ", options_.partition.boundaries.size() - 1,
                                " ranges: expected pp*V = ", chunks);
      else
        out.push_back(virtual_stages);
    }
    if (out.empty() && interleaved_refusal_.empty()) interleaved_refusal_ = reason;
    return out;
  }

  // Whether the family can be planned: the profile at micro-batch size b (unplannable_reason)
  // and at most kMaxPipelineMicroBatches micro-batches times stages. A family that cannot is
  // reported infeasible with the reason.
  bool plannable(int dp, int pp, int64_t b) {
    auto it = unplannable_.find(b);
    if (it == unplannable_.end())
      it = unplannable_.emplace(b, unplannable_reason(*context_.profile, b, context_.optimizer))
               .first;
    std::string reason = it->second;
    const int64_t num_micro_batches = context_.global_batch / (dp * b);
    if (reason.empty() && pp * num_micro_batches > kMaxPipelineMicroBatches)
      reason = detail::concat(num_micro_batches, " micro-batches of ", pp,
                              " stages: expected at most ", kMaxPipelineMicroBatches,
                              " micro-batches times stages (the simulator's limit)");
    if (!reason.empty()) families_[{dp, pp, b}].reason = reason;
    return reason.empty();
  }

  // With one stage, GPipe runs the same actions as 1F1B in another order and holds every
  // micro-batch's activations instead of one, and zb-h1 runs 1F1B's with each backward split in
  // two: the same plan, worse. Only 1F1B is listed (as the schedule of a single stage) unless
  // GPipe or zb-h1 alone was asked for.
  bool same_as_one_f_one_b(Schedule schedule) const {
    return schedule != Schedule::kOneFOneB &&
           std::find(options_.schedules.begin(), options_.schedules.end(),
                     Schedule::kOneFOneB) != options_.schedules.end();
  }

  // interleaved-1f1b splits its chunks for time alone, the same split under kNone and kNeeded
  // (interleaved_partition): kNeeded gives kNone's plan when every stage fits without
  // checkpointing, and kNone none otherwise. Only kNeeded is listed when both are searched.
  bool same_as_needed(CheckpointPolicy policy) const {
    return policy == CheckpointPolicy::kNone &&
           std::find(options_.policies.begin(), options_.policies.end(),
                     CheckpointPolicy::kNeeded) != options_.policies.end();
  }

  // The candidate's bound with whole layers per stage (refined_iteration_lower_bound_ms),
  // whose path term is computed once per table, pp, micro-batch count and recompute.
  double whole_layer_bound_ms(const Candidate& c) {
    const bool recompute = c.policy == CheckpointPolicy::kAll;
    // interleaved-1f1b's paths run through its pp·V chunks (bounds.h).
    const int path_stages = c.pp * c.virtual_stages;
    const auto key = std::make_tuple(c.micro_batch_size, path_stages, c.num_micro_batches,
                                     recompute, c.schedule == Schedule::kZeroBubbleH1);
    auto it = path_ns_.find(key);
    if (it == path_ns_.end())
      it = path_ns_
               .emplace(key, min_path_ns(table(c), path_stages, c.num_micro_batches, recompute,
                                         least_boundary_ns(context_.cluster, table(c))))
               .first;
    return refined_iteration_lower_bound_ms(context_, table(c), c, it->second);
  }

  bool top_full() const { return static_cast<int>(top_.size()) >= options_.top_k; }

  // Draws only lengthen an iteration: a bound on the mean-times play bounds the plan's too.
  bool could_enter_top(double iteration_bound_ms) const {
    return within(iteration_bound_ms, abandon_above_ms());
  }

  // Whether an iteration bounded below by `bound_ms` could still reach `wanted_ms`: in the
  // ranking's whole nanoseconds (kRankingGapMs), where a tie may win on memory.
  static bool within(double bound_ms, double wanted_ms) {
    return bound_ms * (1 - kBoundSlack) <= wanted_ms + kRankingGapMs;
  }

  // The rival's samples/s as an iteration of this search's global batch; infinite: none.
  double rival_iteration_ms() const {
    return options_.rival_samples_per_s
               ? context_.global_batch / *options_.rival_samples_per_s * kMsPerSecond
               : std::numeric_limits<double>::infinity();
  }

  // The longest iteration a plan may have and still be wanted: one that could be this search's
  // best, or could enter its top K and reach the rival. Infinite: any.
  double abandon_above_ms() const {
    constexpr double kAny = std::numeric_limits<double>::infinity();
    if (!options_.prune || top_.empty()) return kAny;
    const double top_ms = top_full() ? top_.back().predictions.iteration_ms : kAny;
    return std::max(std::min(top_ms, rival_iteration_ms()), top_.front().predictions.iteration_ms);
  }

  // Partitions under replica-major placement, and again under stage-major when the rule says
  // the all-reduce traffic is the heavier one and the ranks span more than one node.
  PartitionResult partition(const LayerTable& table, Candidate* candidate) {
    candidate->layout = Layout::kReplicaMajor;
    PartitionResult split = partition_with(table, *candidate);
    const bool one_node = context_.cluster.devices_per_node >= context_.cluster.devices;
    if (!split.feasible || one_node || candidate->dp == 1 || candidate->pp == 1) return split;
    double p2p_bytes = 0;  // at every boundary between stages (interleaved-1f1b: chunks)
    for (size_t boundary = 1; boundary + 1 < split.boundaries.size(); ++boundary)
      p2p_bytes +=
          2.0 * candidate->num_micro_batches * table.boundary_bytes(split.boundaries[boundary]);
    const double allreduce_bytes = 2.0 * (candidate->dp - 1) / candidate->dp *
                                   table.param_count(0, table.num_layers()) *
                                   kGradientBytesPerParameter;
    if (choose_layout(p2p_bytes, allreduce_bytes) == Layout::kReplicaMajor) return split;
    candidate->layout = Layout::kStageMajor;
    return partition_with(table, *candidate);
  }

  PartitionResult partition_with(const LayerTable& table, const Candidate& candidate) {
    const PartitionProblem problem = partition_problem(context_, candidate);
    if (candidate.virtual_stages > 1) return partition_interleaved(table, candidate, problem);
    const StageEvaluator evaluator(table, problem, sends(candidate));
    PartitionResult split = run_partition(options_.partition, evaluator);
    recompute_fewer_layers(evaluator, &split);
    return split;
  }

  // interleaved_partition, its chunk split shared by the candidates with the same chunk problem
  // (kNone and kNeeded of one family, V and layout).
  PartitionResult partition_interleaved(const LayerTable& table, const Candidate& candidate,
                                        const PartitionProblem& problem) {
    PartitionResult proof;
    if (interleaved_proven_infeasible(table, problem, &proof)) return proof;
    const ChunkSplitKey key{candidate.dp,
                            candidate.pp,
                            candidate.micro_batch_size,
                            candidate.virtual_stages,
                            candidate.layout,
                            candidate.policy == CheckpointPolicy::kAll};
    auto it = chunk_splits_.find(key);
    if (it == chunk_splits_.end())
      it = chunk_splits_
               .emplace(key, interleaved_chunk_boundaries(options_.partition, table, problem,
                                                          sends(candidate)))
               .first;
    return evaluate_interleaved(table, problem, it->second, sends(candidate));
  }

  // Searching both: ZeRO-1's sibling of `candidate` with replicated optimizer state is proven
  // not to fit by the quick memory proof. Only then is ZeRO-1 searched: with replicas it adds
  // an all-gather after every step for an optimizer step 1/dp as long, which measured slower
  // than replicated state with overlap (bench/RESULTS.md), and searching it everywhere took
  // the 1,000-layer searches past their second. --zero 1 searches it alone.
  bool replicated_cannot_fit(Candidate candidate) {
    candidate.zero = 0;
    PartitionResult proof;
    return proven_not_to_fit(candidate, &proof);
  }

  // The quick memory proof (proven_infeasible, interleaved_proven_infeasible) for the candidate,
  // kept by candidate: enumerate proves the replicated sibling of every ZeRO-1 candidate, and
  // the same candidates come back skipped at the end of the search.
  bool proven_not_to_fit(const Candidate& candidate, PartitionResult* proof) {
    const auto key = std::make_tuple(candidate.dp, candidate.pp, candidate.micro_batch_size,
                                     candidate.schedule, candidate.policy, candidate.layout,
                                     candidate.virtual_stages, candidate.zero);
    auto it = proofs_.find(key);
    if (it == proofs_.end()) {
      Proof found;
      found.proven = prove(candidate, &found.proof);
      it = proofs_.emplace(key, std::move(found)).first;
    }
    *proof = it->second.proof;
    return it->second.proven;
  }

  bool prove(const Candidate& candidate, PartitionResult* proof) {
    const PartitionProblem problem = partition_problem(context_, candidate);
    if (candidate.virtual_stages > 1)
      return interleaved_proven_infeasible(table(candidate), problem, proof);
    return proven_infeasible(StageEvaluator(table(candidate), problem, sends(candidate)), proof);
  }

  // For a skipped candidate: counts it as infeasible when the quick memory proof applies.
  void prove_infeasible(Candidate candidate) {
    Family& family = families_[{candidate.dp, candidate.pp, candidate.micro_batch_size}];
    if (family.feasible) return;
    PartitionResult proof;
    if (!proven_not_to_fit(candidate, &proof)) return;
    --family.unevaluated;
    record_infeasible(&family, candidate, proof);
  }

  void record_infeasible(Family* family, const Candidate& candidate, const PartitionResult& split) {
    if (family->reason.empty() || split.needed_bytes < family->needed_bytes) {
      const std::string schedule =
          candidate.virtual_stages > 1
              ? detail::concat(to_string(candidate.schedule), " V=", candidate.virtual_stages)
              : to_string(candidate.schedule);
      family->reason = detail::concat(split.reason, " (", schedule, ", checkpoint ",
                                      to_string(candidate.policy), ")");
      family->needed_bytes = split.needed_bytes;
    }
  }

  // Partitions the candidate (fixing its layout) into `split`: infeasible, a plan already seen,
  // or a new plan with the bound its split gives.
  Evaluation evaluate(Candidate* candidate, PartitionResult* split) {
    const LayerTable& layer_table = table(*candidate);
    *split = partition(layer_table, candidate);
    ++result_.evaluated;
    Family& family = families_[{candidate->dp, candidate->pp, candidate->micro_batch_size}];
    --family.unevaluated;
    if (!split->feasible) {
      record_infeasible(&family, *candidate, *split);
      return {Outcome::kInfeasible};
    }
    family.feasible = true;
    if (!seen_.insert(plan_key(*candidate, *split)).second) return {Outcome::kDuplicate};
    const Plan plan =
        build_plan(context_, layer_table, *candidate, *split, options_.partition.name());
    return {Outcome::kNewPlan, iteration_lower_bound_ms(simulation_input(plan))};
  }

  // Simulates the candidate's split with mean action times and, if that could enter the top K,
  // with the draws where they apply (predict_variation), then offers it. With the top K full, a
  // play that shows it cannot end before the K-th best stops early: its iteration would be more
  // than a whole nanosecond later, so it would rank after it; draws only lengthen it.
  void simulate(const Candidate& candidate, const PartitionResult& split) {
    Plan plan = build_plan(context_, table(candidate), candidate, split, options_.partition.name());
    SimulationOptions options{/*record_timeline=*/false, /*merge_identical_replicas=*/true,
                              /*variability_draws=*/0};
    options.abandon_above_ms = abandon_above_ms() + kRankingGapMs;
    ++result_.simulated;
    if (predict_timing(&plan, options).abandoned) return;
    if (top_full() && !better(plan, top_.back())) return;
    predict_variation(&plan);
    // After those it ties with, so that the first found of equals stays first.
    const auto at = std::upper_bound(top_.begin(), top_.end(), plan, better);
    if (at - top_.begin() >= options_.top_k) return;
    top_.insert(at, std::move(plan));
    if (static_cast<int>(top_.size()) > options_.top_k) top_.pop_back();
  }

  static std::string plan_key(const Candidate& c, const PartitionResult& split) {
    std::string key = detail::concat(c.dp, "/", c.pp, "/", c.micro_batch_size, "/",
                                     to_string(c.schedule), "/", c.virtual_stages, "/",
                                     to_string(c.layout), "/z", c.zero, "/");
    for (size_t idx = 0; idx < split.boundaries.size(); ++idx)
      key += detail::concat(split.boundaries[idx],
                            idx < split.checkpoint.size() && split.checkpoint[idx] ? "c" : "",
                            recompute_marker(split.recomputed_of(idx)), ",");
    return key;
  }

  // Best first: samples/s (the iteration time: the global batch is the same), then lower
  // peak memory, fewer checkpointed stages, smaller pp, dp,
  // micro-batch size, schedule, then stage boundaries; independent of evaluation order.
  static bool better(const Plan& a, const Plan& b) {
    auto key = [](const Plan& plan) {
      std::vector<int> split;
      int checkpointed = 0;
      for (const StagePlan& stage : plan.stages) {
        split.push_back(stage.last);
        checkpointed += stage.checkpoint;
      }
      // Whole nanoseconds: iterations that differ only by rounding tie, then memory decides.
      const int64_t iteration_ns = to_ns(plan.predictions.iteration_ms);
      return std::make_tuple(iteration_ns, plan.predictions.peak_memory_bytes(), checkpointed,
                             plan.pp, plan.dp, plan.micro_batch_size, plan.schedule,
                             plan.virtual_stages, plan.data_parallel.zero, split);
    };
    return key(a) < key(b);
  }

  void report_infeasible_families() {
    for (const auto& [key, family] : families_) {
      if (family.feasible || family.unevaluated > 0 || family.reason.empty()) continue;
      const auto& [dp, pp, b] = key;
      result_.infeasible.push_back(
          detail::concat("dp=", dp, " pp=", pp, " b=", b, ": ", family.reason));
    }
  }

  const PlanningContext& context_;
  const SearchOptions& options_;
  std::map<std::pair<int64_t, bool>, std::unique_ptr<LayerTable>> tables_;  // (b, split)
  std::map<const LayerTable*, std::shared_ptr<const SendTimes>> sends_;  // over the cluster's links
  const bool zero_bubble_searched_;
  std::map<int64_t, std::string> unplannable_;  // by micro-batch size: unplannable_reason
  std::map<FamilyKey, Family> families_;
  std::map<std::tuple<int64_t, int, int, bool, bool>, int64_t> path_ns_;  // min_path_ns by its arguments, zb-h1
  std::set<std::string> seen_;
  struct Proof {
    bool proven = false;
    PartitionResult proof;
  };
  // proven_not_to_fit's results by (dp, pp, b, schedule, policy, layout, V, zero).
  std::map<std::tuple<int, int, int64_t, Schedule, CheckpointPolicy, Layout, int, int>, Proof>
      proofs_;
  // interleaved-1f1b's chunk splits by (dp, pp, b, V, layout, recompute): partition_interleaved.
  std::map<ChunkSplitKey, std::vector<int>> chunk_splits_;
  std::string interleaved_refusal_;  // why a family had no interleaved-1f1b candidate (first)
  std::vector<Entry> entries_;           // enumerated, in order of their first bound
  std::vector<PartitionResult> splits_;  // by entry, while it waits to be simulated
  std::priority_queue<Queued, std::vector<Queued>, std::greater<Queued>> queue_;
  SearchResult result_;
  std::vector<Plan> top_;  // the best plans so far, best first (`better`), at most top_k
};

}  // namespace

void SearchOptions::validate() const {
  PIPEPLAN_CHECK(!pp || (*pp >= 1 && *pp <= kMaxDevices), "--pp: ", pp.value_or(0),
                 ": expected an integer in [1, ", kMaxDevices, "]");
  PIPEPLAN_CHECK(!dp || (*dp >= 1 && *dp <= kMaxDevices), "--dp: ", dp.value_or(0),
                 ": expected an integer in [1, ", kMaxDevices, "]");
  PIPEPLAN_CHECK(!micro_batch_size || (*micro_batch_size >= 1 && *micro_batch_size <= kMaxBatchSize),
                 "--micro-batch-size: ", micro_batch_size.value_or(0),
                 ": expected an integer in [1, ", kMaxBatchSize, "]");
  PIPEPLAN_CHECK(top_k >= 1 && top_k <= kMaxTopK, "--top: ", top_k, ": expected an integer in [1, ",
                 kMaxTopK, "]");
  for (int v : virtual_stages)
    PIPEPLAN_CHECK(v >= 2 && v <= kMaxVirtualStages, "--virtual-stages: ", v,
                   ": expected an integer in [2, ", kMaxVirtualStages, "]");
  for (int z : zero)
    PIPEPLAN_CHECK(z == 0 || z == 1, "--zero: ", z, ": expected 0 or 1");
  PIPEPLAN_CHECK(!dp || *dp > 1 || zero != std::vector<int>{1}, "--zero 1 with --dp 1: expected --dp "
                 "of at least 2 (ZeRO-1 shards the optimizer state over a stage's replicas)");
  PIPEPLAN_CHECK(!max_latency_ms || (std::isfinite(*max_latency_ms) && *max_latency_ms > 0 &&
                                     *max_latency_ms <= kMaxIterationMs),
                 "--max-latency-ms: ", max_latency_ms.value_or(0), ": expected a time in (0, ",
                 kMaxIterationMs, "] ms");
  PIPEPLAN_ASSERT(!schedules.empty() && !policies.empty() && !zero.empty(), "nothing to search");
}

SearchResult search(const PlanningContext& context, const SearchOptions& options) {
  context.validate();
  options.validate();
  if (context.mode == PlanMode::kInference) return search_inference(context, options);
  PIPEPLAN_CHECK(!options.max_latency_ms, "--max-latency-ms: ", options.max_latency_ms.value_or(0),
                 ": expected only with --inference (training plans predict no latency)");
  return Search(context, options).run();
}

}  // namespace pipeplan
