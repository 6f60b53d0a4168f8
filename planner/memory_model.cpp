// The memory model: per-stage terms from the layer table.
#include "planner/memory_model.h"

#include <algorithm>

#include "common/error.h"
#include "planner/partial_checkpoint.h"

namespace pipeplan {
namespace {

// The terms of `params` parameters that do not depend on the micro-batch: weights, gradients,
// optimizer state and, under autocast, the low-precision copy.
void set_parameter_terms(int64_t params, const MemorySettings& settings, MemoryTerms* terms) {
  terms->parameters_bytes = params * kWeightBytesPerParameter;
  terms->gradients_bytes = settings.forward_only ? 0 : params * kGradientBytesPerParameter;
  terms->optimizer_state_bytes = optimizer_state_bytes(params, settings);
  terms->master_copy_bytes =
      settings.precision == Precision::kFp32 ? 0 : params * kAutocastCopyBytesPerParameter;
}

// The predicted peak: every term summed (at least 0), the runtime overhead and the stage's
// calibration set first.
void set_total(const MemorySettings& settings, int stage_idx, MemoryTerms* terms) {
  terms->runtime_overhead_bytes = settings.runtime_overhead_bytes;
  terms->calibration_bytes = settings.calibration_of(stage_idx);
  terms->total_bytes = terms->sum_of_terms();
}

}  // namespace

int64_t comm_buffer_bytes(const LayerTable& table, const MemorySettings& settings, int stage_idx,
                          int first, int last) {
  const int64_t in_bytes = stage_idx > 0 ? table.boundary_bytes(first) : 0;
  const int64_t out_bytes = stage_idx < settings.pp - 1 ? table.boundary_bytes(last) : 0;
  // GPipe peaks at the stage's first backward: every activation has been received (none is
  // posted ahead any more) and no gradient has been sent yet.
  if (settings.forward_only)  // the consumed input is forward_stage_memory's activations
    return kRecvLookahead * in_bytes + kMaxSendsInFlight * out_bytes;
  const CommBufferCounts counts = comm_buffer_counts(settings.schedule, settings.pp, stage_idx);
  int64_t bytes =
      counts.in * in_bytes + counts.out * out_bytes + counts.sends * std::max(in_bytes, out_bytes);
  return bytes + gradient_bucket_bytes(table.param_count(first, last), settings);
}

MemoryTerms forward_stage_memory(const LayerTable& table, const MemorySettings& settings,
                                 int stage_idx, int first, int last) {
  PIPEPLAN_ASSERT(settings.forward_only && table.forward_only());
  MemoryTerms terms;
  set_parameter_terms(table.param_count(first, last), settings, &terms);
  terms.buffers_bytes = table.buffer_bytes(first, last);
  terms.in_flight = 1;
  terms.activation_bytes_per_micro_batch = table.boundary_bytes(first);
  terms.activations_bytes = terms.activation_bytes_per_micro_batch;
  terms.transient_bytes = table.transient_bytes(first, last);
  terms.comm_buffers_bytes = comm_buffer_bytes(table, settings, stage_idx, first, last);
  set_total(settings, stage_idx, &terms);
  return terms;
}

MemoryTerms stage_memory(const LayerTable& table, const MemorySettings& settings, int stage_idx,
                         int first, int last, bool checkpoint, const std::vector<int>& recomputed) {
  if (settings.forward_only) return forward_stage_memory(table, settings, stage_idx, first, last);
  const int64_t params = table.param_count(first, last);
  const int64_t activations = table.retained_bytes(first, last);
  MemoryTerms terms;
  set_parameter_terms(params, settings, &terms);
  terms.buffers_bytes = table.buffer_bytes(first, last);
  terms.in_flight = in_flight(settings.schedule, settings.pp, stage_idx,
                              settings.num_micro_batches, settings.virtual_stages);
  terms.activation_bytes_per_micro_batch = checkpoint ? table.boundary_bytes(first) : activations;
  terms.activations_bytes = terms.in_flight * terms.activation_bytes_per_micro_batch;
  const int deferred =
      deferred_weight_passes(settings.schedule, stage_idx, settings.num_micro_batches);
  terms.recompute_bytes = checkpoint ? std::max(deferred, 1) * activations : 0;
  if (!recomputed.empty()) {
    PIPEPLAN_ASSERT(!checkpoint && deferred == 0,
                    "partial checkpointing of a checkpointed or zb-h1 stage");
    set_recomputed_terms(recomputed_activations(table, first, last, recomputed), &terms);
  }
  terms.deferred_gradients_bytes = deferred_gradient_bytes(table, settings, stage_idx, first, last);
  terms.transient_bytes = table.transient_bytes(first, last);
  terms.comm_buffers_bytes = comm_buffer_bytes(table, settings, stage_idx, first, last);
  set_total(settings, stage_idx, &terms);
  return terms;
}

int64_t interleaved_comm_buffer_bytes(const LayerTable& table, const MemorySettings& settings,
                                      int stage_idx, const std::vector<ChunkRange>& chunks) {
  const int last_chunk = settings.pp * settings.virtual_stages - 1;
  int64_t max_bytes = 0;
  int64_t params = 0;
  for (int chunk = 0; chunk < static_cast<int>(chunks.size()); ++chunk) {
    const int global_chunk = chunk_index(settings.pp, stage_idx, chunk);
    const ChunkRange& range = chunks[chunk];
    if (global_chunk > 0) max_bytes = std::max(max_bytes, table.boundary_bytes(range.first));
    if (global_chunk < last_chunk) max_bytes = std::max(max_bytes, table.boundary_bytes(range.last));
    params += table.param_count(range.first, range.last);
  }
  const CommBufferCounts counts =
      comm_buffer_counts(Schedule::kInterleaved1F1B, settings.pp, stage_idx);
  int64_t bytes = (counts.in + counts.out + counts.sends) * max_bytes;
  return bytes + gradient_bucket_bytes(params, settings);
}

MemoryTerms interleaved_stage_memory(const LayerTable& table, const MemorySettings& settings,
                                     int stage_idx, const std::vector<ChunkRange>& chunks) {
  PIPEPLAN_ASSERT(settings.schedule == Schedule::kInterleaved1F1B &&
                  static_cast<int>(chunks.size()) == settings.virtual_stages);
  int64_t params = 0;
  MemoryTerms terms;
  std::vector<int64_t> per_micro_batch;  // A'_v by local chunk
  for (const ChunkRange& range : chunks) {
    params += table.param_count(range.first, range.last);
    terms.buffers_bytes += table.buffer_bytes(range.first, range.last);
    terms.transient_bytes =
        std::max(terms.transient_bytes, table.transient_bytes(range.first, range.last));
    const int64_t activations = table.retained_bytes(range.first, range.last);
    RecomputedActivations kept{activations, 0};
    if (range.checkpoint) kept = {table.boundary_bytes(range.first), activations};
    if (!range.recomputed.empty())
      kept = recomputed_activations(table, range.first, range.last, range.recomputed);
    per_micro_batch.push_back(kept.per_micro_batch_bytes);
    terms.activation_bytes_per_micro_batch += per_micro_batch.back();
    // The rank recomputes one chunk at a time, freeing its graph at the end of that backward.
    terms.recompute_bytes = std::max(terms.recompute_bytes, kept.recompute_bytes);
  }
  // Share the rank's W chunk micro-batches out, largest chunk first, each up to its ℓ_v.
  std::vector<int> order(chunks.size());
  for (size_t chunk = 0; chunk < order.size(); ++chunk) order[chunk] = static_cast<int>(chunk);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return per_micro_batch[a] > per_micro_batch[b]; });
  int left = interleaved_rank_in_flight(settings.pp, settings.virtual_stages, stage_idx,
                                        settings.num_micro_batches);
  for (int chunk : order) {
    const int held = std::min(left, interleaved_in_flight(settings.pp, settings.virtual_stages,
                                                          stage_idx, chunk,
                                                          settings.num_micro_batches));
    terms.in_flight += held;
    terms.activations_bytes += held * per_micro_batch[chunk];
    left -= held;
  }
  set_parameter_terms(params, settings, &terms);
  terms.comm_buffers_bytes = interleaved_comm_buffer_bytes(table, settings, stage_idx, chunks);
  set_total(settings, stage_idx, &terms);
  return terms;
}

}  // namespace pipeplan
