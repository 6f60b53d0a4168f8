// What a rank measures while it trains: timed actions (for medians and the trace), each step's
// world-wide loss and health check, and the summary that becomes run.json.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "plans/plan.h"
#include "plans/run.h"

namespace pipeplan::executor {

class Comm;

/// What a timed stretch of a rank's time was spent on.
enum class EventKind {
  kLoad,       ///< reading a micro-batch's samples (busy)
  kForward,    ///< busy, compute
  kBackward,   ///< busy, compute
  kRecompute,  ///< checkpointed stages: the forward again before the backward (busy, compute)
  kSend,       ///< starting a send (the transfer itself runs in the background)
  kRecvWait,   ///< blocked until a receive completed (idle)
  kSendWait,   ///< blocked until the iteration's sends completed (idle)
  kAllReduce,  ///< the replicas' gradient all-reduce (idle: not compute)
  kOptimizer,  ///< the optimizer step (busy)
};

/// "load", "forward", "backward", "recompute", "send", "recv-wait", "send-wait", "all-reduce",
/// "optimizer".
const char* to_string(EventKind kind);

/// One timed action of one rank; times in ms since the ranks' common origin (taken right after
/// a barrier, so ranks on one machine line up within the barrier's skew).
struct ActionEvent {
  int rank = 0;
  EventKind kind = EventKind::kForward;
  int micro_batch = -1;  ///< -1 for all-reduce, optimizer and send-wait
  int64_t step = 0;
  double start_ms = 0;
  double end_ms = 0;
};

/// Writes `events` of all ranks as a Chrome trace (traceEvents, ph "X", pid = rank, µs) that
/// Perfetto and chrome://tracing open; processes are named "rank R: stage S, replica P".
void write_chrome_trace(const std::string& path, const std::vector<ActionEvent>& events,
                        const Plan& plan);

/// One rank's totals of one step, ms.
struct StepTiming {
  double iteration_ms = 0;  ///< from the step's start (before loading data) to its last wait
  double busy_ms = 0;       ///< load + compute + optimizer
  double compute_ms = 0;    ///< forward + backward + recompute
  double optimizer_ms = 0;
  double allreduce_ms = 0;
  double recv_wait_ms = 0;
};

/// Collects one rank's timed actions. Steps after the first `warmup_steps` of this process are
/// measured (the medians are over at most the last kMaxMeasuredSteps of them); the events of the
/// first kMaxTraceSteps measured steps are kept for the trace.
class Recorder {
 public:
  static constexpr int kMaxMeasuredSteps = 1000;
  static constexpr int kMaxTraceSteps = 20;

  Recorder(int rank, int warmup_steps);
  /// Sets the time origin to now (call right after a barrier).
  void reset_origin();
  /// Milliseconds since the origin (steady clock).
  double now_ms() const;
  /// Starts timing `step`.
  void begin_step(int64_t step);
  /// Adds one timed action of the current step.
  void record(EventKind kind, int micro_batch, double start_ms, double end_ms);
  /// Ends the current step and returns its totals.
  StepTiming end_step();
  /// Whether the current step is past the warm-up.
  bool measuring() const { return steps_begun_ > warmup_steps_; }
  int warmup_steps() const { return warmup_steps_; }
  /// Medians over the measured steps (zeros when none was measured).
  RankMeasurement summarize(const RankAssignment& assignment) const;
  const std::vector<ActionEvent>& events() const { return events_; }

 private:
  int rank_;
  int warmup_steps_;
  int64_t steps_begun_ = 0;
  int64_t step_ = 0;
  double origin_ms_ = 0;
  double step_start_ms_ = 0;
  StepTiming current_;
  std::vector<StepTiming> steps_;
  std::vector<double> fwd_ms_, bwd_ms_, recompute_ms_;
  std::vector<ActionEvent> events_;
  int traced_steps_ = 0;
};

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
  torch::Tensor values_;  // float64 [loss_sum, iteration_ms[w], loss_flag[w], gradient_flag[w]]
  int64_t pending_step_ = 0;
};

/// Rank 0: the run's measurements from every rank's summary and the slowest rank's iteration
/// time of each measured step (iteration_ms is their median; per-rank idle_ms is recomputed
/// against it so that busy + idle = iteration for every rank).
Measurements combine_measurements(const Plan& plan, std::vector<RankMeasurement> ranks,
                                  const std::vector<double>& slowest_iteration_ms,
                                  int warmup_steps);

/// A rank's summary and trace events as JSON for the store, and back.
Json rank_report_json(const RankMeasurement& measurement, const std::vector<ActionEvent>& events);
void parse_rank_report(const Json& json, RankMeasurement* measurement,
                       std::vector<ActionEvent>* events);

}  // namespace pipeplan::executor
