// The Run: what the executor measured while running a plan (run.json), under the same keys as
// the plan's predictions so that `pipeplan compare` can put them side by side.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "plans/plan.h"
#include "plans/timeline.h"

namespace pipeplan {

inline constexpr const char* kRunSchema = "pipeplan.run/1";

/// The times a rank measured, per micro-batch or per iteration: means over the measured steps
/// (after the warm-up), so that a stage's occasional slow action counts as the simulator must
/// count it; a time per micro-batch is the mean over steps of the step's mean per micro-batch.
/// For a stage, the mean over its replicas. (The run's iteration time is a median.)
struct MeasuredTimes {
  double fwd_ms = 0;        ///< one micro-batch's forward
  double bwd_ms = 0;        ///< one micro-batch's backward (without recompute); zb-h1: its B
  double bwd_weight_ms = 0;  ///< zb-h1: one micro-batch's W (optional key); 0 otherwise
  double recompute_ms = 0;  ///< one micro-batch's recomputed forward; 0 if none
  double compute_ms = 0;    ///< forward + backward (B + W) + recompute, per iteration
  double optimizer_ms = 0;  ///< the optimizer step, per iteration
  double allreduce_ms = 0;  ///< the gradient all-reduce, per iteration
  double recv_wait_ms = 0;  ///< blocked on receives, per iteration
  double load_ms = 0;       ///< reading the data, per iteration
  /// Compute + all-reduce + optimizer, per iteration: what the simulator counts as busy (the
  /// measured all-reduce includes waiting for the slowest replica, which the simulator counts
  /// as idle before it).
  double busy_ms = 0;
  /// The run's iteration_ms - busy_ms: receive and send waits, data loading, gaps.
  double idle_ms = 0;
  /// ZeRO-1: gathering the updated parameter shards after the step, per iteration (optional
  /// key); 0 otherwise. Counted in busy_ms as the all-reduce is.
  double allgather_ms = 0;
  /// Tensor parallelism: the split layers' all-reduces, per iteration, inside compute_ms
  /// (optional key); 0 otherwise.
  double tp_allreduce_ms = 0;

