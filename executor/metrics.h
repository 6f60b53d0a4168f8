// What a rank measures while it trains: timed actions (for its means, run.json's representative
// step and the trace), each step's world-wide loss and health check, and the summary that
// becomes run.json.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "plans/plan.h"
#include "plans/run.h"
#include "plans/timeline.h"

namespace pipeplan::executor {

class Comm;

/// One measured step of one rank: its timed actions (as timeline events of this rank) and
/// when the step began and ended, all in ms since the ranks' common origin (taken right after
/// a barrier, so ranks on one machine line up within the barrier's skew).
struct StepEvents {
  int64_t step = 0;
  double start_ms = 0;  ///< begin_step, before loading any data
  double end_ms = 0;    ///< end_step, after the last wait
  std::vector<TimelineEvent> events;
};

/// One rank's totals of one step, ms.
struct StepTiming {
  double iteration_ms = 0;  ///< from the step's start (before loading data) to its last wait
  double busy_ms =
      0;  ///< compute + all-reduce + optimizer + all-gather (is_busy in plans/timeline.h)
  double compute_ms = 0;    ///< forward + backward (zb-h1: B + W) + recompute
  double optimizer_ms = 0;
  double allreduce_ms = 0;
  double allgather_ms = 0;  ///< ZeRO-1's parameter all-gather; 0 otherwise
  double tp_allreduce_ms = 0;  ///< tensor parallelism's all-reduces, inside the compute
  double recv_wait_ms = 0;
  double load_ms = 0;
  /// Mean per micro-batch over the step: m of them add up to the step's compute, which a
  /// median over all micro-batches would not (the first of a step is often slower). Under
  /// interleaved-1f1b a micro-batch's time is that of all the rank's chunks.
  double fwd_ms = 0;
  double bwd_ms = 0;  ///< zb-h1: B
  double recompute_ms = 0;
  double bwd_weight_ms = 0;  ///< zb-h1: W; 0 otherwise
};

/// Collects one rank's timed actions. Steps after the first `warmup_steps` of this process are
/// measured (its means are over the last kMaxMeasuredSteps of them, as the run's median
/// iteration time is; a time per micro-batch is the mean of each step's mean); the events of
/// the last kMaxKeptSteps measured steps are kept, for run.json's representative step and the
/// trace.
class Recorder {
 public:
  static constexpr int kMaxMeasuredSteps = 1000;
  static constexpr int kMaxKeptSteps = 100;

  Recorder(int rank, int warmup_steps);
  /// Sets the time origin to now (call right after a barrier).
  void reset_origin();
  /// Milliseconds since the origin (steady clock).
  double now_ms() const;
  /// Starts timing `step`.
  void begin_step(int64_t step);
  /// Adds one timed action of the current step; `peer` is the rank on the other end of a
  /// send or receive, else -1; `chunk` the action's local chunk (interleaved-1f1b), else 0.
  void record(TimelineKind kind, int micro_batch, double start_ms, double end_ms, int peer = -1,
              int chunk = 0);
  /// Adds one tensor-parallel all-reduce of the current step (it ran inside a compute action).
  void add_tp_allreduce(double ms) { current_.tp_allreduce_ms += ms; }
  /// Ends the current step and returns its totals.
  StepTiming end_step();
  /// Whether the current step is past the warm-up.
  bool measuring() const { return steps_begun_ > warmup_steps_; }
  int warmup_steps() const { return warmup_steps_; }
  /// Medians over the measured steps (zeros when none was measured).
  RankMeasurement summarize(const RankAssignment& assignment) const;
  /// The kept steps, oldest first.
  const std::deque<StepEvents>& kept_steps() const { return kept_; }

 private:
  int rank_;
  int warmup_steps_;
  int64_t steps_begun_ = 0;
  StepTiming current_;
  StepEvents current_events_;
  // Time and count of one kind of compute action in the current step, and the chunks it ran on.
  struct MicroBatchTotal {
    double total_ms = 0;
    int count = 0;
    std::vector<bool> chunks;  // chunks[v]: some action of local chunk v
    void add(double ms, int chunk) {
      total_ms += ms;
      ++count;
      if (chunks.size() <= static_cast<size_t>(chunk))
        chunks.resize(static_cast<size_t>(chunk) + 1);
      chunks[static_cast<size_t>(chunk)] = true;
    }
    // Per micro-batch: each ran once through every chunk that has this kind of action.
    double mean_ms() const {
      const auto num_chunks = std::count(chunks.begin(), chunks.end(), true);
      return count > 0 ? total_ms * static_cast<double>(num_chunks) / count : 0;
    }
  };

