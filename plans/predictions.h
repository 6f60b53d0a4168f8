// A plan's predictions (plan.json's "predictions"): per stage the memory model's terms, the
// stage's times and its gradient buckets, and the whole iteration's figures.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipeplan {

/// Every term of the memory model for one stage (docs/models.md, Memory), in bytes.
struct MemoryTerms {
  int64_t parameters_bytes = 0;
  int64_t gradients_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t master_copy_bytes = 0;  ///< low-precision weight copies under autocast
  int64_t buffers_bytes = 0;
  /// A_s(b), the stage input if checkpointed, or A'(R) if it recomputes layers R (docs/models.md)
  int64_t activation_bytes_per_micro_batch = 0;
  int in_flight = 0;                             ///< ℓ_s
  int64_t activations_bytes = 0;                 ///< ℓ_s · A_s(b)
  /// One micro-batch's full activations while recomputing; zb-h1: ω_s of them, since each
  /// micro-batch past its B keeps its recomputed graph until its W.
  int64_t recompute_bytes = 0;
  int64_t transient_bytes = 0;
  int64_t comm_buffers_bytes = 0;
  int64_t runtime_overhead_bytes = 0;
  /// A calibrating run's measured − predicted peak of this stage (plan.calibration); may be
  /// negative; 0 without calibration.
  int64_t calibration_bytes = 0;
  int64_t total_bytes = 0;  ///< the predicted peak: the sum of the terms (at least 0)
  /// zb-h1: ω_s · the stage's layer-output gradients, which B keeps for W (optional key, read as
  /// 0); 0 under other schedules. A term of total_bytes.
  int64_t deferred_gradients_bytes = 0;

  /// What total_bytes holds: the sum of the byte terms (activations_bytes, not the per-micro-batch
  /// figure), at least 0.
  int64_t sum_of_terms() const {
    return std::max<int64_t>(
        0, parameters_bytes + gradients_bytes + optimizer_state_bytes + master_copy_bytes +
               buffers_bytes + activations_bytes + recompute_bytes + deferred_gradients_bytes +
               transient_bytes + comm_buffers_bytes + runtime_overhead_bytes + calibration_bytes);
  }
};

/// Predicted times of one chunk of an interleaved-1f1b stage (StagePrediction::chunks).
struct ChunkPrediction {
  double fwd_ms = 0;        ///< one micro-batch through the chunk
  double bwd_ms = 0;        ///< one micro-batch
  double recompute_ms = 0;  ///< extra forward per micro-batch: the chunk's, or its recomputed layers'
  /// sending one micro-batch's boundary tensors: its output forward and its input's gradient
  /// back (each 0 at the model's ends), so that the stage's p2p_ms, their sum, means what it
  /// means without chunks
  double p2p_ms = 0;
};

/// One gradient bucket of a stage with dp > 1 (plans/buckets.h), what the simulator overlaps.
struct BucketPrediction {
  int chunk = 0;      ///< the stage's local chunk whose layers it holds
  int64_t bytes = 0;  ///< its gradients
  /// The share of the chunk's last weight-gradient action (micro-batch m − 1's backward, or its
  /// W) done when the bucket's gradients are complete: the backward time of its layers and of
  /// the chunk's layers after them, over the chunk's.
  double ready_fraction = 1;
  double comm_ms = 0;  ///< its all-reduce, or under ZeRO-1 its reduce-scatter
};

