// Calibration: fitting the models' systematic terms to a measured run, and applying them.
#include "planner/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "common/error.h"
#include "common/limits.h"
#include "common/units.h"
#include "planner/compare.h"
#include "planner/layer_table.h"
#include "planner/placement.h"

namespace pipeplan {
namespace {

// The latency fit stops when the bracket is this narrow (1 ns: the planner's time quantum).
constexpr double kLatencyToleranceMs = 1e-6;
constexpr int kMaxBisectionSteps = 200;

// measured / predicted, or 1 when either is not positive (nothing to learn from).
double scale_of(double measured, double predicted) {
  return measured > 0 && predicted > 0 ? measured / predicted : 1.0;
}

void check_same_model_and_device(const Profile& profile, const Plan& run_plan,
                                 const std::string& run_path) {
  PIPEPLAN_CHECK(run_plan.model.hash == profile.model.hash, "--calibrate: ", quote(run_path),
                 " ran model ", quote(run_plan.model.name), " (", run_plan.model.hash,
                 ") but the profile is of ", quote(profile.model.name), " (", profile.model.hash,
                 "); calibrate with a run of the profiled model");
  PIPEPLAN_CHECK(run_plan.model.num_layers == profile.model.num_layers, "--calibrate: ",
                 quote(run_path), " ran a model of ", run_plan.model.num_layers,
                 " layers but the profile's has ", profile.model.num_layers,
                 "; calibrate with a run of the profiled model");
  PIPEPLAN_CHECK(run_plan.cluster.device_kind == profile.device.kind,
                 "--calibrate: ", quote(run_path), " ran on device kind ",
                 quote(run_plan.cluster.device_kind), " but the profile was measured on ",
                 quote(profile.device.kind), "; calibrate with a run on the profiled device kind");
  PIPEPLAN_CHECK(to_string(run_plan.precision) == profile.settings.precision, "--calibrate: ",
                 quote(run_path), " ran at precision ", to_string(run_plan.precision),
                 " but the profile was measured at ", profile.settings.precision,
                 "; calibrate with a run at the profiled precision");
}

Layout layout_of(const Plan& shape) {
  for (Layout layout : {Layout::kReplicaMajor, Layout::kStageMajor}) {
    bool same = true;
    for (const RankAssignment& a : shape.ranks)
      same = same && layout_rank(layout, shape.dp, shape.pp, a.stage, a.replica) == a.rank;
    if (same) return layout;
  }
  PIPEPLAN_CHECK(false,
                 "plan: ranks: the rank map is neither replica-major nor stage-major; "
                 "plan it with pipeplan plan");
}

// A stage's or one chunk's times per micro-batch (W: zb-h1 only, else 0).
struct MicroBatchTimes {
  double fwd_ms = 0;
  double bwd_ms = 0;
  double bwd_weight_ms = 0;
};

// The forward and backward scales of `stage` from measured and predicted times per micro-batch.
void set_time_scales(StageCalibration* stage, const MicroBatchTimes& m, const MicroBatchTimes& p) {
  stage->fwd_scale = scale_of(m.fwd_ms, p.fwd_ms);
  if (p.bwd_weight_ms > 0) {  // zb-h1: B (bwd_ms) and W measured apart
    stage->bwd_input_scale = scale_of(m.bwd_ms, p.bwd_ms);
    stage->bwd_weight_scale = scale_of(m.bwd_weight_ms, p.bwd_weight_ms);
    stage->bwd_scale = scale_of(m.bwd_ms + m.bwd_weight_ms, p.bwd_ms + p.bwd_weight_ms);
  } else {
    stage->bwd_scale = scale_of(m.bwd_ms, p.bwd_ms);
    stage->bwd_input_scale = stage->bwd_weight_scale = stage->bwd_scale;
  }
}

// Each local chunk's share of stage `stage_idx`'s measured forward and backward: the chunk's
// actions summed over the run's step times and the stage's replicas, over all the stage's.
// (step_times lists a rank's actions by chunk · m + micro-batch.)
std::vector<std::pair<double, double>> chunk_shares(const Plan& plan, const Run& run,
                                                    const std::string& run_path, int stage_idx) {
  const size_t chunks = static_cast<size_t>(plan.virtual_stages);
  const size_t m = static_cast<size_t>(plan.num_micro_batches);
  std::vector<std::pair<double, double>> sums(chunks, {0.0, 0.0});
  for (const StepTimes& step : run.measured.step_times)
    for (const RankAssignment& assignment : plan.ranks) {
      if (assignment.stage != stage_idx) continue;
      const RankStepTimes& times = step.ranks.at(static_cast<size_t>(assignment.rank));
      for (size_t idx = 0; idx < times.fwd_ms.size() && idx < chunks * m; ++idx)
        sums[idx / m].first += times.fwd_ms[idx];
      for (size_t idx = 0; idx < times.bwd_ms.size() && idx < chunks * m; ++idx)
        sums[idx / m].second += times.bwd_ms[idx];
    }
  double fwd_total = 0, bwd_total = 0;
  for (const auto& [fwd, bwd] : sums) {
    fwd_total += fwd;
    bwd_total += bwd;
  }
  PIPEPLAN_CHECK(fwd_total > 0 && bwd_total > 0, run_path,
                 ": measured.step_times: no forward and backward of stage ", stage_idx,
                 "'s chunks: an interleaved-1f1b run is calibrated chunk by chunk from its step "
                 "times; train it with this version of pipeplan");
  for (auto& [fwd, bwd] : sums) {
    fwd /= fwd_total;
    bwd /= bwd_total;
  }
  return sums;
}

// One StageCalibration per stage; under interleaved-1f1b one per chunk, in chunk order, each
// scaled by its own share of the stage's measured times against its predicted chunk times,
// with its stage's optimizer scale and memory correction.
std::vector<StageCalibration> stage_factors(const Plan& before, const Run& run,
                                            const std::string& run_path) {
  const bool chunked = before.virtual_stages > 1;
  std::vector<StageCalibration> stages(before.stages.size());
  for (int stage_idx = 0; stage_idx < before.pp; ++stage_idx) {
    const StagePrediction& p = before.predictions.stages[stage_idx];
    const StageMeasurement& m = run.measured.stages[stage_idx];
    StageCalibration stage;
    stage.optimizer_scale = scale_of(m.optimizer_ms, p.optimizer_ms);
    stage.memory_correction_bytes = m.peak_memory_bytes - p.peak_memory_bytes;
    const std::vector<std::pair<double, double>> shares =
        chunked ? chunk_shares(before, run, run_path, stage_idx)
                : std::vector<std::pair<double, double>>{{1.0, 1.0}};
    for (int chunk = 0; chunk < before.virtual_stages; ++chunk) {
      const auto [fwd_share, bwd_share] = shares[static_cast<size_t>(chunk)];
      const MicroBatchTimes measured{m.fwd_ms * fwd_share, m.bwd_ms * bwd_share, m.bwd_weight_ms};
      const MicroBatchTimes predicted =
          chunked ? MicroBatchTimes{p.chunks.at(static_cast<size_t>(chunk)).fwd_ms,
                                    p.chunks.at(static_cast<size_t>(chunk)).bwd_ms, 0}
                  : MicroBatchTimes{p.fwd_ms, p.bwd_ms, p.bwd_weight_ms};
      set_time_scales(&stage, measured, predicted);
      const size_t index = static_cast<size_t>(chunk_index(before.pp, stage_idx, chunk));
      stage.first = before.stages[index].first;
      stage.last = before.stages[index].last;
      stages[index] = stage;
    }
  }
  return stages;
}

// Predicts run_plan's configuration with the calibration's times, memory corrections and
// point-to-point latency.
Plan predict_calibrated(const Profile& profile, const Plan& run_plan,
                        const Calibration& calibration) {
  const Profile calibrated = calibrated_profile(profile, calibration);
  PlanningContext context = context_for(calibrated, run_plan);
  context.calibration = calibration;
  return predict_plan(context, run_plan);
}

// The latency at which the prediction meets `measured_ms`, and the note saying how.
void fit_latency(const Profile& profile, const Plan& run_plan, double measured_ms,
                 Calibration* calibration) {
  if (run_plan.pp == 1 && run_plan.dp == 1) {
    calibration->latency_note = "kept: the run's plan has no transfers (pp = 1, dp = 1)";
    return;
  }
  calibration->latency_only =
      !profile.interconnect || profile.interconnect->p2p.bandwidth_bytes_per_s <= 0;
  // The iteration predicted at point-to-point latency `latency_ms`.
  Calibration trial = *calibration;
  const auto iteration_ms = [&](double latency_ms) {
    trial.latency_ms = latency_ms;
    return predict_calibrated(profile, run_plan, trial).predictions.iteration_ms;
  };
  const double at_zero_ms = iteration_ms(0);
  if (at_zero_ms >= measured_ms) {
    calibration->latency_ms = 0;
    calibration->latency_only = false;  // nothing to add: transfers stay as the profile has them
    calibration->latency_note =
        detail::concat("set to 0: even with latency 0 the scaled times predict ", at_zero_ms,
                       " ms, not less than the measured ", measured_ms, " ms");
    return;
  }
  // The simulated iteration grows at least as fast as the latency, so `measured_ms` brackets;
  // a latency is a time a plan file holds per message, so the fit stays within kMaxTimeMs / 2
  // (half: the transfer adds bytes / bandwidth to it).
  double low = 0, high = std::min(measured_ms, kMaxTimeMs / 2);
  PIPEPLAN_CHECK(high == measured_ms || iteration_ms(high) >= measured_ms,
                 calibration->run_path,
                 ": measured.iteration_ms: ", measured_ms,
                 " ms: expected an iteration that a latency of at most ", high,
                 " ms per message explains (", iteration_ms(high),
                 " ms): the run is not of this profile's model and device");
  for (int step = 0; step < kMaxBisectionSteps && high - low > kLatencyToleranceMs; ++step) {
    const double middle = (low + high) / 2;
    (iteration_ms(middle) < measured_ms ? low : high) = middle;
  }
  calibration->latency_ms = high;
  calibration->latency_note = detail::concat(
      "fitted: with the measured stage times, this per-message latency makes the simulated "
      "iteration match the measured ",
      measured_ms, " ms",
      calibration->latency_only ? "; the profile measured no bandwidth, so a transfer costs the "
                                  "latency alone"
                                : "");
}

void scale_layer(LayerProfile* layer, const StageCalibration& stage, const std::string& optimizer) {
  for (LayerPoint& point : layer->points) {
    point.fwd_ms *= stage.fwd_scale;
    point.fwd_ms_p90 *= stage.fwd_scale;
    point.bwd_ms *= stage.bwd_scale;
    point.bwd_ms_p90 *= stage.bwd_scale;
    if (point.bwd_input_ms) *point.bwd_input_ms *= stage.bwd_input_scale;
    if (point.bwd_weight_ms) *point.bwd_weight_ms *= stage.bwd_weight_scale;
  }
  layer->fits = fit_points(layer->points);
  const auto step = layer->optimizer_step_ms.find(optimizer);
  if (step != layer->optimizer_step_ms.end()) step->second *= stage.optimizer_scale;
}

}  // namespace

PlanningContext context_for(const Profile& profile, const Plan& shape) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = shape.profile_path;
  context.profile_hash = shape.profile_hash;
  context.cluster =
      make_cluster(profile, shape.cluster.devices, shape.cluster.device_memory_bytes,
                   shape.cluster.devices_per_node, shape.cluster.inter_node_bandwidth_bytes_per_s);
  context.global_batch = shape.global_batch;
  context.optimizer = shape.optimizer.kind;
  context.precision = shape.precision;
  if (shape.dp > 1) context.data_parallel = shape.data_parallel;  // its buckets and overlap
  return context;
}

