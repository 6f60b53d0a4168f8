// The comparison of a plan with a run of it: the refusal of foreign runs, the re-simulation
// with measured stage times, and every predicted number beside its measured one.
#include "planner/compare.h"

#include <algorithm>

#include "common/error.h"
#include "common/stats.h"
#include "planner/layer_table.h"
#include "planner/predict.h"

namespace pipeplan {
namespace {

constexpr double kPercent = 100.0;

// Whether `plan` was calibrated from `run` itself, for the configuration it has.
bool calibrated_from(const Plan& plan, const Run& run) {
  return plan.calibration && plan.calibration->run_hash == run_hash(run) &&
         plan.calibration->configuration == plan_configuration(plan);
}

StageComparison stage_comparison(const Plan& plan, const Run& run, int stage_idx) {
  const StagePlan& stage = plan.stages[stage_idx];
  const StagePrediction& p = plan.predictions.stages[stage_idx];
  const StageMeasurement& m = run.measured.stages[stage_idx];
  StageComparison c;
  c.first = stage.first;
  c.last = stage.last;
  c.checkpoint = stage.checkpoint;
  c.recompute_layers = stage.recompute_layers;
  if (plan.virtual_stages > 1) {
    c.recompute_layers.clear();
    for (int chunk = 0; chunk < plan.virtual_stages; ++chunk) {
      const StagePlan& range = plan.stages[chunk_index(plan.pp, stage_idx, chunk)];
      c.chunks.emplace_back(range.first, range.last);
      c.checkpoint = c.checkpoint || range.checkpoint;
      c.recompute_layers.insert(c.recompute_layers.end(), range.recompute_layers.begin(),
                                range.recompute_layers.end());
    }
    c.last = c.chunks.back().second;
  }
  c.memory = p.memory;
  c.peak_memory_bytes = {static_cast<double>(p.peak_memory_bytes),
                         static_cast<double>(m.peak_memory_bytes)};
  c.fwd_ms = {p.fwd_ms, m.fwd_ms};
  c.bwd_ms = {p.bwd_ms, m.bwd_ms};
  c.bwd_weight_ms = {p.bwd_weight_ms, m.bwd_weight_ms};
  c.recompute_ms = {p.recompute_ms, m.recompute_ms};
  c.compute_ms = {p.compute_ms, m.compute_ms};
  c.optimizer_ms = {p.optimizer_ms, m.optimizer_ms};
  c.allreduce_ms = {plan.data_parallel.overlap ? p.allreduce_exposed_ms : p.allreduce_ms,
                    m.allreduce_ms};
  c.allgather_ms = {p.allgather_ms, m.allgather_ms};
  c.tp_allreduce_ms = {p.tp_allreduce_ms, m.tp_allreduce_ms};
  c.predicted_allreduce_total_ms = p.allreduce_ms;
  c.busy_ms = {p.busy_ms, m.busy_ms};
  c.idle_ms = {p.idle_ms, m.idle_ms};
  c.measured_load_ms = m.load_ms;
  c.measured_recv_wait_ms = m.recv_wait_ms;
  return c;
}

// Inference: the interval re-simulated with the measured forward times (play_requests), its
// bubble and idle time per request as predict_inference_timing counts them, and the predicted
// latency against each measured percentile.
void inference_comparison(const Plan& plan, const Run& run, Comparison* c) {
  const auto [one, interval_ms] = play_requests(measured_simulation_input(plan, run),
                                                SimulationOptions{/*record_timeline=*/false});
  const Measurements& m = run.measured;
  c->split = {to_ns(plan.predictions.iteration_ms), to_ns(interval_ms), to_ns(m.iteration_ms)};
  c->resimulated_latency_ms = one.iteration_ms;
  double idle_total = 0;
  for (double busy_ms : one.busy_ms) {
    c->resimulated_idle_ms.push_back(std::max(0.0, interval_ms - busy_ms));
    idle_total += c->resimulated_idle_ms.back();
  }
  c->resimulated_bubble_fraction =
      interval_ms > 0 ? idle_total / (static_cast<double>(one.busy_ms.size()) * interval_ms) : 0;
  const double latency_ms = plan.predictions.latency_ms;
  c->latency_p50_ms = {latency_ms, m.latency_p50_ms};
  c->latency_p90_ms = {latency_ms, m.latency_p90_ms};
  c->latency_p99_ms = {latency_ms, m.latency_p99_ms};
}

std::string short_title(const std::string& what, const std::string& path) {
  return detail::concat(what, " (", path, ")");
}

}  // namespace

std::optional<double> Difference::error_percent() const {
  if (measured == 0) return predicted == 0 ? std::optional<double>(0.0) : std::nullopt;
  return (predicted - measured) / measured * kPercent;
}

void check_run_of_plan(const Plan& plan, const std::string& plan_path, const Run& run,
                       const std::string& run_path) {
  // The mode first: comparing a training run with an inference plan (or the reverse) is the
  // one mistake the configuration line cannot show.
  const bool inference_run = run.measured.latency_p50_ms > 0;
  const bool inference_plan = plan.mode == PlanMode::kInference;
  PIPEPLAN_CHECK(
      inference_run == inference_plan, run_path, ": ",
      inference_run ? "an inference run (it measured latency_p50_ms)"
                    : "a training run (it measured no latency)",
      ": expected ",
      inference_plan ? "an inference run (pipeplan infer)" : "a training run (pipeplan train)",
      " of ", quote(plan_path), ", which is ", inference_plan ? "an inference" : "a training",
      " plan (compare a run with the plan it ran)");
  // The configuration first: a message naming what differs says more than a hash does.
  const std::string of_plan = detail::concat(" of ", quote(plan_path), " (", plan_configuration(plan),
                                             "): the run ran another configuration");
  const int ranks = static_cast<int>(plan.ranks.size());
  PIPEPLAN_CHECK(run.world_size == ranks, run_path, ": world_size: ", run.world_size,
                 plan.tp() > 1 ? ": expected dp*tp*pp = " : ": expected dp*pp = ", ranks, of_plan);
  PIPEPLAN_CHECK(static_cast<int>(run.measured.stages.size()) == plan.pp, run_path,
                 ": measured.stages: ", run.measured.stages.size(), " entries: expected pp = ",
                 plan.pp, of_plan);
  const auto tp_text = [&plan](int tp_rank) {
    return plan.tp() > 1 ? detail::concat(" tp rank ", tp_rank) : std::string();
  };
  for (const RankMeasurement& rank : run.measured.ranks) {
    const RankAssignment& planned = plan.ranks[rank.rank];
    PIPEPLAN_CHECK(rank.stage == planned.stage && rank.replica == planned.replica &&
                       rank.tp_rank == planned.tp_rank,
                   run_path, ": measured.ranks[", rank.rank, "]: stage ", rank.stage,
                   " of replica ", rank.replica, tp_text(rank.tp_rank), ": expected stage ",
                   planned.stage, " of replica ", planned.replica, tp_text(planned.tp_rank),
                   of_plan);
  }
  const std::vector<StepTimes>& steps = run.measured.step_times;
  for (size_t idx = 0; idx < steps.size(); ++idx)
    for (size_t rank = 0; rank < steps[idx].ranks.size(); ++rank)
      PIPEPLAN_CHECK(
          static_cast<int>(steps[idx].ranks[rank].fwd_ms.size()) ==
              plan.num_micro_batches * plan.virtual_stages,
          run_path, ": measured.step_times[", idx, "].ranks[", rank,
          "].fwd_ms: ", steps[idx].ranks[rank].fwd_ms.size(), " micro-batches: expected ",
          plan.virtual_stages > 1 ? "num_micro_batches*virtual_stages = " : "num_micro_batches = ",
          plan.num_micro_batches * plan.virtual_stages, of_plan);
  const std::string hash = plan_hash(plan);
  PIPEPLAN_CHECK(run.plan_hash == hash || calibrated_from(plan, run), run_path,
                 ": plan.hash: ", quote(run.plan_hash), ": expected the hash of ", quote(plan_path),
                 " (", quote(hash),
                 "): the run came from another plan (compare a run with the plan it ran)");
}

std::pair<double, double> measured_variation(const Plan& plan, const Run& run, int stage_idx) {
  std::vector<double> fwd, bwd;
  for (const StepTimes& step : run.measured.step_times)
    for (const RankAssignment& assignment : plan.ranks) {
      if (assignment.stage != stage_idx) continue;
      const RankStepTimes& times = step.ranks[assignment.rank];
      fwd.insert(fwd.end(), times.fwd_ms.begin(), times.fwd_ms.end());
      bwd.insert(bwd.end(), times.bwd_ms.begin(), times.bwd_ms.end());
    }
  return {coefficient_of_variation(fwd), coefficient_of_variation(bwd)};
}

SimulationInput measured_simulation_input(const Plan& plan, const Run& run) {
  SimulationInput input = simulation_input(plan);
  for (int stage_idx = 0; stage_idx < plan.pp; ++stage_idx) {
    const StageMeasurement& m = run.measured.stages[stage_idx];
    const auto [fwd_cv, bwd_cv] = measured_variation(plan, run, stage_idx);
    // The all-reduce the run waited (with overlap, what no backward hid) is charged whole at
    // the action: no buckets.
    input.stages[stage_idx] = {m.fwd_ms,       m.bwd_ms, m.recompute_ms, m.allreduce_ms,
                               m.optimizer_ms, fwd_cv,   bwd_cv,       m.bwd_weight_ms,
                               m.allgather_ms};
    // interleaved-1f1b: the run measures a stage's chunks together; each chunk keeps its
    // predicted share of the stage's measured time (an even share where none was predicted).
    const StagePrediction& p = plan.predictions.stages[stage_idx];
    auto share = [&](double chunk_ms, double stage_ms, double measured_ms) {
      return stage_ms > 0 ? measured_ms * chunk_ms / stage_ms
                          : measured_ms / plan.virtual_stages;
    };
    for (int chunk = 0; chunk < static_cast<int>(p.chunks.size()); ++chunk) {
      const ChunkPrediction& c = p.chunks[chunk];
      input.chunks[chunk_index(plan.pp, stage_idx, chunk)] = {
          share(c.fwd_ms, p.fwd_ms, m.fwd_ms),
          share(c.bwd_ms, p.bwd_ms, m.bwd_ms),
          share(c.recompute_ms, p.recompute_ms, m.recompute_ms),
          0, 0, fwd_cv, bwd_cv, 0};
    }
  }
  return input;
}

StepReplay replay_steps(const Plan& plan, const Run& run) {
  StepReplay replay;
  const std::vector<StepTimes>& steps = run.measured.step_times;
  if (steps.empty()) return replay;
  SimulationInput input = measured_simulation_input(plan, run);
  std::vector<double> replayed, measured;
  const size_t num_ranks = run.measured.ranks.size();
  std::vector<std::vector<double>> replayed_idle(num_ranks), measured_idle(num_ranks);
  // A tensor-parallel group's ranks wait on each other at every split layer: the simulator plays
  // one rank per group (simulation_input), the group's rank 0 with its measured times.
  const size_t tp = static_cast<size_t>(plan.tp());
  for (size_t idx = 0; idx < steps.size(); ++idx) {
    input.rank_times.clear();
    for (size_t rank = 0; rank < steps[idx].ranks.size(); rank += tp)
      input.rank_times.push_back(steps[idx].ranks[rank]);
    const SimulationResult result = simulate(input, SimulationOptions{/*record_timeline=*/false});
    replayed.push_back(result.iteration_ms);
    measured.push_back(steps[idx].iteration_ms);
    for (size_t rank = 0; rank < num_ranks; ++rank) {
      const RankStepTimes& t = steps[idx].ranks[rank];
      double busy_ms = t.allreduce_ms + t.optimizer_ms;
      for (const std::vector<double>* times :
           {&t.fwd_ms, &t.bwd_ms, &t.recompute_ms, &t.bwd_weight_ms})
        for (double ms : *times) busy_ms += ms;
      const double iteration_ms = steps[idx].iteration_ms;
      replayed_idle[rank].push_back(
          result.iteration_ms > 0 ? result.idle_ms[rank / tp] / result.iteration_ms : 0);
      measured_idle[rank].push_back(iteration_ms > 0 ? std::max(0.0, 1 - busy_ms / iteration_ms)
                                                     : 0);
    }
  }
  replay.steps = static_cast<int>(steps.size());
  replay.replayed_ms = median(std::move(replayed));
  replay.measured_ms = median(std::move(measured));
  for (size_t rank = 0; rank < num_ranks; ++rank) {
    replay.replayed_idle_fraction.push_back(median(std::move(replayed_idle[rank])));
    replay.measured_idle_fraction.push_back(median(std::move(measured_idle[rank])));
  }
  return replay;
}

Comparison compare(const Plan& plan, const std::string& plan_path, const Run& run,
                   const std::string& run_path) {
  Comparison c;
  c.plan_path = plan_path;
  c.plan_hash = plan_hash(plan);
  c.run_path = run_path;
  c.run_hash = run_hash(run);
  c.in_sample = calibrated_from(plan, run);
  c.configuration = plan_configuration(plan);
  c.measured_steps = run.measured.measured_steps;
  for (int stage_idx = 0; stage_idx < plan.pp; ++stage_idx)
    c.stages.push_back(stage_comparison(plan, run, stage_idx));
  const Predictions& p = plan.predictions;
  const Measurements& m = run.measured;
  c.iteration_ms = {p.iteration_ms, m.iteration_ms};
  c.samples_per_s = {p.samples_per_s, m.samples_per_s};
  c.bubble_fraction = {p.bubble_fraction, m.bubble_fraction};
  c.mode = plan.mode;
  if (plan.mode == PlanMode::kInference) {
    inference_comparison(plan, run, &c);
  } else {
    const SimulationResult resimulated = simulate(measured_simulation_input(plan, run),
                                                  SimulationOptions{/*record_timeline=*/false});
    c.split = {to_ns(p.iteration_ms), to_ns(resimulated.iteration_ms), to_ns(m.iteration_ms)};
    c.resimulated_bubble_fraction = resimulated.bubble_fraction;
    c.resimulated_idle_ms = resimulated.idle_ms;
    c.replay = replay_steps(plan, run);
  }
  c.predicted_timeline = simulate(simulation_input(plan)).timeline;
  c.predicted_timeline.title = short_title("predicted", plan_path);
  c.measured_timeline = m.timeline;
  if (c.measured_timeline.rank_stages.empty())  // no step was measured: empty rows
    c.measured_timeline.rank_stages = c.predicted_timeline.rank_stages;
  c.measured_timeline.title =
      short_title(detail::concat("measured step ", m.timeline_step), run_path);
  return c;
}

}  // namespace pipeplan