/// Predicted behaviour of one stage (the same for each of its replicas). A stage is one rank of
/// a pipeline: under interleaved-1f1b it runs V chunks, and its times and memory are theirs
/// together (times summed over the chunks, memory the rank's).
struct StagePrediction {
  double fwd_ms = 0;        ///< one micro-batch
  double bwd_ms = 0;        ///< one micro-batch; zb-h1: its B (input gradient)
  double recompute_ms = 0;  ///< extra forward per micro-batch: the stage's, or its recomputed layers'
  double p2p_ms = 0;        ///< sending one micro-batch's boundary tensors
  double compute_ms = 0;    ///< all micro-batches of one iteration
  /// The gradient all-reduce over the stage's replicas (ZeRO-1: the reduce-scatter), every bucket's
  /// summed, whether or not a backward hides it (0 if dp = 1)
  double allreduce_ms = 0;
  double optimizer_ms = 0;  ///< one optimizer step over the stage's parameters
  double busy_ms = 0;       ///< simulated, per iteration
  double idle_ms = 0;       ///< simulated, per iteration
  /// Spread of one micro-batch's forward (backward) time from one micro-batch to the next, as
  /// a coefficient of variation (standard deviation / mean), from the profile's p90 against its
  /// median; 0 when plan.json has no fwd_cv / bwd_cv (both are written when either is above 0).
  /// The simulator draws action times with it.
  double fwd_cv = 0;
  double bwd_cv = 0;
  int64_t peak_memory_bytes = 0;
  MemoryTerms memory;
  /// zb-h1: one micro-batch's W (weight gradients); 0 otherwise (optional key). compute_ms is
  /// num_micro_batches · (fwd_ms + bwd_ms + bwd_weight_ms + recompute_ms).
  double bwd_weight_ms = 0;
  /// interleaved-1f1b: the times of each of the stage's V chunks, local chunk v (global chunk
  /// v·pp + stage) at index v; fwd_ms, bwd_ms, recompute_ms and p2p_ms are their sums. Empty
  /// under the other schedules (optional key "chunks").
  std::vector<ChunkPrediction> chunks = {};
  /// dp > 1: the stage's gradient buckets in the order they are started (optional key "buckets";
  /// allreduce_ms is their comm_ms summed). Empty with one replica.
  std::vector<BucketPrediction> buckets = {};
  /// ZeRO-1: gathering the updated parameters after the optimizer step; 0 otherwise (optional
  /// key).
  double allgather_ms = 0;
  /// Tensor parallelism: the split layers' all-reduces, per iteration, inside compute_ms (in
  /// fwd_ms, bwd_ms and recompute_ms); 0 with tp 1 (optional key, written when above 0).
  double tp_allreduce_ms = 0;
  /// Simulated: the time the stage waits at its all-reduce (the part of the collectives no
  /// backward hides), per iteration; what a run measures as its allreduce_ms (optional key).
  double allreduce_exposed_ms = 0;
};

/// How a plan's iteration was predicted (Predictions::iteration_estimate).
enum class IterationEstimate {
  kMeanTimes,  ///< one play with every action at its mean time ("mean-times")
  kDraws,      ///< the mean over draws of varying action times ("draws")
};
std::string to_string(IterationEstimate estimate);  ///< "mean-times", "draws"
/// Throws Error(kBadInput) naming `field` for any other word.
IterationEstimate parse_iteration_estimate(std::string_view text, std::string_view field);

/// Whole-plan predictions.
struct Predictions {
  double iteration_ms = 0;
  double samples_per_s = 0;
  /// Idle share of all ranks' time in one iteration; 0 with one stage (pp = 1): no pipeline, so
  /// its idle time (waiting for slower replicas, or for the variation of action times) is no
  /// bubble. The stages' idle_ms keep it.
  double bubble_fraction = 0;
  double allreduce_ms = 0;  ///< the longest stage all-reduce
  double optimizer_ms = 0;     ///< the longest stage optimizer step
  std::vector<StagePrediction> stages;
  /// The largest of the stages' peak_memory_bytes; 0 with no stage.
  int64_t peak_memory_bytes() const {
    int64_t peak = 0;
    for (const StagePrediction& stage : stages) peak = std::max(peak, stage.peak_memory_bytes);
    return peak;
  }
  std::vector<std::string> notes;  ///< e.g. "micro-batch 64 is beyond the profiled 1..32"
  /// Inference plans: one request (global_batch samples, num_micro_batches micro-batches per
  /// replica) from its first forward to its last output, in ms; iteration_ms is then the
  /// interval at which the pipeline takes requests back to back (so that samples_per_s =
  /// global_batch / iteration_ms is the throughput), at most latency_ms. 0 for training
  /// (optional key "latency_ms").
  double latency_ms = 0;
  /// How iteration_ms (and from it samples_per_s, the bubble, the stages' idle time and
  /// latency_ms) was predicted: kDraws when a stage's times vary (fwd_cv, bwd_cv) and their
  /// draws fit the planner's budget, else kMeanTimes. Optional key "iteration_estimate", written
  /// only where it differs from what its absence reads as: kDraws when a stage's fwd_cv or
  /// bwd_cv is above 0 (plans written before the key drew whenever times varied), else
  /// kMeanTimes.
  IterationEstimate iteration_estimate = IterationEstimate::kMeanTimes;
};

}  // namespace pipeplan