  std::deque<StepTiming> steps_;  // the last kMaxMeasuredSteps measured steps
  MicroBatchTotal fwd_total_, bwd_total_, recompute_total_, bwd_weight_total_;
  std::deque<StepEvents> kept_;
  double origin_ms_ = 0;
};

/// The representative step: among `kept_steps`, the one whose slowest-rank iteration time
/// (`slowest_iteration_ms`: step and time of every measured step) is the lower median; 0
/// when no kept step has a time.
int64_t representative_step(const std::vector<std::pair<int64_t, double>>& slowest_iteration_ms,
                            const std::vector<int64_t>& kept_steps);

/// Each rank's compute, action by action, in the last `max_steps` steps that every rank reported
/// and that have a slowest-rank iteration time (`slowest_iteration_ms`: step and ms), in step
/// order. A stage's recompute times are empty unless it recomputed; its W times (bwd_weight_ms)
/// empty unless it split its backwards (zb-h1), whose bwd_ms are then the Bs. An event of local
/// chunk v (interleaved-1f1b) goes to index v · num_micro_batches + micro_batch (RankStepTimes);
/// num_micro_batches matters only where some event has a chunk above 0.
std::vector<StepTimes> step_times(
    const std::vector<std::vector<StepEvents>>& ranks,
    const std::vector<std::pair<int64_t, double>>& slowest_iteration_ms, size_t max_steps,
    int num_micro_batches = 0);

/// The timeline of the same steps of every rank (`ranks[r]`: rank r's StepEvents, possibly
/// none): times from the earliest start of a step among all ranks; iteration_ms the latest
/// end after that origin; bubble_fraction the ranks' idle share of it (busy: is_busy kinds).
Timeline measured_timeline(const Plan& plan, const std::vector<std::vector<StepEvents>>& ranks,
                           const std::string& title);

/// This rank's contribution to one step's world-wide sum.
struct StepValues {
  int64_t step = 0;
  double loss_sum = 0;  ///< last stage: sum of its micro-batches' mean losses; else 0
  bool loss_finite = true;
  bool gradients_finite = true;
  double iteration_ms = 0;
};

/// One step as every rank saw it.
struct StepReport {
  int64_t step = 0;
  double loss = 0;                  ///< global-batch mean over all replicas
  double slowest_iteration_ms = 0;  ///< max over ranks
};

/// Sums each step's values over all ranks without stalling the pipeline: the sum of step t is
/// started when the step ends and finished when step t+1 ends (or at flush), so a NaN is reported
/// one step late, before any checkpoint, evaluation or output that could contain it.
class StepReducer {
 public:
  StepReducer(Comm& comm, const Plan& plan);
  /// Finishes the previous step's sum (returning its report) and starts this one's. Throws
  /// Error(kRuntime) naming step, stage and rank when a finished step had a NaN or Inf loss or
  /// gradient on any rank.
  std::optional<StepReport> push(const StepValues& values);
  /// Finishes the pending sum, if any, with the same checks.
  std::optional<StepReport> flush();

 private:
  StepReport finish();

  Comm& comm_;
  const Plan& plan_;
  torch::Tensor values_;  // float64 [loss_sum, iteration_ms[r], loss_flag[r], gradient_flag[r]]
  int64_t pending_step_ = 0;
};

/// Rank 0: the run's measurements from every rank's summary and the slowest rank's iteration
/// time of each measured step (iteration_ms is the median of the last
/// Recorder::kMaxMeasuredSteps, the steps the ranks' means cover; per-rank idle_ms is
/// recomputed against it so that busy + idle = iteration for every rank).
Measurements combine_measurements(const Plan& plan, std::vector<RankMeasurement> ranks,
                                  const std::vector<double>& slowest_iteration_ms,
                                  int warmup_steps);

/// --resume: keeps the lines of the steps log `path` (train --log) up to `step`, so that it reads
/// as one uninterrupted run, and warns of the lines dropped that are no record of a step. A log
/// that does not exist or is no regular file (a device or pipe, written in place) is left alone.
/// Throws Error(kBadInput) as read_file_bytes does (a log larger than kMaxLogFileBytes).
void truncate_log_after(const std::string& path, int64_t step);

/// A rank's summary and the events of some of its kept steps as JSON for the store, and back.
Json rank_report_json(const RankMeasurement& measurement, const std::vector<StepEvents>& steps);
void parse_rank_report(const Json& json, RankMeasurement* measurement,
                       std::vector<StepEvents>* steps);

}  // namespace pipeplan::executor
