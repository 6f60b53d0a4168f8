// Partial checkpointing: a stage that recomputes some of its layers, not all of them. What it
// keeps per micro-batch in flight, what one recompute holds, and which layers the search takes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/layer_table.h"
#include "planner/memory_model.h"
#include "planner/partition.h"
#include "planner/stage_cost.h"

namespace pipeplan {

/// The activation bytes of layers [first, last) with the layers `recomputed` (model indices
/// within the range) checkpointed one by one, as executor/stage.cpp runs them: each
/// recomputed layer keeps only its input X_i until the stage's recompute, the others what they
/// retain.
struct RecomputedActivations {
  /// A'(R), per micro-batch in flight: Σ_{i∉R} retained_i − the overlaps between neighbours
  /// outside R (LayerTable::retained_bytes) + Σ_{i∈R} X_i − the part of X_i that layer i − 1
  /// (outside R) already keeps as its saved output; when the stage's last layer is in R, plus
  /// the part of the stage's output it saved (the output is kept for the backward anyway).
  int64_t per_micro_batch_bytes = 0;
  /// What one micro-batch's recompute rebuilds before its backward: each recomputed layer's
  /// graph from its kept input (retained_i − saved_input_i) and its output, the root of that
  /// backward (X_{i+1} − saved_output_i where positive).
  int64_t recompute_bytes = 0;
};

/// Puts `kept` into the terms of a stage that recomputes some of its layers: the activations per
/// micro-batch, their ℓ_s in flight and the recompute (total_bytes left to the caller).
void set_recomputed_terms(const RecomputedActivations& kept, MemoryTerms* terms);

/// RecomputedActivations of layers [first, last) with `recomputed` (in any order, each once;
/// empty: A_s(b) and 0).
RecomputedActivations recomputed_activations(const LayerTable& table, int first, int last,
                                             const std::vector<int>& recomputed);

/// The forward time of the layers `recomputed`, in ns: what the stage's recompute takes.
int64_t recompute_ns(const LayerTable& table, const std::vector<int>& recomputed);

/// The layers of [first, last) worth recomputing, best first: those whose retained bytes exceed
/// their input (recomputing them frees something), by (retained_i − X_i) / fwd_i descending;
/// ties by layer index. Never the model's last layer, whose profile includes the loss that the
/// executor keeps beside it, nor a layer sharing a parameter with another layer of the range
/// (the executor refuses it: its gradient would be accumulated twice in one backward).
std::vector<int> recompute_order(const LayerTable& table, int first, int last);

/// The fewest layers in recompute_order's order whose recompute makes stage `stage_idx`
/// (layers [first, last), not interleaved-1f1b, not zb-h1) fit `device_memory_bytes`, ascending;
/// nullopt when no proper subset of the stage's layers does (checkpoint the whole stage, or it
/// does not fit). O(n log n) in the stage's n layers.
std::optional<std::vector<int>> fewest_recomputed_layers(const LayerTable& table,
                                                         const MemorySettings& settings,
                                                         int stage_idx, int first, int last,
                                                         int64_t device_memory_bytes);

/// CheckpointPolicy::kNeeded, one chunk per stage, not zb-h1 (else nothing changes): each stage
/// of the feasible `split` that the policy checkpoints whole recomputes instead the fewest of its
/// layers that make it fit (fewest_recomputed_layers), where some do, and the split's bottleneck,
/// total and peak follow. The split itself was chosen with those stages' whole forward as their
/// recompute, an upper bound of what they now take.
void recompute_fewer_layers(const StageEvaluator& evaluator, PartitionResult* split);

}  // namespace pipeplan
