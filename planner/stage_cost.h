// What one candidate stage costs: its per-micro-batch time (compute plus the transfers of its
// boundary tensors) and its memory, under a checkpointing policy. The partitioners' only view
// of the models.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "planner/layer_table.h"
#include "planner/memory_model.h"
#include "planner/time_model.h"

namespace pipeplan {

/// Which stages recompute their forward during backward.
enum class CheckpointPolicy {
  kNone,    ///< no stage
  kAll,     ///< every stage
  kNeeded,  ///< exactly the stages that do not fit without it
};

/// "none", "all", "needed".
std::string to_string(CheckpointPolicy policy);

/// A device memory no stage reaches (a quarter of int64's range, so that the partitioners' sums
/// of memory terms stay below it): a problem with it is split for time alone — every stage
/// fits, and StageEvaluator skips the memory terms wherever only fitting depends on them.
inline constexpr int64_t kUnlimitedMemoryBytes = std::numeric_limits<int64_t>::max() / 4;

/// Everything a stage's cost depends on besides its layers.
struct PartitionProblem {
  int pp = 1;
  /// V: interleaved-1f1b's chunks per stage (memory.virtual_stages), else 1. A problem with V >= 2
  /// is split by interleaved_partition (planner/interleaved_partition.h), never by a
  /// StageEvaluator of its own.
  int virtual_stages = 1;
  CheckpointPolicy policy = CheckpointPolicy::kNone;
  int64_t device_memory_bytes = 0;
  MemorySettings memory;
  LinkCosts links;
  /// pp·V − 1 entries: boundary c (between stages, or interleaved-1f1b's chunks, c and c + 1)
  /// crosses nodes (chunk_inter_node_boundaries).
  std::vector<bool> inter_node_boundaries;
};

/// One stage as the policy would run it.
struct StageChoice {
  bool fits = false;  ///< memory_bytes <= device memory
  bool checkpoint = false;
  int64_t cost_ns = 0;       ///< per micro-batch: fwd + bwd + recompute + its two sends
  int64_t memory_bytes = 0;  ///< stage_memory(...).total_bytes
};

/// The send time of the boundary tensor at every position 0..L over each kind of link, in
/// whole ns: what a stage's cost adds for its sends. It depends on the layer table and the
/// links alone, so that the evaluators of one search share it (send_times).
struct SendTimes {
  LinkCosts links;                     ///< what the times are over
  std::vector<int64_t> intra_node_ns;  ///< by boundary position, L + 1 entries
  std::vector<int64_t> inter_node_ns;
  int64_t largest_ns = 0;  ///< the slowest send at any position over either link
};

/// The SendTimes of `table`'s boundary tensors over `links`, O(L).
std::shared_ptr<const SendTimes> send_times(const LayerTable& table, const LinkCosts& links);

/// Evaluates stages [first, last) at stage index s in O(1).
///
/// cost_s(first, last) = compute(first, last) + recompute + send_in(s, first) + send_out(s, last)
/// where send_in is the input gradient sent back to stage s − 1 (boundary bytes at `first`,
/// none for s = 0) and send_out the activation sent to stage s + 1 (boundary bytes at `last`,
/// none for the last stage), each latency + bytes / bandwidth of the boundary's link. With
/// problem.memory.forward_only (inference, on a forward-only LayerTable) it is the forward and
/// send_out alone, and memory is forward_stage_memory's. A
/// stage's per-iteration time is num_micro_batches times its cost.
class StageEvaluator {
 public:
  /// Keeps references: `table` and `problem` must outlive the evaluator. `sends`: the table's
  /// send_times over problem.links when the caller has them (evaluators of one table share
  /// them), else null and computed here (O(L)). Throws Error(kBadInput) when the slowest send
  /// passes the planner's limits for problem.pp.
  StageEvaluator(const LayerTable& table, const PartitionProblem& problem,
                 std::shared_ptr<const SendTimes> sends = nullptr);

