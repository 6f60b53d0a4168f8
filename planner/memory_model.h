// The memory model (docs/models.md, Memory): every term of one stage's peak device memory, from the
// profile at the plan's micro-batch size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/units.h"
#include "planner/layer_table.h"
#include "plans/plan.h"
#include "plans/schedule.h"

namespace pipeplan {

/// Bytes per parameter. Weights, gradients and optimizer state are fp32 under every
/// precision; autocast adds a low-precision copy of the weights (master_copy_bytes).
inline constexpr int64_t kWeightBytesPerParameter = 4;
inline constexpr int64_t kGradientBytesPerParameter = 4;
inline constexpr int64_t kSgdStateBytesPerParameter = 4;    ///< momentum: total 12
inline constexpr int64_t kAdamwStateBytesPerParameter = 8;  ///< two moments: total 16
inline constexpr int64_t kAutocastCopyBytesPerParameter = 2;
/// DP keeps one gradient bucket per rank for the collective under way (PyTorch DDP's default
/// bucket_cap_mb = 25, the plan's data_parallel.bucket_bytes); a stage smaller than that needs
/// only its size.
inline constexpr int64_t kGradientBucketBytes = kDefaultBucketBytes;

/// What a stage's memory depends on besides its layers.
struct MemorySettings {
  Schedule schedule = Schedule::kOneFOneB;
  int pp = 1;
  int dp = 1;
  int num_micro_batches = 1;
  int virtual_stages = 1;  ///< V: interleaved-1f1b's chunks per stage, else 1
  OptimizerKind optimizer = OptimizerKind::kSgd;
  Precision precision = Precision::kFp32;
  int64_t runtime_overhead_bytes = 0;  ///< the profile's device.runtime_overhead_bytes
  /// By stage index: a calibrating run's correction added to the stage's total (may be
  /// negative; Calibration::memory_corrections); empty without calibration.
  std::vector<int64_t> calibration_bytes;
  /// ZeRO-1 (1): each replica keeps 1/dp of the optimizer state; 0: all of it.
  int zero = 0;
  /// The gradient bucket of the comm buffers (plan.data_parallel.bucket_bytes).
  int64_t bucket_bytes = kGradientBucketBytes;
  /// Inference plans (forward_stage_memory): weights (and the autocast copy), buffers, the input
  /// and working set of one forward and the comm buffers; no gradients, optimizer state,
  /// retained activations or gradient bucket; the schedule is gpipe.
  bool forward_only = false;

