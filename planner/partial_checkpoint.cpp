// Partial checkpointing's bytes, its recompute time and the search's choice of layers.
#include "planner/partial_checkpoint.h"

#include <algorithm>

#include "common/error.h"

namespace pipeplan {
namespace {

// The part of X_i (layer i's input, layer i − 1's output) that layer i − 1 keeps as its saved
// output when it is not recomputed: the storage a recomputed layer i's kept input shares.
int64_t shared_input_bytes(const LayerTable& table, int layer_idx) {
  return std::min(table.layer(layer_idx - 1).saved_output_bytes, table.boundary_bytes(layer_idx));
}

// The overlap retained_bytes subtracts between layers k and k + 1 when neither is recomputed.
int64_t neighbour_overlap_bytes(const LayerTable& table, int layer_idx) {
  return std::min(table.layer(layer_idx).saved_output_bytes,
                  table.layer(layer_idx + 1).saved_input_bytes);
}

// Layer i's part of one recompute: its graph rebuilt beside its kept input, and its output.
int64_t layer_recompute_bytes(const LayerTable& table, int layer_idx) {
  const LayerAt& layer = table.layer(layer_idx);
  return layer.retained_bytes - layer.saved_input_bytes +
         std::max<int64_t>(0, table.boundary_bytes(layer_idx + 1) - layer.saved_output_bytes);
}

// Keeps RecomputedActivations of a stage as layers join R one at a time, each in O(1).
class RecomputeSet {
 public:
  RecomputeSet(const LayerTable& table, int first, int last)
      : table_(table), first_(first), last_(last), in_set_(static_cast<size_t>(last - first)) {
    bytes_.per_micro_batch_bytes = table.retained_bytes(first, last);
  }

  void add(int layer_idx) {
    PIPEPLAN_ASSERT(layer_idx >= first_ && layer_idx < last_ && !contains(layer_idx), "layer ",
                    layer_idx, " recomputed twice or outside [", first_, ", ", last_, ")");
    int64_t& kept = bytes_.per_micro_batch_bytes;
    kept += table_.boundary_bytes(layer_idx) - table_.layer(layer_idx).retained_bytes;
    if (layer_idx > first_ && !contains(layer_idx - 1))  // the pair (i − 1, i): now a shared input
      kept +=
          neighbour_overlap_bytes(table_, layer_idx - 1) - shared_input_bytes(table_, layer_idx);
    if (layer_idx + 1 < last_)  // the pair (i, i + 1): i keeps nothing layer i + 1 shares
      kept += contains(layer_idx + 1) ? shared_input_bytes(table_, layer_idx + 1)
                                      : neighbour_overlap_bytes(table_, layer_idx);
    else  // the stage's output: kept for the backward all the same, now outside what i retains
      kept += std::min(table_.layer(layer_idx).saved_output_bytes, table_.boundary_bytes(last_));
    bytes_.recompute_bytes += layer_recompute_bytes(table_, layer_idx);
    in_set_[static_cast<size_t>(layer_idx - first_)] = true;
  }

  const RecomputedActivations& bytes() const { return bytes_; }

 private:
  bool contains(int layer_idx) const { return in_set_[static_cast<size_t>(layer_idx - first_)]; }

  const LayerTable& table_;
  const int first_;
  const int last_;
  std::vector<bool> in_set_;  // by position in the stage
  RecomputedActivations bytes_;
};

}  // namespace

void set_recomputed_terms(const RecomputedActivations& kept, MemoryTerms* terms) {
  terms->activation_bytes_per_micro_batch = kept.per_micro_batch_bytes;
  terms->activations_bytes = terms->in_flight * kept.per_micro_batch_bytes;
  terms->recompute_bytes = kept.recompute_bytes;
}

RecomputedActivations recomputed_activations(const LayerTable& table, int first, int last,
                                             const std::vector<int>& recomputed) {
  RecomputeSet set(table, first, last);
  for (int layer_idx : recomputed) set.add(layer_idx);
  return set.bytes();
}

int64_t recompute_ns(const LayerTable& table, const std::vector<int>& recomputed) {
  int64_t total_ns = 0;
  for (int layer_idx : recomputed) total_ns += table.fwd_ns(layer_idx, layer_idx + 1);
  return total_ns;
}

std::vector<int> recompute_order(const LayerTable& table, int first, int last) {
  struct Candidate {
    int layer_idx;
    double freed_bytes_per_ns;
  };
  std::vector<Candidate> candidates;
  // Not the model's last layer: its profile includes the loss, whose graph the executor keeps
  // outside the recomputed layer, so recomputing it frees less than its retained bytes say.
  const int end = std::min(last, table.num_layers() - 1);
  // Nor a layer sharing a parameter with another of the stage, which the executor refuses.
  std::vector<bool> shares(static_cast<size_t>(last - first));
  for (const TiedProfile& tie : table.ties()) {
    const auto within = std::count_if(tie.layers.begin(), tie.layers.end(),
                                      [&](int layer) { return layer >= first && layer < last; });
    if (within < 2) continue;
    for (int layer : tie.layers)
      if (layer >= first && layer < last) shares[static_cast<size_t>(layer - first)] = true;
  }
  for (int layer_idx = first; layer_idx < end; ++layer_idx) {
    if (shares[static_cast<size_t>(layer_idx - first)]) continue;
    const int64_t freed = table.layer(layer_idx).retained_bytes - table.boundary_bytes(layer_idx);
    if (freed <= 0) continue;
    // A layer too fast to time frees its bytes for nothing: it comes first.
    const int64_t fwd_ns = std::max<int64_t>(1, table.fwd_ns(layer_idx, layer_idx + 1));
    candidates.push_back({layer_idx, static_cast<double>(freed) / static_cast<double>(fwd_ns)});
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a.freed_bytes_per_ns > b.freed_bytes_per_ns;
  });
  std::vector<int> order;
  for (const Candidate& candidate : candidates) order.push_back(candidate.layer_idx);
  return order;
}

