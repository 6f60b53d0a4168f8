// Plans and runs built by hand for the compare and calibration tests.
#include "tests/planner/test_runs.h"

#include "planner/search.h"
#include "planner/simulator.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan::testing {
namespace {

constexpr int64_t kDeviceMemoryBytes = int64_t{1} << 30;
constexpr int64_t kRuntimeOverheadBytes = int64_t{1} << 20;
constexpr double kLatencyMs = 0.05;
constexpr double kBandwidthBytesPerS = 1e9;

// The times a stage with prediction `p` would measure if the model were right.
MeasuredTimes times_as_predicted(const StagePrediction& p) {
  MeasuredTimes t;
  t.fwd_ms = p.fwd_ms;
  t.bwd_ms = p.bwd_ms;
  t.bwd_weight_ms = p.bwd_weight_ms;
  t.recompute_ms = p.recompute_ms;
  t.compute_ms = p.compute_ms;
  t.optimizer_ms = p.optimizer_ms;
  t.allreduce_ms = p.allreduce_ms;
  t.busy_ms = p.busy_ms;
  t.idle_ms = p.idle_ms;
  return t;
}

StageMeasurement stage_as_predicted(const StagePrediction& p) {
  StageMeasurement s;
  static_cast<MeasuredTimes&>(s) = times_as_predicted(p);
  s.peak_memory_bytes = p.peak_memory_bytes;
  return s;
}

RankMeasurement rank_as_predicted(const RankAssignment& a, const StagePrediction& p,
                                  double iteration_ms) {
  RankMeasurement r;
  static_cast<MeasuredTimes&>(r) = times_as_predicted(p);
  r.rank = a.rank;
  r.stage = a.stage;
  r.replica = a.replica;
  r.peak_memory_bytes = p.peak_memory_bytes;
  r.iteration_ms = iteration_ms;
  return r;
}

}  // namespace

Profile four_layer_profile() {
  std::vector<LayerSpec> layers(4);
  //        fwd   bwd  params  buf out   retained in   out  fwd_tr bwd_tr sgd   adamw
  layers[0] = {1.0, 2.0, 20000, 0, 2000, 9000, 0, 8000, 300, 500, 0.20, 0.30};
  layers[1] = {2.0, 3.5, 40000, 64, 1000, 12000, 8000, 4000, 700, 200, 0.40, 0.60};
  layers[2] = {1.5, 2.5, 30000, 0, 1500, 11000, 4000, 6000, 100, 900, 0.30, 0.45};
  layers[3] = {0.5, 1.0, 10000, 16, 10, 6100, 6000, 40, 50, 60, 0.10, 0.15};
  return make_profile(layers, {1, 2, 4}, /*input_floats=*/784, kRuntimeOverheadBytes, kLatencyMs,
                      kBandwidthBytesPerS);
}

Plan plan_for(const Profile& profile, int dp, int pp, int64_t global_batch, Schedule schedule) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.profile_hash = "fnv1a64:00000000000000aa";
  context.cluster = make_cluster(profile, dp * pp, kDeviceMemoryBytes,
                                 /*devices_per_node=*/dp * pp,
                                 /*inter_node_bandwidth_bytes_per_s=*/0);
  context.global_batch = global_batch;
  SearchOptions options;
  options.pp = pp;
  options.dp = dp;
  options.micro_batch_size = 2;
  options.schedules = {schedule};
  options.policies = {CheckpointPolicy::kNone};
  options.top_k = 1;
  return search(context, options).plans.at(0);
}

Run run_as_predicted(const Plan& plan, const Plan& predicted) {
  const Predictions& p = predicted.predictions;
  Run run;
  run.tool_version = "0.1.0";
  run.plan_path = "plan.json";
  run.plan_hash = plan_hash(plan);
  run.world_size = plan.dp * plan.pp;
  run.steps = 20;
  run.steps_per_epoch = 100;
  run.final_loss = 1.5;
  Measurements& m = run.measured;
  m.iteration_ms = p.iteration_ms;
  m.samples_per_s = p.samples_per_s;
  m.bubble_fraction = p.bubble_fraction;
  m.allreduce_ms = p.allreduce_ms;
  m.optimizer_ms = p.optimizer_ms;
  m.warmup_steps = 3;
  m.measured_steps = 17;
  for (const StagePrediction& stage : p.stages) m.stages.push_back(stage_as_predicted(stage));
  for (const RankAssignment& a : plan.ranks)
    m.ranks.push_back(rank_as_predicted(a, p.stages[a.stage], p.iteration_ms));
  m.timeline_step = 12;
  m.timeline = simulate(simulation_input(predicted)).timeline;
  run.validate("test run");
  return run;
}

}  // namespace pipeplan::testing