Plan predict_plan(const PlanningContext& context, const Plan& shape) {
  const LayerTable table(*context.profile, shape.micro_batch_size, shape.optimizer.kind,
                         /*split_backward=*/shape.schedule == Schedule::kZeroBubbleH1);
  const Candidate candidate{shape.dp,
                            shape.pp,
                            shape.micro_batch_size,
                            shape.num_micro_batches,
                            shape.schedule,
                            CheckpointPolicy::kNone,
                            layout_of(shape),
                            shape.virtual_stages,
                            shape.data_parallel.zero};
  PartitionResult split;
  split.feasible = true;
  split.boundaries.push_back(0);
  for (const StagePlan& stage : shape.stages) {
    split.boundaries.push_back(stage.last);
    split.checkpoint.push_back(stage.checkpoint);
    split.recomputed.push_back(stage.recompute_layers);
  }
  Plan plan = build_plan(context, table, candidate, split, shape.partition);
  plan.optimizer = shape.optimizer;
  predict_timing(&plan, SimulationOptions{/*record_timeline=*/false});
  return plan;
}

Profile calibrated_profile(const Profile& profile, const Calibration& calibration) {
  Profile calibrated = profile;
  for (const StageCalibration& stage : calibration.stages)
    for (int layer_idx = stage.first;
         layer_idx < stage.last && layer_idx < static_cast<int>(calibrated.layers.size());
         ++layer_idx)
      scale_layer(&calibrated.layers[layer_idx], stage, calibration.optimizer);
  if (calibration.latency_only) {
    CommProfile link;
    link.latency_ms = calibration.latency_ms;
    link.bandwidth_bytes_per_s = kLatencyOnlyBandwidthBytesPerS;
    calibrated.interconnect = InterconnectProfile{"calibrated", /*ranks=*/2, link, link};
  } else if (calibrated.interconnect) {
    calibrated.interconnect->p2p.latency_ms = calibration.latency_ms;
  }
  return calibrated;
}