  /// Adds `weight` times every time of `other` to this one's.
  void add(const MeasuredTimes& other, double weight);
};

/// What one rank measured.
struct RankMeasurement : MeasuredTimes {
  int rank = 0;
  int stage = 0;
  int replica = 0;
  int tp_rank = 0;  ///< its place in its tensor-parallel group (key written when above 0)
  std::string device = "cpu";
  int64_t peak_memory_bytes = 0;          ///< allocator-reported peak (CPU + CUDA) over the run
  int64_t cuda_allocator_peak_bytes = 0;  ///< CUDA caching allocator's peak; 0 on CPU
  double iteration_ms = 0;  ///< this rank's own iteration time (step start to its last wait)
};

/// One stage, over its replicas: times are the replicas' mean, memory their maximum.
struct StageMeasurement : MeasuredTimes {
  int64_t peak_memory_bytes = 0;
};

/// One rank's compute in one measured step, action by action: what `pipeplan compare` replays
/// through the simulator.
/// Vectors "by micro-batch" hold, under interleaved-1f1b, m entries per local chunk: index
/// chunk · m + micro_batch (V·m entries).
struct RankStepTimes {
  std::vector<double> fwd_ms;        ///< by micro-batch
  std::vector<double> bwd_ms;        ///< by micro-batch; zb-h1: the B part
  std::vector<double> recompute_ms;  ///< by micro-batch; empty when the stage does not recompute
  double allreduce_ms = 0;
  double optimizer_ms = 0;
  /// By micro-batch, zb-h1 only: the W part of each backward; empty otherwise.
  std::vector<double> bwd_weight_ms = {};
};

/// Every rank's compute in one measured step, and the step's slowest-rank iteration time.
struct StepTimes {
  int64_t step = 0;
  double iteration_ms = 0;
  std::vector<RankStepTimes> ranks;  ///< by rank
};

/// Whole-run measurements, keyed like Predictions.
struct Measurements {
  double iteration_ms = 0;     ///< median over measured steps of the slowest rank's iteration
  double samples_per_s = 0;    ///< global_batch / iteration_ms
  double bubble_fraction = 0;  ///< idle share of all ranks' time in one iteration
  double allreduce_ms = 0;     ///< mean over ranks
  double optimizer_ms = 0;     ///< mean over ranks
  int warmup_steps = 0;        ///< steps left out of the means and medians
  int measured_steps = 0;      ///< steps the means and medians are over
  std::vector<StageMeasurement> stages;
  std::vector<RankMeasurement> ranks;  ///< indexed by rank
  /// The representative step: among the measured steps whose events the ranks kept, the one
  /// whose slowest-rank iteration time is the (lower) median; 0 when no step was measured.
  int64_t timeline_step = 0;
  /// Every rank's events of timeline_step, in ms from the earliest rank's start of the step;
  /// iteration_ms is that step's slowest rank's, bubble_fraction its idle share.
  Timeline timeline;
  /// The last measured steps every rank kept (at most 20), action by action, in step order;
  /// empty when no step was measured or run.json has no step_times (an optional key).
  std::vector<StepTimes> step_times;
  /// Inference runs (`pipeplan infer`): percentiles of the requests' latency, each request from
  /// its first forward on stage 0 to its last output on the last stage, over the measured
  /// requests (optional keys; 0 for training). iteration_ms is then the median interval between
  /// requests and samples_per_s the throughput.
  double latency_p50_ms = 0;
  double latency_p90_ms = 0;
  double latency_p99_ms = 0;
};

/// Test-split accuracy after an epoch (or at the end of a run that stops mid-epoch).
struct EpochAccuracy {
  int64_t epoch = 0;  ///< 1-based epoch the evaluation belongs to
  int64_t step = 0;   ///< global step after which it was taken
  double test_accuracy = 0;
};

/// A whole run.json.
struct Run {
  std::string tool_version;
  std::string plan_path;
  std::string plan_hash;
  int world_size = 1;
  std::string data = "synthetic";  ///< "fashion-mnist", "cifar10", "synthetic"
  std::string data_dir;            ///< "" for the default location
  uint64_t seed = 0;
  int64_t steps = 0;            ///< total optimizer steps of the run
  int64_t steps_per_epoch = 0;  ///< floor(train size / global batch)
  int64_t resumed_from_step = 0;  ///< 0 unless --resume continued a checkpoint
  double final_loss = 0;          ///< global-batch mean loss of the last step
  std::vector<EpochAccuracy> test_accuracy;
  Measurements measured;

  /// Consistency: world_size >= 1, steps >= 1, resumed_from_step <= steps, one RankMeasurement
  /// per rank in rank order, finite non-negative times, bubble_fraction in [0, 1], and in each
  /// of step_times one entry per rank, with as many backwards (and recomputes, if any) as
  /// forwards.
  /// Throws Error(kBadInput) naming the field.
  void validate(std::string_view document) const;
};

/// The array of `test_accuracy`'s entries, as run.json and a checkpoint manifest write it.
Json to_json(const std::vector<EpochAccuracy>& test_accuracy);
Json to_json(const RankMeasurement& measurement);
/// Reads one rank's entry; errors name the reader's document and path.
RankMeasurement rank_measurement_from_json(const JsonReader& reader);
Json to_json(const Run& run);
Run run_from_json(const Json& json, const std::string& document);
Run read_run(const std::string& path);

/// Checks that every step of `run` has the lists `plan`'s schedule needs beside the forwards
/// (whose count check_run_of_plan, planner/compare.h, checks): one W (bwd_weight_ms) per backward
/// under zb-h1, none under the others. Throws Error(kBadInput) naming the run's field.
void check_step_times_of_plan(const Plan& plan, const Run& run, const std::string& run_path);
/// Whether `data` names a data set train and infer read: "fashion-mnist", "cifar10" or
/// "synthetic" (what a run's data.kind and a checkpoint's data hold).
bool is_data_kind(std::string_view data);
/// The data sets as an error's "expected ..." lists them.
inline constexpr const char* kDataKinds = "fashion-mnist, cifar10 or synthetic";
/// Writes atomically (temporary file and rename).
void write_run(const std::string& path, const Run& run);
/// content_hash of the canonical JSON: identifies the run a calibration came from.
std::string run_hash(const Run& run);

}  // namespace pipeplan
