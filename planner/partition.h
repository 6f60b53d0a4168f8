// The exact partitioner: contiguous stage boundaries that minimise the slowest stage subject
// to every stage's memory fitting, and the evaluation of given boundaries.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/stage_cost.h"

namespace pipeplan {

/// A split of the layers into pp stages, or why there is none. "Infeasible" is a value.
struct PartitionResult {
  bool feasible = false;
  /// When infeasible: "stage 1 needs 9.1 GiB > 8.0 GiB ..." for the split whose worst stage
  /// needs the least memory (or the given split's worst stage), or a quick proof from the
  /// memory lower bound: "layer 3 alone needs at least ..." or "stages 0..6 can hold at most
  /// layers 0..572 within 80.0 GiB each, leaving layers 573..999 to stage 7: at least ...".
  std::string reason;
  /// When infeasible: the memory the stage named in the reason needs (at least).
  int64_t needed_bytes = 0;
  std::vector<int> boundaries;              ///< pp + 1 positions, 0 = b_0 < b_1 < ... < b_pp = L
  std::vector<bool> checkpoint;             ///< per stage, as the policy decided
  /// Partial checkpointing, per stage: the layers it recomputes (its checkpoint flag false), or
  /// empty; no entries at all when no stage recomputes some of its layers (recomputed_of).
  std::vector<std::vector<int>> recomputed;
  int64_t bottleneck_ns = 0;                ///< max stage cost
  int64_t total_ns = 0;                     ///< sum of stage costs
  int64_t peak_memory_bytes = 0;            ///< max stage memory

  /// The layers stage (or chunk) `stage_idx` recomputes one by one; empty when none.
  const std::vector<int>& recomputed_of(size_t stage_idx) const {
    static const std::vector<int> kNone;
    return stage_idx < recomputed.size() ? recomputed[stage_idx] : kNone;
  }
};

/// The objective, compared lexicographically: the slowest stage, then the sum over stages,
/// then the peak memory over stages. Times are whole nanoseconds, so ties are exact.
struct PartitionObjective {
  int64_t bottleneck_ns = 0;
  int64_t total_ns = 0;
  int64_t peak_memory_bytes = 0;
  /// Lexicographic (bottleneck, total, peak).
  bool operator<(const PartitionObjective& other) const;
  /// All three equal.
  bool operator==(const PartitionObjective& other) const;
};

/// The objective of a feasible result.
PartitionObjective objective(const PartitionResult& result);

/// The optimal split among all pp-stage contiguous non-empty splits whose every stage fits,
/// minimising PartitionObjective. Algorithm (partition.cpp), in named phases:
///  0. proof of infeasibility: stage memory has a lower bound that grows with the range
///     (stage_memory_lower_bound); packing stages greedily under it is exact, so if even that
///     packing leaves the last stage (or a single layer) over the device, no split fits;
///  1. the optimal bottleneck T*: a greedy split (each stage as long as its cost stays under
///     a limit, the limit bisected geometrically) gives an upper bound U close to T*; then a
///     min-max DP over (stage s, end j) considers every split whose stages all have cost
///     <= U, so its result is exact. End positions of stage s are restricted to a band (the
///     greedy reach of s + 1 stages from the left and of pp − s − 1 stages from the right
///     under the monotone cost and memory lower bounds), starts to the window where both
///     bounds allow the stage (a pointer that only moves forward as j grows), and each end
///     first tries the previous end's best start so that the downward scan stops early
///     (compute alone >= best found) and skips prefixes already worse than the best;
///  2. the lexicographic minimum of (sum of costs, peak memory) over splits whose every stage
///     cost is <= T*, by the same DP with (sum, max) values, which compose correctly: a
///     prefix with a smaller (sum, peak) extends to a split with a smaller-or-equal one.
/// With no split under any bound, the least-memory split (a min-max DP over memory) names
/// the stage that does not fit. All times are whole nanoseconds, so there is no tolerance.
/// Cost: each DP visits O(Σ_s |band_s| · |window|) (start, end) pairs — at most O(pp · L²),
/// far fewer as bands and windows are narrow — plus O(L · probes) for the greedy bound.
PartitionResult optimal_partition(const StageEvaluator& evaluator);

/// Phase 0 of optimal_partition alone, O(pp · log L): true with `proof` set to the infeasible
/// result (and its reason) when the memory lower bound shows that no split fits (for pp = 1:
/// when the one split does not fit); false when there is no such proof (the split may or
/// may not exist).
bool proven_infeasible(const StageEvaluator& evaluator, PartitionResult* proof);

/// "22.6 GiB > 22.5 GiB", or exact byte counts when the rounded sizes would read the same.
std::string needs_text(int64_t needed_bytes, int64_t device_bytes);

/// "0:3,3:7,7:12": the ranges of a split's boundaries.
std::string split_text(const std::vector<int>& boundaries);

/// Evaluates a given split (pp + 1 boundaries, validated by the caller) under the policy.
PartitionResult evaluate_boundaries(const StageEvaluator& evaluator,
                                    const std::vector<int>& boundaries);

/// The last position in [known, limit] where `passes` holds, given that it holds at `known` and
/// fails from some position on: galloping from `known`, then bisecting between the last position
/// that passed and the first that failed. O(log distance) calls: stages hold few layers for
/// large pp, so the answer lies near `known`.
template <typename Passes>
int last_passing(int known, int limit, Passes passes) {
  int pos = known;
  int step = 1;
  while (pos + step <= limit && passes(pos + step)) {
    pos += step;
    step *= 2;
  }
  for (int past = std::min(pos + step, limit + 1); past - pos > 1;) {
    const int mid = pos + (past - pos) / 2;
    (passes(mid) ? pos : past) = mid;
  }
  return pos;
}

}  // namespace pipeplan