CalibrationResult calibrate(const Profile& profile, const Plan& run_plan, const Run& run,
                            const std::string& run_path) {
  check_same_model_and_device(profile, run_plan, run_path);
  check_run_of_plan(run_plan, run.plan_path, run, run_path);
  const std::string hash = plan_hash(run_plan);
  PIPEPLAN_CHECK(run.plan_hash == hash, run_path, ": plan.hash: ", quote(run.plan_hash),
                 ": expected the hash of its plan ", quote(run.plan_path), " (", quote(hash),
                 "): the plan file changed after the run");
  PIPEPLAN_CHECK(run.measured.measured_steps >= 1 && run.measured.iteration_ms > 0, run_path,
                 ": measured.measured_steps: ", run.measured.measured_steps,
                 ": the run measured no step to calibrate from (train more steps)");
  CalibrationResult result;
  result.before = predict_plan(context_for(profile, run_plan), run_plan);
  Calibration& c = result.calibration;
  c.run_path = run_path;
  c.run_hash = run_hash(run);
  c.plan_hash = hash;
  c.configuration = plan_configuration(run_plan);
  c.optimizer = to_string(run_plan.optimizer.kind);
  c.stages = stage_factors(result.before, run, run_path);
  c.virtual_stages = run_plan.virtual_stages;
  c.profile_latency_ms = profile.interconnect ? profile.interconnect->p2p.latency_ms : 0;
  c.latency_ms = c.profile_latency_ms;
  fit_latency(profile, run_plan, run.measured.iteration_ms, &c);
  result.after = predict_calibrated(profile, run_plan, c);
  return result;
}