  /// The stage under the policy: kNone and kAll decide `checkpoint`; kNeeded checkpoints
  /// only when the stage does not fit without it. `fits` says whether the result fits.
  StageChoice evaluate(int stage_idx, int first, int last) const;
  /// The same with the checkpoint flag forced.
  StageChoice evaluate_as(int stage_idx, int first, int last, bool checkpoint) const;
  /// evaluate(...) where only `fits`, `checkpoint` and `cost_ns` are needed: without a memory
  /// limit (kUnlimitedMemoryBytes) memory_bytes is left 0 instead of computed.
  StageChoice evaluate_time(int stage_idx, int first, int last) const {
    if (memory_limited_) return evaluate(stage_idx, first, last);
    // Every stage fits, so kNeeded checkpoints none: the cost is least_cost_ns's.
    StageChoice time;
    time.fits = true;
    time.checkpoint = problem_.policy == CheckpointPolicy::kAll;
    time.cost_ns = least_cost_ns(stage_idx, first, last);
    return time;
  }
  /// The cost_ns of the cheapest choice the policy may make, O(1) without memory terms: exact
  /// unless kNeeded checkpoints the stage, a lower bound of evaluate(...).cost_ns always.
  int64_t least_cost_ns(int stage_idx, int first, int last) const {
    return cost_lower_bound_ns(first, last) + p2p_ns(stage_idx, first, last);
  }
  /// evaluate(...).memory_bytes of an evaluate_time(...) result for the same stage.
  int64_t chosen_memory_bytes(const StageChoice& time, int stage_idx, int first, int last) const {
    return memory_limited_ ? time.memory_bytes
                           : memory_bytes(stage_idx, first, last, time.checkpoint);
  }
  /// A lower bound of cost_ns at stage `stage_idx`, non-decreasing as the range grows: the
  /// compute, plus the recompute when the policy must checkpoint (kAll, or kNeeded once even
  /// the memory lower bound without checkpointing exceeds the device).
  int64_t cost_lower_bound_ns(int stage_idx, int first, int last) const {
    const int64_t lower = cost_lower_bound_ns(first, last);
    if (problem_.policy != CheckpointPolicy::kNeeded || !memory_limited_) return lower;
    const bool must_checkpoint =
        memory_bounds(stage_idx, first, last).plain > problem_.device_memory_bytes;
    return must_checkpoint ? lower + table_.fwd_ns(first, last) : lower;
  }
  /// A lower bound of cost_ns at every stage index.
  int64_t cost_lower_bound_ns(int first, int last) const {
    return least_compute_ns_[last] - least_compute_ns_[first];
  }
  /// A lower bound of memory_bytes at stage `stage_idx` for any choice the policy can make,
  /// non-decreasing as the range grows (stage_memory_lower_bound).
  int64_t memory_lower_bound_bytes(int stage_idx, int first, int last) const {
    const MemoryBounds bounds = memory_bounds(stage_idx, first, last);
    switch (problem_.policy) {
      case CheckpointPolicy::kNone:
        return bounds.plain;
      case CheckpointPolicy::kAll:
        return bounds.checkpointed;
      case CheckpointPolicy::kNeeded:
        return std::min(bounds.plain, bounds.checkpointed);
    }
    return 0;
  }
  /// Whether the stage passes both monotone lower bounds: cost_lower_bound_ns(stage_idx,
  /// first, last) <= cost_bound and memory_lower_bound_bytes(...) <= the device memory. Once
  /// it fails, every larger range fails too.
  bool may_fit(int stage_idx, int first, int last, int64_t cost_bound) const {
    int64_t cost = cost_lower_bound_ns(first, last);
    if (cost > cost_bound) return false;  // whatever the memory
    if (!memory_limited_) return true;
    const MemoryBounds bounds = memory_bounds(stage_idx, first, last);
    int64_t memory = bounds.plain;
    if (problem_.policy == CheckpointPolicy::kAll) memory = bounds.checkpointed;
    if (problem_.policy == CheckpointPolicy::kNeeded) {
      if (bounds.plain > problem_.device_memory_bytes) cost += table_.fwd_ns(first, last);
      memory = std::min(bounds.plain, bounds.checkpointed);
    }
    return cost <= cost_bound && memory <= problem_.device_memory_bytes;
  }
  /// stage_memory_lower_bound(table, problem.memory, stage_idx, first, last, checkpoint),
  /// from terms of the stage index computed once.
  int64_t memory_lower_bound_as(int stage_idx, int first, int last, bool checkpoint) const {
    const MemoryBounds bounds = memory_bounds(stage_idx, first, last);
    return checkpoint ? bounds.checkpointed : bounds.plain;
  }
  /// stage_memory(table, problem.memory, stage_idx, first, last, checkpoint).total_bytes,
  /// from terms of the stage index computed once.
  int64_t memory_bytes(int stage_idx, int first, int last, bool checkpoint) const {
    const MemoryBounds totals = memory_totals(stage_idx, first, last);
    return checkpoint ? totals.checkpointed : totals.plain;
  }
  /// The send time of stage `stage_idx`'s boundary tensors, in ns.
  int64_t p2p_ns(int stage_idx, int first, int last) const {
    const StageConstants& stage = stages_[stage_idx];
    return (stage.send_in_ns ? stage.send_in_ns[first] : 0) +
           (stage.send_out_ns ? stage.send_out_ns[last] : 0);
  }
  /// The slowest single send at any boundary position over either kind of link, in ns.
  int64_t largest_transfer_ns() const { return sends_->largest_ns; }