  /// The correction of stage `stage_idx` (0 when there is none).
  int64_t calibration_of(int stage_idx) const {
    return stage_idx < static_cast<int>(calibration_bytes.size()) ? calibration_bytes[stage_idx]
                                                                  : 0;
  }
};

/// Optimizer state bytes per parameter: 4 for SGD (momentum), 8 for AdamW.
inline int64_t optimizer_state_bytes_per_parameter(OptimizerKind optimizer) {
  return optimizer == OptimizerKind::kAdamw ? kAdamwStateBytesPerParameter
                                            : kSgdStateBytesPerParameter;
}

/// ℓ_s, the micro-batches stage `stage_idx` holds activations for at its peak: m for gpipe,
/// min(m, pp − s) for 1f1b, min(m, pp) for zb-h1. zb-h1 keeps a micro-batch's activations
/// until its W, which lags its B by s micro-batches on stage s (plans/schedule.h): just after
/// B(i) the stage holds F(i + 1 .. i + w) not yet past B, and B(i − s .. i) not yet past W,
/// w + s + 1 = pp with 1f1b's w = pp − s − 1 warm-up forwards. interleaved-1f1b: the chunk
/// micro-batches the rank holds at once over its `virtual_stages` chunks, W = min(w + 1, m·V)
/// (plans/schedule.h: interleaved_rank_in_flight), at most V·m; interleaved_stage_memory shares
/// them among the chunks.
inline int in_flight(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                     int virtual_stages = 1) {
  switch (schedule) {
    case Schedule::kGpipe:
      return num_micro_batches;
    case Schedule::kOneFOneB:
      return std::min(num_micro_batches, pp - stage_idx);
    case Schedule::kZeroBubbleH1:
      return std::min(num_micro_batches, pp);
    case Schedule::kInterleaved1F1B:
      return interleaved_rank_in_flight(pp, virtual_stages, stage_idx, num_micro_batches);
  }
  return num_micro_batches;
}

/// ω_s, zb-h1's micro-batches past their B whose W has not run, at the same peak: min(m, s + 1)
/// (B(i − s .. i) just after B(i)); each keeps its layers' output gradients for its W. 0 for
/// the other schedules.
inline int deferred_weight_passes(Schedule schedule, int stage_idx, int num_micro_batches) {
  return schedule == Schedule::kZeroBubbleH1 ? std::min(num_micro_batches, stage_idx + 1) : 0;
}

/// zb-h1's ω_s · G_s for stage `stage_idx` holding layers [first, last): the output gradients of
/// its layers that its micro-batches past their B keep for W (LayerTable::output_gradient_bytes);
/// 0 for the other schedules.
inline int64_t deferred_gradient_bytes(const LayerTable& table, const MemorySettings& settings,
                                       int stage_idx, int first, int last) {
  const int deferred =
      deferred_weight_passes(settings.schedule, stage_idx, settings.num_micro_batches);
  return deferred == 0
             ? 0
             : deferred * table.output_gradient_bytes(first, last, stage_idx == settings.pp - 1);
}

/// The optimizer state of `params` parameters one replica keeps: all of it, or under ZeRO-1 its
/// shard, ⌈params / dp⌉ parameters' worth (the executor splits every gradient bucket into dp
/// pieces of ⌈n / dp⌉, so a shard is at most a few elements more than that).
inline int64_t optimizer_state_bytes(int64_t params, const MemorySettings& settings) {
  if (settings.forward_only) return 0;
  const int64_t kept = settings.zero == 1 && settings.dp > 1
                           ? (params + settings.dp - 1) / settings.dp
                           : params;
  return kept * optimizer_state_bytes_per_parameter(settings.optimizer);
}

/// Bytes of `params` parameters that do not depend on the micro-batch: weights, gradients,
/// optimizer state (optimizer_state_bytes) and, under autocast, the low-precision copy.
inline int64_t parameter_bytes(int64_t params, const MemorySettings& settings) {
  return params *
             (kWeightBytesPerParameter + (settings.forward_only ? 0 : kGradientBytesPerParameter) +
              (settings.precision == Precision::kFp32 ? 0 : kAutocastCopyBytesPerParameter)) +
         optimizer_state_bytes(params, settings);
}

/// DP's communication buffer for a stage of `params` parameters (0 with one replica): the
/// all-reduce's bucket, the smaller of its gradients and the plan's bucket; under ZeRO-1 the
/// reduce-scatter's received pieces, ⌈gradients / dp⌉: every bucket keeps the piece it receives
/// (Gloo's ring; NCCL's output piece) until the all-reduce action waits for it, and all of
/// them can be under way at once (bench/RESULTS.md: the measured peak without this term was
/// 10% under).
inline int64_t gradient_bucket_bytes(int64_t params, const MemorySettings& settings) {
  if (settings.dp <= 1 || settings.forward_only) return 0;
  const int64_t gradients = params * kGradientBytesPerParameter;
  if (settings.zero == 1) return (gradients + settings.dp - 1) / settings.dp;
  return std::min(gradients, settings.bucket_bytes);
}

/// Communication buffers of stage `stage_idx` holding layers [first, last), under the
/// executor's transfer policy (plans/schedule.h: R = kRecvLookahead, S = kMaxSendsInFlight):
///
///   1f1b:  comm_buffers = R · in_bytes · [s > 0] + (R + 1) · out_bytes · [s < pp − 1]
///                       + S · max(in_bytes · [s > 0], out_bytes · [s < pp − 1])
///   gpipe: comm_buffers = (R + 1 + S) · out_bytes · [s < pp − 1]
///   interleaved-1f1b (interleaved_comm_buffer_bytes):
///          comm_buffers = (2R + 1 + S) · max_bytes
///   all:                + (dp > 1 ? min(gradient_bytes, bucket_bytes) : 0)
///                         (ZeRO-1: ⌈gradient_bytes / dp⌉, gradient_bucket_bytes)
///
/// where in_bytes and out_bytes are one micro-batch's boundary tensors (table.boundary_bytes
/// at first and last). Receives: each kind keeps R buffers posted ahead — activations from
/// stage s − 1, gradients from stage s + 1 — and the received output gradient a backward is
/// consuming is one more, which no other term counts (the profile's backward transient
/// excludes the output gradient; a consumed activation becomes the stage input, which the
/// retained activations count). Sends: at most S tensors are kept alive by outstanding sends,
/// each at most the larger boundary the stage sends across. GPipe's peak is the stage's first
/// backward, when every activation receive has been consumed and no gradient has been sent:
/// only the gradient receives and the activation sends count (the last stage has none; counting
/// the 1f1b terms there over-predicts its peak: bench/history/2026-11-22-session-4.md). The last
/// term is DP's gradient bucket: the only per-device memory DP without sharding adds.
/// interleaved-1f1b: the pipeline wraps (stage pp − 1 sends to stage 0), so every rank
/// receives and sends both kinds, as a middle 1f1b stage; its chunks share the R receives
/// posted ahead of each kind and the S sends, so max_bytes is the largest boundary any of its
/// chunks crosses (inputs of global chunks c > 0, outputs of chunks c < pp·V − 1).
int64_t comm_buffer_bytes(const LayerTable& table, const MemorySettings& settings, int stage_idx,
                          int first, int last);

/// The boundary tensors comm_buffer_bytes counts for stage `stage_idx`: `in` of the input
/// boundary, `out` of the output boundary, and `sends` of the larger of the two.
struct CommBufferCounts {
  int in = 0;
  int out = 0;
  int sends = 0;
};
inline CommBufferCounts comm_buffer_counts(Schedule schedule, int pp, int stage_idx) {
  const bool has_in = stage_idx > 0;
  const bool has_out = stage_idx < pp - 1;
  if (schedule == Schedule::kGpipe)
    return {0, has_out ? kRecvLookahead + 1 + kMaxSendsInFlight : 0, 0};
  if (schedule == Schedule::kInterleaved1F1B)  // both neighbours on every rank (the wrap)
    return {kRecvLookahead, kRecvLookahead + 1, kMaxSendsInFlight};
  return {has_in ? kRecvLookahead : 0, has_out ? kRecvLookahead + 1 : 0,
          has_in || has_out ? kMaxSendsInFlight : 0};
}

/// Inference (forward-only gpipe, plans/schedule.h: expand_forward_only): `in` = R + 1 input
/// boundary tensors for s > 0 — the R receives posted ahead and the one the running forward
/// consumes — and `out` = S outputs kept alive by the sends in flight for s < pp − 1. Nothing
/// travels backwards, and no forward keeps its input after it ends.
inline CommBufferCounts forward_comm_buffer_counts(int pp, int stage_idx) {
  return {stage_idx > 0 ? kRecvLookahead + 1 : 0, stage_idx < pp - 1 ? kMaxSendsInFlight : 0, 0};
}

/// comm_buffer_counts, or forward_comm_buffer_counts for settings.forward_only.
inline CommBufferCounts stage_comm_counts(const MemorySettings& settings, int stage_idx) {
  return settings.forward_only ? forward_comm_buffer_counts(settings.pp, stage_idx)
                               : comm_buffer_counts(settings.schedule, settings.pp, stage_idx);
}

/// Inference (settings.forward_only, a LayerTable built forward_only): every term of stage
/// `stage_idx` holding layers [first, last), one micro-batch at a time through its forward, at
/// the forward's peak (executor/inferencer.cpp; the allocator's bytes after the weights are
/// loaded, as the run measures):
///
///   parameters = 4·P, master_copy = 2·P under autocast; gradients = optimizer_state = 0
///   buffers    = the layers' buffers
///   in_flight  = 1, activation_bytes_per_micro_batch = activations = X_first = in_bytes': the
///                input the running forward reads (the received boundary tensor, or stage 0's
///                model input from the data loader), held until the stage's forward returns;
///                nothing is retained for a backward (no recompute, no deferred)
///   transient  = the forward's working set beside X_first (LayerTable::transient_bytes of a
///                forward-only table): max(P_first, max_{first<i<last} X_i + P_i), P_i the
///                layer's inference_fwd_peak_bytes (its output and temporaries above its input),
///                X_i the previous layer's output it reads; plus the target on the last stage
///   comm       = R · in_bytes · [s > 0] + S · out_bytes · [s < pp − 1]   (R = kRecvLookahead
///                receives posted ahead, S = kMaxSendsInFlight outputs held by sends)
///   runtime overhead, calibration; total their sum (>= 0).
///
/// resnet_tiny at b = 4 (bench/RESULTS.md, issue 23), stage 0 = layers 0..2 of pp = 2: the run
/// measured 1,104,016 bytes = 78,704 weights and buffers + 12,544 model input + 200,704 (2 sends
/// of 100,352) + 200,704 (layer 1's input, the stem's output) + 611,328 (layer 1's P: its ReLU
/// output, oneDNN's blocked copy of a convolution's input, that convolution's output and its
/// reordered 9,216-byte weight); the model without the X_i and with the training forward's
/// transient (401,408) in place of P said 693,360 (−37%).
/// StageEvaluator counts the same total (the consumed input as one more receive buffer).
MemoryTerms forward_stage_memory(const LayerTable& table, const MemorySettings& settings,
                                 int stage_idx, int first, int last);

/// Every term for stage `stage_idx` holding layers [first, last) (see MemoryTerms):
/// weights, gradients and optimizer state from the parameter count; master_copy under
/// autocast; buffers; A_s(b) per micro-batch times ℓ_s in flight — or, when `checkpoint`,
/// only the stage input per micro-batch in flight (the model input for stage 0) plus one
/// micro-batch's full A_s(b) during its recompute (zb-h1: ω_s of them, each recomputed graph
/// kept until its W); zb-h1's ω_s · G_s, G_s the output gradients of the stage's layers that B
/// keeps for W (LayerTable::output_gradient_bytes); the largest layer transient; the
/// communication buffers; the runtime overhead; the calibration's correction. total_bytes is
/// the sum of the terms (at least 0); the stage fits iff total_bytes <= the device memory.
/// With `recomputed` (partial checkpointing, `checkpoint` false; planner/partial_checkpoint.h):
/// A'(R) per micro-batch in flight and one micro-batch's recompute of those layers.
MemoryTerms stage_memory(const LayerTable& table, const MemorySettings& settings, int stage_idx,
                         int first, int last, bool checkpoint,
                         const std::vector<int>& recomputed = {});

/// One chunk of an interleaved-1f1b stage: layers [first, last), recomputed when `checkpoint`.
struct ChunkRange {
  ChunkRange() = default;
  ChunkRange(int first_layer, int last_layer, bool checkpointed = false,
             std::vector<int> recomputed_layers = {})
      : first(first_layer),
        last(last_layer),
        checkpoint(checkpointed),
        recomputed(std::move(recomputed_layers)) {}
  int first = 0;
  int last = 0;
  bool checkpoint = false;
  std::vector<int> recomputed;  ///< partial checkpointing: the layers recomputed, else empty
};

/// The comm buffers of interleaved-1f1b stage `stage_idx` holding `chunks` (local chunk v at
/// index v): (2R + 1 + S) · max_bytes, plus the gradient bucket (comm_buffer_bytes).
int64_t interleaved_comm_buffer_bytes(const LayerTable& table, const MemorySettings& settings,
                                      int stage_idx, const std::vector<ChunkRange>& chunks);

/// interleaved-1f1b (settings.virtual_stages = V >= 2): every term of stage `stage_idx`, one rank
/// holding `chunks` (V entries, local chunk v = global chunk v·pp + s at index v), with
/// ℓ_v = interleaved_in_flight(pp, V, s, v, m) the most micro-batches chunk v holds, W =
/// interleaved_rank_in_flight(pp, V, s, m) the most the rank holds over all its chunks at once,
/// and A'_v = A_v(b) (the chunk input's bytes when the chunk is checkpointed, A'(R) when it
/// recomputes some of its layers R):
///
///   weights, gradients, optimizer, master copy, buffers: of Σ_v P_v parameters, Σ_v buffers_v
///   n_v                              = chunk micro-batches given to chunk v: the W shared out
///                                      largest A'_v first, each chunk up to its ℓ_v
///   in_flight                        = Σ_v n_v = min(W, Σ_v ℓ_v)    (at most V·m)
///   activation_bytes_per_micro_batch = Σ_v A'_v                     (one micro-batch, every chunk)
///   activations                      = Σ_v n_v · A'_v
///
/// The rank's activations never exceed Σ_v n_v · A'_v: at any time chunk v holds some h_v <= ℓ_v
/// with Σ h_v <= W, and filling the largest chunks first maximises Σ h_v · A'_v under those
/// limits. It is below Σ_v ℓ_v · A'_v, since the chunks peak at different times (with equal
/// chunks it is W · A', the rank's peak; memory_model_test's unequal chunks reach it too).
///
///   recompute                        = max over checkpointed chunks of A_v(b), or of the
///                                      recompute bytes of R (one recompute at a time: the rank
///                                      runs one backward at a time), else 0
///   transient                        = the largest layer transient over the chunks
///   comm_buffers                     = interleaved_comm_buffer_bytes
///   runtime overhead once, the calibration's correction of the stage; total their sum (>= 0).
MemoryTerms interleaved_stage_memory(const LayerTable& table, const MemorySettings& settings,
                                     int stage_idx, const std::vector<ChunkRange>& chunks);

/// A lower bound of stage_memory(table, settings, stage_idx, first, last, checkpoint)
/// .total_bytes that never decreases as [first, last) grows: every term, except that the
/// terms at the stage's two boundaries (communication buffers, the checkpointed stage input)
/// count the smallest boundary tensor a stage boundary can have (min_inner_boundary_bytes)
/// instead of the actual one, since those terms alone can shrink when the range grows; one
/// A_s(b) stands for ℓ_s · A_s(b) + recompute when checkpointing; the calibration's correction
/// is the same for any range at stage_idx. Holds for ranges a stage
/// can have in a split: stage 0 starts at layer 0, a middle stage lies within [1, L − 1].
/// Inline: the partitioners call it for most (start, end) pairs they look at.
inline int64_t stage_memory_lower_bound(const LayerTable& table, const MemorySettings& settings,
                                        int stage_idx, int first, int last, bool checkpoint) {
  const int64_t params = table.param_count(first, last);
  const int64_t activations = table.retained_bytes(first, last);
  const int held = in_flight(settings.schedule, settings.pp, stage_idx, settings.num_micro_batches,
                             settings.virtual_stages);
  const int deferred =
      deferred_weight_passes(settings.schedule, stage_idx, settings.num_micro_batches);
  const int64_t smallest = table.min_inner_boundary_bytes();
  const int64_t input = stage_idx == 0 ? table.boundary_bytes(0) : smallest;
  const CommBufferCounts buffers = stage_comm_counts(settings, stage_idx);
  // Forward-only: stage 0's input, the model input, is held while its forward runs.
  const int64_t boundaries = smallest * (buffers.in + buffers.out + buffers.sends) +
                             (settings.forward_only && stage_idx == 0 ? input : 0);
  const int64_t bucket = gradient_bucket_bytes(params, settings);
  const int64_t total =
      parameter_bytes(params, settings) + table.buffer_bytes(first, last) +
      (checkpoint ? held * input + std::max(deferred, 1) * activations : held * activations) +
      deferred_gradient_bytes(table, settings, stage_idx, first, last) +
      table.transient_bytes(first, last) + boundaries + bucket + settings.runtime_overhead_bytes +
      settings.calibration_of(stage_idx);
  return std::max<int64_t>(total, 0);
}

}  // namespace pipeplan