namespace {

std::string ms_text(double ms) { return format_fixed(ms, 3); }

std::string factor_text(const char* what, double scale, double before_ms) {
  char text[128];
  std::snprintf(text, sizeof text, "%s x%.3f (%.3f -> %.3f ms)", what, scale, before_ms,
                before_ms * scale);
  return text;
}

// `label`: "stage 1", or "chunk 3 (stage 1)"; `before`: the stage's prediction, with a chunk's
// forward and backward in place of the stage's.
std::string stage_line(const StageCalibration& stage, const StagePrediction& before,
                       const std::string& label) {
  const int64_t after_bytes = before.peak_memory_bytes + stage.memory_correction_bytes;
  return detail::concat(
      "  ", label, ", layers [", stage.first, ", ", stage.last,
      "): ", factor_text("forward", stage.fwd_scale, before.fwd_ms), ", ",
      before.bwd_weight_ms > 0
          ? detail::concat(factor_text("B", stage.bwd_input_scale, before.bwd_ms), ", ",
                           factor_text("W", stage.bwd_weight_scale, before.bwd_weight_ms))
          : factor_text("backward", stage.bwd_scale, before.bwd_ms),
      ", ", factor_text("optimizer", stage.optimizer_scale, before.optimizer_ms), ", memory ",
      stage.memory_correction_bytes >= 0 ? "+" : "", format_size(stage.memory_correction_bytes),
      " (", format_size(before.peak_memory_bytes), " -> ", format_size(after_bytes), ")");
}

}  // namespace

std::vector<std::string> describe(const CalibrationResult& result, const Run& run) {
  const Calibration& c = result.calibration;
  std::vector<std::string> lines;
  lines.push_back(detail::concat("calibration from ", c.run_path, " (", c.configuration, "; ",
                                 run.measured.measured_steps, " measured steps):"));
  const int pp = result.before.pp;
  for (int idx = 0; idx < static_cast<int>(c.stages.size()); ++idx) {
    StagePrediction before = result.before.predictions.stages[static_cast<size_t>(idx % pp)];
    std::string label = detail::concat("stage ", idx % pp);
    if (c.virtual_stages > 1) {
      const ChunkPrediction& chunk = before.chunks.at(static_cast<size_t>(idx / pp));
      before.fwd_ms = chunk.fwd_ms;
      before.bwd_ms = chunk.bwd_ms;
      label = detail::concat("chunk ", idx, " (", label, ")");
    }
    lines.push_back(stage_line(c.stages[static_cast<size_t>(idx)], before, label));
  }
  lines.push_back(detail::concat("  point-to-point latency ", ms_text(c.profile_latency_ms), " -> ",
                                 ms_text(c.latency_ms), " ms (", c.latency_note, ")"));
  const Predictions& before = result.before.predictions;
  const Predictions& after = result.after.predictions;
  char text[256];
  std::snprintf(text, sizeof text,
                "  the run's configuration: iteration %.3f -> %.3f ms (measured %.3f), bubble "
                "%.1f%% -> %.1f%% (measured %.1f%%)",
                before.iteration_ms, after.iteration_ms, run.measured.iteration_ms,
                before.bubble_fraction * 100, after.bubble_fraction * 100,
                run.measured.bubble_fraction * 100);
  lines.push_back(text);
  return lines;
}

}  // namespace pipeplan
