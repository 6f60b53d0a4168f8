// `pipeplan compare`: a plan's predictions beside what a run of it measured — per stage
// (every memory term and the measured peak, compute, idle) and per run (iteration, samples/s,
// bubble) — each error signed, (predicted − measured) / measured, and the iteration-time error
// split into the compute model's part and the rest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "planner/simulator.h"
#include "plans/plan.h"
#include "plans/run.h"
#include "plans/timeline.h"

namespace pipeplan {

inline constexpr const char* kCompareSchema = "pipeplan.compare/1";

/// One quantity, predicted and measured, in the same unit.
struct Difference {
  double predicted = 0;
  double measured = 0;
  /// (predicted − measured) / measured · 100: positive when the model over-predicts. 0 when
  /// both are 0; none when only the measured value is 0 (no relative error exists).
  std::optional<double> error_percent() const;
};

/// One stage: its predictions (the same for each replica) against its replicas' measurements
/// (times their mean, memory their maximum).
struct StageComparison {
  int first = 0;  ///< layers [first, last) (interleaved-1f1b: of its first and last chunk)
  int last = 0;
  bool checkpoint = false;
  std::vector<int> recompute_layers;  ///< partial checkpointing: the layers recomputed (all chunks)
  MemoryTerms memory;                ///< every predicted term (memory.total_bytes is the peak)
  Difference peak_memory_bytes;      ///< predicted total against the allocator's measured peak
  Difference fwd_ms;                 ///< one micro-batch
  Difference bwd_ms;                 ///< one micro-batch; zb-h1: its B
  Difference bwd_weight_ms;          ///< zb-h1: one micro-batch's W; 0 and 0 otherwise
  Difference recompute_ms;           ///< one micro-batch
  Difference compute_ms;             ///< per iteration: all micro-batches
  Difference optimizer_ms;           ///< per iteration
  /// Per iteration: the time the stage waits at its gradient all-reduce (ZeRO-1: reduce-scatter)
  /// after its last backward; the predicted is the simulated exposed part under overlap, the
  /// whole collective otherwise.
  Difference allreduce_ms;
  Difference busy_ms;                ///< per iteration: compute, all-reduce, optimizer
  Difference idle_ms;                ///< per iteration: the rest of the iteration
  double measured_load_ms = 0;       ///< reading data, per iteration (no model term)
  double measured_recv_wait_ms = 0;  ///< blocked on receives, per iteration
  /// interleaved-1f1b: the layer ranges [first, last) of the stage's chunks, in local order;
  /// empty otherwise.
  std::vector<std::pair<int, int>> chunks = {};
  Difference allgather_ms = {};  ///< ZeRO-1: gathering the parameters, per iteration
  /// Tensor parallelism: the split layers' all-reduces, per iteration (part of compute_ms).
  Difference tp_allreduce_ms = {};
  /// dp > 1: the predicted collectives of the gradients, every bucket summed, whether a
  /// backward hides them or not (the run measures only the exposed part).
  double predicted_allreduce_total_ms = 0;
};

/// The iteration-time error in two parts, in whole nanoseconds so that they add up exactly:
///
///   predicted − measured = (predicted − resimulated) + (resimulated − measured)
///                           compute model's error      schedule, communication and
///                                                      overhead models' error
///
/// where `resimulated` plays the plan's schedule with the stage times measured in the run
/// (forward, backward, recompute per micro-batch; all-reduce and optimizer per iteration)
/// and the plan's own transfer times.
struct IterationSplit {
  int64_t predicted_ns = 0;
  int64_t resimulated_ns = 0;
  int64_t measured_ns = 0;
  int64_t error_ns() const { return predicted_ns - measured_ns; }
  int64_t compute_error_ns() const { return predicted_ns - resimulated_ns; }
  int64_t schedule_error_ns() const { return resimulated_ns - measured_ns; }
};

/// The run's last measured steps (Measurements::step_times) played through the simulator, each
/// with every rank's own forward, backward, recompute and optimizer times of that step, against
/// the same steps' measured iteration times. It tests the schedule and communication model
/// alone: the re-simulation with one mean time per stage also misses what the variation of
/// action times costs (a slow action delays the ranks waiting on it; a deterministic
/// simulation with means cannot show that), and that belongs to the compute, not the schedule.
struct StepReplay {
  int steps = 0;           ///< steps replayed; 0 when the run has no step_times
  double replayed_ms = 0;  ///< median over those steps of the replayed iteration time
  double measured_ms = 0;  ///< median over the same steps of the measured iteration time
  /// By rank, medians over the steps: the share of the replayed and of the measured iteration
  /// the rank was not busy (busy: forward, backward, recompute, all-reduce, optimizer).
  std::vector<double> replayed_idle_fraction;
  std::vector<double> measured_idle_fraction;
  std::optional<double> error_percent() const {
    return Difference{replayed_ms, measured_ms}.error_percent();
  }
};

/// Everything `pipeplan compare` shows.
struct Comparison {
  std::string plan_path;
  std::string plan_hash;
  std::string run_path;
  std::string run_hash;
  /// The plan was calibrated from this very run: its predictions were fitted to it.
  bool in_sample = false;
  std::string configuration;  ///< "dp=1 pp=2 b=4 m=4 1f1b ..." (plan_configuration)
  int64_t measured_steps = 0;
  std::vector<StageComparison> stages;
  Difference iteration_ms;
  Difference samples_per_s;
  Difference bubble_fraction;  ///< a fraction in [0, 1]; its error is relative, too
  IterationSplit split;
  double resimulated_bubble_fraction = 0;  ///< of the re-simulation with measured stage times
  /// By rank: idle time per iteration in that re-simulation, beside the run's per-rank idle_ms.
  std::vector<double> resimulated_idle_ms;
  StepReplay replay;
  Timeline predicted_timeline;             ///< the plan simulated
  Timeline measured_timeline;              ///< the run's representative step
  /// Inference plans: iteration_ms is the interval between requests (its split re-simulates
  /// that interval with the measured forward times, predict_inference_timing's two plays), and
  /// the predicted latency_ms stands against each measured percentile; no step replay.
  PlanMode mode = PlanMode::kTraining;
  Difference latency_p50_ms = {};
  Difference latency_p90_ms = {};
  Difference latency_p99_ms = {};
  double resimulated_latency_ms = 0;  ///< one request played with the measured forward times
};

/// Refuses (Error(kBadInput), one line naming the field) a run that is not of `plan`: its
/// plan.hash must be plan_hash(plan) — or the plan was calibrated from this run (its
/// calibration's run hash is run_hash(run)) for the same configuration — and its world size,
/// measured stages and the micro-batch count of its step times must match the plan's. A run's
/// kind shows in its latency percentiles (only `pipeplan infer` measures them): a training run
/// of an inference plan, or an inference run of a training plan, is refused saying so.
void check_run_of_plan(const Plan& plan, const std::string& plan_path, const Run& run,
                       const std::string& run_path);

/// The simulator's input for `plan` with every stage's costs replaced by those `run` measured
/// (StageMeasurement: fwd, bwd, recompute; optimizer and all-reduce), and each stage's
/// coefficients of variation by those of the forward and backward times in run.step_times
/// (all of the stage's ranks, steps and micro-batches; 0 without step times); transfers as
/// predicted.
SimulationInput measured_simulation_input(const Plan& plan, const Run& run);

/// Replays `run`'s step_times on `plan` (StepReplay); transfers and all-reduces as in
/// measured_simulation_input. Call check_run_of_plan first.
StepReplay replay_steps(const Plan& plan, const Run& run);

/// The comparison of `plan` (read from `plan_path`) and `run` (from `run_path`); call
/// check_run_of_plan first.
Comparison compare(const Plan& plan, const std::string& plan_path, const Run& run,
                   const std::string& run_path);

/// compare.json: every number of the comparison, with "schema": kCompareSchema; an error
/// without a value (measured 0) is null.
Json to_json(const Comparison& comparison);

/// The table `pipeplan compare` prints: per stage memory (predicted terms, measured peak) and
/// times, per run iteration, samples/s, bubble, and the iteration-error split (ms and %), with
/// the `plan --calibrate` command when the compute part is 10% or more of the iteration and the
/// plan was not calibrated from this run.
std::string to_table(const Comparison& comparison);

/// compare.svg: per stage, predicted (stacked by memory term) beside measured peak memory,
/// and predicted beside measured compute per iteration; below them the predicted and the
/// measured timelines, one above the other on the same time scale.
std::string to_svg(const Comparison& comparison);

}  // namespace pipeplan