std::optional<std::vector<int>> fewest_recomputed_layers(const LayerTable& table,
                                                         const MemorySettings& settings,
                                                         int stage_idx, int first, int last,
                                                         int64_t device_memory_bytes) {
  PIPEPLAN_ASSERT(settings.virtual_stages == 1 && settings.schedule != Schedule::kZeroBubbleH1 &&
                  !settings.forward_only);
  const MemoryTerms plain = stage_memory(table, settings, stage_idx, first, last, false);
  const std::vector<int> order = recompute_order(table, first, last);
  RecomputeSet set(table, first, last);
  // At most all but one layer: recomputing every layer is checkpointing the stage.
  const size_t most = std::min(order.size(), static_cast<size_t>(last - first - 1));
  for (size_t count = 1; count <= most; ++count) {
    set.add(order[count - 1]);
    MemoryTerms terms = plain;
    set_recomputed_terms(set.bytes(), &terms);
    if (terms.sum_of_terms() > device_memory_bytes) continue;
    std::vector<int> chosen(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count));
    std::sort(chosen.begin(), chosen.end());
    return chosen;
  }
  return std::nullopt;
}

void recompute_fewer_layers(const StageEvaluator& evaluator, PartitionResult* split) {
  const PartitionProblem& problem = evaluator.problem();
  const MemorySettings& settings = problem.memory;
  if (!split->feasible || problem.policy != CheckpointPolicy::kNeeded ||
      settings.virtual_stages > 1 || settings.schedule == Schedule::kZeroBubbleH1 ||
      settings.forward_only)
    return;
  const LayerTable& table = evaluator.table();
  const int num_stages = static_cast<int>(split->boundaries.size()) - 1;
  bool changed = false;
  for (int stage_idx = 0; stage_idx < num_stages; ++stage_idx) {
    if (!split->checkpoint[stage_idx]) continue;
    std::optional<std::vector<int>> layers =
        fewest_recomputed_layers(table, settings, stage_idx, split->boundaries[stage_idx],
                                 split->boundaries[stage_idx + 1], problem.device_memory_bytes);
    if (!layers) continue;
    split->recomputed.resize(static_cast<size_t>(num_stages));
    split->recomputed[stage_idx] = std::move(*layers);
    split->checkpoint[stage_idx] = false;
    changed = true;
  }
  if (!changed) return;
  split->bottleneck_ns = split->total_ns = split->peak_memory_bytes = 0;
  for (int stage_idx = 0; stage_idx < num_stages; ++stage_idx) {
    const int first = split->boundaries[stage_idx];
    const int last = split->boundaries[stage_idx + 1];
    const std::vector<int>& recomputed = split->recomputed_of(stage_idx);
    const StageChoice choice =
        evaluator.evaluate_as(stage_idx, first, last, split->checkpoint[stage_idx]);
    const int64_t cost_ns = choice.cost_ns + recompute_ns(table, recomputed);
    const int64_t memory_bytes = recomputed.empty()
                                     ? choice.memory_bytes
                                     : stage_memory(table, settings, stage_idx, first, last,
                                                    /*checkpoint=*/false, recomputed)
                                           .total_bytes;
    split->bottleneck_ns = std::max(split->bottleneck_ns, cost_ns);
    split->total_ns += cost_ns;
    split->peak_memory_bytes = std::max(split->peak_memory_bytes, memory_bytes);
  }
}

}  // namespace pipeplan
