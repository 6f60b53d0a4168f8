// What one candidate stage costs: its per-micro-batch time (compute plus the transfers of its
// boundary tensors) and its memory, under a checkpointing policy. The partitioners' only view
// of the models.
#pragma once

#include <algorithm>
#include <cstdint>
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

/// Everything a stage's cost depends on besides its layers.
struct PartitionProblem {
  int pp = 1;
  CheckpointPolicy policy = CheckpointPolicy::kNone;
  int64_t device_memory_bytes = 0;
  MemorySettings memory;
  LinkCosts links;
  /// pp − 1 entries: boundary s (between stages s and s + 1) crosses nodes.
  std::vector<bool> inter_node_boundaries;
};

/// One stage as the policy would run it.
struct StageChoice {
  bool fits = false;  ///< memory_bytes <= device memory
  bool checkpoint = false;
  int64_t cost_ns = 0;       ///< per micro-batch: fwd + bwd + recompute + its two sends
  int64_t memory_bytes = 0;  ///< stage_memory(...).total_bytes
};

/// Evaluates stages [first, last) at stage index s in O(1).
///
/// cost_s(first, last) = compute(first, last) + recompute + send_in(s, first) + send_out(s, last)
/// where send_in is the input gradient sent back to stage s − 1 (boundary bytes at `first`,
/// none for s = 0) and send_out the activation sent to stage s + 1 (boundary bytes at `last`,
/// none for the last stage), each latency + bytes / bandwidth of the boundary's link. A
/// stage's per-iteration time is num_micro_batches times its cost.
class StageEvaluator {
 public:
  /// Keeps references: `table` and `problem` must outlive the evaluator.
  StageEvaluator(const LayerTable& table, const PartitionProblem& problem);

  /// The stage under the policy: kNone and kAll decide `checkpoint`; kNeeded checkpoints
  /// only when the stage does not fit without it. `fits` says whether the result fits.
  StageChoice evaluate(int stage_idx, int first, int last) const;
  /// The same with the checkpoint flag forced.
  StageChoice evaluate_as(int stage_idx, int first, int last, bool checkpoint) const;
  /// A lower bound of cost_ns at stage `stage_idx`, non-decreasing as the range grows: the
  /// compute, plus the recompute when the policy must checkpoint (kAll, or kNeeded once even
  /// the memory lower bound without checkpointing exceeds the device).
  int64_t cost_lower_bound_ns(int stage_idx, int first, int last) const {
    const int64_t lower = cost_lower_bound_ns(first, last);
    if (problem_.policy != CheckpointPolicy::kNeeded) return lower;
    const bool must_checkpoint =
        stage_memory_lower_bound(table_, problem_.memory, stage_idx, first, last,
                                 /*checkpoint=*/false) > problem_.device_memory_bytes;
    return must_checkpoint ? lower + table_.fwd_ns(first, last) : lower;
  }
  /// A lower bound of cost_ns at every stage index.
  int64_t cost_lower_bound_ns(int first, int last) const {
    const int64_t compute = table_.compute_ns(first, last);
    return problem_.policy == CheckpointPolicy::kAll ? compute + table_.fwd_ns(first, last)
                                                     : compute;
  }
  /// A lower bound of memory_bytes at stage `stage_idx` for any choice the policy can make,
  /// non-decreasing as the range grows (stage_memory_lower_bound).
  int64_t memory_lower_bound_bytes(int stage_idx, int first, int last) const {
    auto bound = [&](bool checkpoint) {
      return stage_memory_lower_bound(table_, problem_.memory, stage_idx, first, last, checkpoint);
    };
    switch (problem_.policy) {
      case CheckpointPolicy::kNone:
        return bound(false);
      case CheckpointPolicy::kAll:
        return bound(true);
      case CheckpointPolicy::kNeeded:
        return std::min(bound(false), bound(true));
    }
    return 0;
  }
  /// The send time of stage `stage_idx`'s boundary tensors, in ns.
  int64_t p2p_ns(int stage_idx, int first, int last) const {
    int64_t ns = 0;
    if (stage_idx > 0)
      ns += (problem_.inter_node_boundaries[stage_idx - 1] ? inter_transfer_ns_
                                                           : intra_transfer_ns_)[first];
    if (stage_idx < problem_.pp - 1)
      ns += (problem_.inter_node_boundaries[stage_idx] ? inter_transfer_ns_
                                                       : intra_transfer_ns_)[last];
    return ns;
  }
  /// The slowest single send at any boundary position over either kind of link, in ns.
  int64_t largest_transfer_ns() const { return largest_transfer_ns_; }

  /// What the evaluator was built from.
  int num_layers() const { return table_.num_layers(); }
  int pp() const { return problem_.pp; }
  int64_t device_memory_bytes() const { return problem_.device_memory_bytes; }
  const LayerTable& table() const { return table_; }

 private:
  const LayerTable& table_;
  const PartitionProblem& problem_;
  std::vector<int64_t> intra_transfer_ns_;  // by boundary position
  std::vector<int64_t> inter_transfer_ns_;
  int64_t largest_transfer_ns_ = 0;
};

}  // namespace pipeplan
