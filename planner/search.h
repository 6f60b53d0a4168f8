// The search: every dp × pp factorisation, micro-batch size, schedule and checkpointing
// policy, partitioned, placed, simulated and ranked by samples/s.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/baselines.h"
#include "planner/predict.h"

namespace pipeplan {

/// The most plans a search lists (--top): each may be simulated again with the draws.
inline constexpr int kMaxTopK = 100;

/// What an inference search ranks by (--objective).
enum class InferenceObjective {
  kThroughput,  ///< samples/s (the interval between requests), within max_latency_ms if given
  kLatency,     ///< one request's latency_ms
};

/// Narrowing of the search (the plan command's flags). Unset fields are searched over.
struct SearchOptions {
  std::optional<int> pp;
  std::optional<int> dp;
  /// Ranks per tensor-parallel group (--tp; search_tensor_parallel): unset searches 1 and the
  /// profile's tp_sizes. search() itself plans one size, the one its context's profile is for.
  std::optional<int> tp;
  std::optional<int64_t> micro_batch_size;
  /// zb-h1 is searched only when the profile has the B/W split (Profile::has_backward_split),
  /// unless it is the only schedule asked for (then such a profile is refused).
  std::vector<Schedule> schedules{Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kZeroBubbleH1,
                                  Schedule::kInterleaved1F1B};
  /// The V (chunks per stage) interleaved-1f1b is searched with (--virtual-stages fixes one).
  std::vector<int> virtual_stages{2, 3, 4};
  std::vector<CheckpointPolicy> policies{CheckpointPolicy::kNone, CheckpointPolicy::kAll,
                                         CheckpointPolicy::kNeeded};
  /// ZeRO-1 or not (--zero fixes one). With both, a candidate with dp > 1 is searched with
  /// ZeRO-1 where the quick memory proof shows its replicated optimizer state cannot fit; dp = 1
  /// has no replicas to shard over and is searched without.
  std::vector<int> zero{0, 1};
  PartitionSpec partition;
  int top_k = 5;
  /// Skip candidates whose upper bound on samples/s is below the K-th best found so far.
  /// Without a rival the result is the same without it (a test checks); only the work differs.
  bool prune = true;
  /// With prune: the samples/s a plan must reach to be wanted beside this search's own best
  /// (search_tensor_parallel passes the K-th best of the sizes searched before). When no
  /// candidate's bound reaches it, nothing is partitioned (nor reported infeasible): no plans, and
  /// SearchResult::unsearched_bound_ms. Else the best plan and those of the top K that reach
  /// it are exact; the rest of the top K may be missing.
  std::optional<double> rival_samples_per_s;
  /// Inference searches (PlanningContext::mode) only: the ranking, and the most latency_ms a
  /// plan may predict (--max-latency-ms; none: any).
  InferenceObjective objective = InferenceObjective::kThroughput;
  std::optional<double> max_latency_ms;

  /// pp and dp in [1, kMaxDevices], micro_batch_size in [1, kMaxBatchSize], top_k in
  /// [1, kMaxTopK], each virtual_stages in [2, kMaxVirtualStages], some schedule and policy,
  /// max_latency_ms in (0, kMaxIterationMs].
  /// Throws Error(kBadInput) naming the flag.
  void validate() const;
};

/// The outcome. "No feasible plan" is an empty `plans`, not an exception.
struct SearchResult {
  /// Feasible, best first by the iteration they predict (samples/s), at most top_k, all
  /// simulated: with the draws where they apply (predict_variation), else with mean times.
  std::vector<Plan> plans;
  /// One line per family (dp, pp, micro-batch size) all of whose candidates were found
  /// infeasible — evaluated, or (when skipped) proven by the quick memory proof
  /// (proven_infeasible): "dp=4 pp=1 b=56: stage 0 needs 22.6 GiB > 22.5 GiB (1f1b, ...)",
  /// giving the candidate that needs least.
  std::vector<std::string> infeasible;
  int candidates = 0;  ///< enumerated
  int evaluated = 0;   ///< partitioned
  int simulated = 0;
  int pruned = 0;  ///< not evaluated or not simulated: their bound could not reach the top K
  /// With SearchOptions::rival_samples_per_s that no candidate could reach: the least bound
  /// on any candidate's iteration (the search stopped there).
  std::optional<double> unsearched_bound_ms;
  /// search_tensor_parallel over several tp sizes: the best plan of each size searched that has
  /// a feasible one, by ascending tp; else empty.
  std::vector<Plan> best_per_tp;
  /// search_tensor_parallel over several tp sizes: the sizes not searched, each with its
  /// unsearched_bound_ms, by ascending tp.
  std::vector<std::pair<int, double>> unsearched_tp;
};

/// Candidates are every (dp, pp) with dp · pp = devices, pp <= layers and dp dividing the
/// global batch; every micro-batch size b dividing global_batch / dp into at most
/// kMaxMicroBatches micro-batches, at which the profile can be planned (unplannable_reason:
/// otherwise the family is reported infeasible with the reason); each schedule and policy,
/// except GPipe when pp = 1 and 1F1B is searched (one stage: the same plan with more memory);
/// interleaved-1f1b with each V of options.virtual_stages where pp >= 2, m is a multiple of pp,
/// pp·V <= layers and m·pp·V <= kMaxPipelineMicroBatches (asked for alone, a search with no such
/// candidate is refused, saying why), split by interleaved_partition (an explicit --partition
/// then gives pp·V ranges and needs one V), without kNone when kNeeded is searched (the same
/// chunk split: kNone's plan is kNeeded's or none);
/// ZeRO-1 where dp > 1 and options.zero asks for it (both: only where the replicated candidate
/// is proven not to fit; ZeRO-1 shards the optimizer state: less memory, an optimizer step over
/// 1/dp of the parameters, a reduce-scatter and an all-gather instead of the all-reduce); duplicates (a policy giving the same split and flags as another) are dropped.
/// Each is partitioned with `options.partition`; its ranks are placed replica-major, or
/// stage-major when its replicas' all-reduce bytes exceed its pipeline's p2p bytes
/// (choose_layout) and the cluster has more than one node; feasible ones are simulated.
/// Best first: the candidate with the smallest lower bound on its iteration takes its next
/// step — its bound with whole layers per stage (refined_iteration_lower_bound_ms), then its
/// partition and its split's bound, then its simulation with mean times, and with the draws
/// (predict_variation) when that could enter the top K — and the search stops once the smallest
/// bound cannot beat the K-th best found. The draws only lengthen an iteration, so the bounds
/// and the mean-times play bound the drawn one: the top K are those of drawing every candidate.
/// Throws Error(kBadInput) when the context or the options do not validate, or contradict the
/// cluster, the global batch or the model (naming the flag).
/// With context.mode inference: search_inference (planner/search_space.h) instead; a
/// max_latency_ms without it is refused naming --max-latency-ms.
SearchResult search(const PlanningContext& context, const SearchOptions& options);

}  // namespace pipeplan
