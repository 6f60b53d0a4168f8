// The memory model: per-stage terms from the layer table.
#include "planner/memory_model.h"

#include <algorithm>

namespace pipeplan {

int64_t comm_buffer_bytes(const LayerTable& table, const MemorySettings& settings, int stage_idx,
                          int first, int last) {
  const int64_t in_bytes = stage_idx > 0 ? table.boundary_bytes(first) : 0;
  const int64_t out_bytes = stage_idx < settings.pp - 1 ? table.boundary_bytes(last) : 0;
  // GPipe peaks at the stage's first backward: every activation has been received (none is
  // posted ahead any more) and no gradient has been sent yet.
  const CommBufferCounts counts = comm_buffer_counts(settings.schedule, settings.pp, stage_idx);
  int64_t bytes =
      counts.in * in_bytes + counts.out * out_bytes + counts.sends * std::max(in_bytes, out_bytes);
  if (settings.dp > 1)
    bytes +=
        std::min(table.param_count(first, last) * kGradientBytesPerParameter, kGradientBucketBytes);
  return bytes;
}

MemoryTerms stage_memory(const LayerTable& table, const MemorySettings& settings, int stage_idx,
                         int first, int last, bool checkpoint) {
  const int64_t params = table.param_count(first, last);
  const int64_t activations = table.retained_bytes(first, last);
  MemoryTerms terms;
  terms.parameters_bytes = params * kWeightBytesPerParameter;
  terms.gradients_bytes = params * kGradientBytesPerParameter;
  terms.optimizer_state_bytes = params * optimizer_state_bytes_per_parameter(settings.optimizer);
  terms.master_copy_bytes =
      settings.precision == Precision::kFp32 ? 0 : params * kAutocastCopyBytesPerParameter;
  terms.buffers_bytes = table.buffer_bytes(first, last);
  terms.in_flight =
      in_flight(settings.schedule, settings.pp, stage_idx, settings.num_micro_batches);
  terms.activation_bytes_per_micro_batch = checkpoint ? table.boundary_bytes(first) : activations;
  terms.activations_bytes = terms.in_flight * terms.activation_bytes_per_micro_batch;
  const int deferred =
      deferred_weight_passes(settings.schedule, stage_idx, settings.num_micro_batches);
  terms.recompute_bytes = checkpoint ? std::max(deferred, 1) * activations : 0;
  terms.deferred_gradients_bytes = deferred_gradient_bytes(table, settings, stage_idx, first, last);
  terms.transient_bytes = table.transient_bytes(first, last);
  terms.comm_buffers_bytes = comm_buffer_bytes(table, settings, stage_idx, first, last);
  terms.runtime_overhead_bytes = settings.runtime_overhead_bytes;
  terms.calibration_bytes = settings.calibration_of(stage_idx);
  terms.total_bytes = std::max<int64_t>(
      0, terms.parameters_bytes + terms.gradients_bytes + terms.optimizer_state_bytes +
             terms.master_copy_bytes + terms.buffers_bytes + terms.activations_bytes +
             terms.recompute_bytes + terms.deferred_gradients_bytes + terms.transient_bytes +
             terms.comm_buffers_bytes + terms.runtime_overhead_bytes + terms.calibration_bytes);
  return terms;
}

}  // namespace pipeplan