  /// What the evaluator was built from.
  int num_layers() const { return table_.num_layers(); }
  int pp() const { return problem_.pp; }
  int64_t device_memory_bytes() const { return problem_.device_memory_bytes; }
  const LayerTable& table() const { return table_; }
  const PartitionProblem& problem() const { return problem_; }

 private:
  // What a stage's memory adds for its index alone (planner/memory_model.h).
  struct StageConstants {
    int64_t in_flight = 0;          // ℓ_s
    int64_t deferred = 0;           // ω_s (zb-h1)
    bool last = false;              // the last stage: no output gradient arrives
    CommBufferCounts comm;          // boundary tensors its communication buffers hold
    int64_t fixed_bytes = 0;        // runtime overhead + calibration
    int64_t bound_input_bytes = 0;  // the lower bound's checkpointed input: model input or smallest
    int64_t bound_fixed_bytes = 0;  // fixed_bytes + the lower bound's communication buffers
    // Send times by boundary position over the stage's links (into sends_): its input gradient
    // back and its output forward; null: no such send.
    const int64_t* send_in_ns = nullptr;
    const int64_t* send_out_ns = nullptr;
  };
  // The choice of checkpoint flag `checkpoint` whose memory is `memory_bytes`.
  StageChoice choice(int stage_idx, int first, int last, bool checkpoint,
                     int64_t memory_bytes) const;
  // A stage's memory, or its lower bound, without and with checkpointing.
  struct MemoryBounds {
    int64_t plain = 0;
    int64_t checkpointed = 0;
  };
  // The terms of a range that do not depend on its stage index: parameters with their
  // gradients, optimizer state and autocast copy, buffers, the largest transient and the
  // gradient bucket.
  int64_t range_bytes(int first, int last) const {
    const int64_t params = table_.param_count(first, last);
    return parameter_bytes(params, problem_.memory) + table_.buffer_bytes(first, last) +
           table_.transient_bytes(first, last) + gradient_bucket_bytes(params, problem_.memory);
  }
  // stage_memory_lower_bound for both checkpoint flags.
  MemoryBounds memory_bounds(int stage_idx, int first, int last) const {
    const StageConstants& stage = stages_[stage_idx];
    const int64_t activations = table_.retained_bytes(first, last);
    const int64_t common = range_bytes(first, last) + stage.bound_fixed_bytes +
                           deferred_bytes(stage, first, last);
    return {std::max<int64_t>(0, common + stage.in_flight * activations),
            std::max<int64_t>(0, common + stage.in_flight * stage.bound_input_bytes +
                                     std::max<int64_t>(stage.deferred, 1) * activations)};
  }
  // zb-h1: the layer-output gradients kept for W (memory_model.h); 0 for other schedules.
  int64_t deferred_bytes(const StageConstants& stage, int first, int last) const {
    return stage.deferred == 0
               ? 0
               : stage.deferred * table_.output_gradient_bytes(first, last, stage.last);
  }
  // stage_memory(...).total_bytes for both checkpoint flags.
  MemoryBounds memory_totals(int stage_idx, int first, int last) const {
    const StageConstants& stage = stages_[stage_idx];
    const int64_t activations = table_.retained_bytes(first, last);
    const int64_t in_bytes = stage_idx > 0 ? table_.boundary_bytes(first) : 0;
    const int64_t out_bytes = stage_idx < problem_.memory.pp - 1 ? table_.boundary_bytes(last) : 0;
    const int64_t common = range_bytes(first, last) + stage.fixed_bytes + stage.comm.in * in_bytes +
                           stage.comm.out * out_bytes +
                           stage.comm.sends * std::max(in_bytes, out_bytes) +
                           deferred_bytes(stage, first, last);
    return {std::max<int64_t>(0, common + stage.in_flight * activations),
            std::max<int64_t>(0, common + stage.in_flight * table_.boundary_bytes(first) +
                                     std::max<int64_t>(stage.deferred, 1) * activations)};
  }

  const LayerTable& table_;
  const PartitionProblem& problem_;
  const bool memory_limited_;  // device_memory_bytes < kUnlimitedMemoryBytes
  std::shared_ptr<const SendTimes> sends_;
  std::vector<StageConstants> stages_;  // by stage index
  // By position 0..L: the compute of layers [0, position), with kAll their forward again (the
  // table's compute_prefix_ns).
  const int64_t* least_compute_ns_ = nullptr;
};

}  // namespace pipeplan
