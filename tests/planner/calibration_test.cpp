// Tests for planner/calibration.h: a run generated from hidden factors gives them back, and
// re-planning the run's configuration with the calibration moves every prediction closer to
// what was measured; foreign runs are refused.
#include "planner/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/error.h"
#include "common/limits.h"
#include "planner/compare.h"
#include "planner/layer_table.h"
#include "planner/search.h"
#include "tests/common/error_of.h"
#include "tests/planner/test_profiles.h"
#include "tests/planner/test_runs.h"

namespace pipeplan {
namespace {

constexpr double kHiddenLatencyMs = 0.4;

// `profile` with every layer's forward scaled by fwd[i] and backward by bwd[i].
Profile scaled(Profile profile, const std::vector<double>& fwd, const std::vector<double>& bwd) {
  for (size_t idx = 0; idx < profile.layers.size(); ++idx) {
    for (LayerPoint& point : profile.layers[idx].points) {
      point.fwd_ms *= fwd[idx];
      point.fwd_ms_p90 *= fwd[idx];  // the same spread, relative
      point.bwd_ms *= bwd[idx];
      point.bwd_ms_p90 *= bwd[idx];
    }
    profile.layers[idx].fits.fwd_ms.slope *= fwd[idx];
    profile.layers[idx].fits.bwd_ms.slope *= bwd[idx];
  }
  return profile;
}

// Re-plans `run_plan`'s configuration (pinned flags) with the calibration from `run`.
Plan replan(const Profile& profile, const Plan& run_plan, const pipeplan::Run& run) {
  const CalibrationResult result = calibrate(profile, run_plan, run, "run.json");
  const Profile calibrated = calibrated_profile(profile, result.calibration);
  PlanningContext context = context_for(calibrated, run_plan);
  context.calibration = result.calibration;
  SearchOptions options;
  options.pp = run_plan.pp;
  options.dp = run_plan.dp;
  options.micro_batch_size = run_plan.micro_batch_size;
  options.schedules = {run_plan.schedule};
  if (run_plan.virtual_stages > 1) options.virtual_stages = {run_plan.virtual_stages};
  options.policies = {CheckpointPolicy::kNone};
  options.partition.method = PartitionMethod::kExplicit;
  for (const StagePlan& stage : run_plan.stages)
    options.partition.boundaries.push_back(stage.first);
  options.partition.boundaries.push_back(run_plan.stages.back().last);
  return search(context, options).plans.at(0);
}

double error_of(const Difference& d) { return std::abs(*d.error_percent()); }

// Every prediction of `calibrated` is at least as close to `run` as `original`'s, and strictly
// closer where the original was off.
void expect_every_prediction_closer(const Plan& original, const Plan& calibrated,
                                    const pipeplan::Run& run) {
  ASSERT_EQ(plan_configuration(calibrated), plan_configuration(original));
  const Comparison before = compare(original, "plan.json", run, "run.json");
  const Comparison after = compare(calibrated, "calibrated.json", run, "run.json");
  auto closer = [](const Difference& b, const Difference& a, const std::string& what) {
    if (error_of(b) < 1e-9)
      EXPECT_LT(error_of(a), 1e-6) << what;
    else
      EXPECT_LT(error_of(a), error_of(b)) << what;
  };
  for (size_t stage_idx = 0; stage_idx < before.stages.size(); ++stage_idx) {
    const StageComparison& b = before.stages[stage_idx];
    const StageComparison& a = after.stages[stage_idx];
    const std::string stage = "stage " + std::to_string(stage_idx) + " ";
    closer(b.peak_memory_bytes, a.peak_memory_bytes, stage + "peak memory");
    closer(b.fwd_ms, a.fwd_ms, stage + "forward");
    closer(b.bwd_ms, a.bwd_ms, stage + "backward");
    closer(b.compute_ms, a.compute_ms, stage + "compute");
    closer(b.busy_ms, a.busy_ms, stage + "busy");
    closer(b.idle_ms, a.idle_ms, stage + "idle");
  }
  closer(before.iteration_ms, after.iteration_ms, "iteration");
  closer(before.samples_per_s, after.samples_per_s, "samples/s");
  closer(before.bubble_fraction, after.bubble_fraction, "bubble");
}

class CalibrationTest : public ::testing::Test {
 protected:
  const Profile profile_ = testing::four_layer_profile();
  const Plan plan_ = testing::plan_for(profile_, /*dp=*/1, /*pp=*/2);
};

// The world as it really is: slower forwards early, faster backwards late, a slower link and
// more memory than the models know of.
pipeplan::Run hidden_truth_run(const Profile& profile, const Plan& plan) {
  Profile truth = scaled(profile, {1.5, 1.5, 1.2, 1.2}, {1.0, 1.0, 0.8, 0.8});
  truth.interconnect->p2p.latency_ms = kHiddenLatencyMs;
  const Plan truth_plan = predict_plan(context_for(truth, plan), plan);
  pipeplan::Run run = testing::run_as_predicted(plan, truth_plan);
  run.measured.stages[0].peak_memory_bytes += 2 << 20;
  run.measured.stages[1].peak_memory_bytes -= 256 << 10;
  return run;
}

TEST_F(CalibrationTest, RecoversHiddenFactorsLatencyAndMemory) {
  const pipeplan::Run run = hidden_truth_run(profile_, plan_);
  const CalibrationResult result = calibrate(profile_, plan_, run, "run.json");
  const Calibration& c = result.calibration;
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.run_hash, run_hash(run));
  EXPECT_EQ(c.plan_hash, plan_hash(plan_));
  EXPECT_EQ(c.configuration, plan_configuration(plan_));
  // The hidden per-layer factors, per stage (layers 0-1 and 2-3).
  ASSERT_EQ(plan_.stages[0].last, 2);
  const double hidden_fwd[] = {1.5, 1.2};
  const double hidden_bwd[] = {1.0, 0.8};
  for (int stage_idx = 0; stage_idx < 2; ++stage_idx) {
    EXPECT_NEAR(c.stages[stage_idx].fwd_scale, hidden_fwd[stage_idx], 1e-6) << stage_idx;
    EXPECT_NEAR(c.stages[stage_idx].bwd_scale, hidden_bwd[stage_idx], 1e-6) << stage_idx;
  }
  EXPECT_EQ(c.stages[0].memory_correction_bytes, 2 << 20);
  EXPECT_EQ(c.stages[1].memory_correction_bytes, -(256 << 10));
  EXPECT_EQ(c.profile_latency_ms, 0.05);
  EXPECT_NEAR(c.latency_ms, kHiddenLatencyMs, 1e-5);
  EXPECT_EQ(c.latency_note.rfind("fitted", 0), 0u) << c.latency_note;
  // The run's configuration predicted with the calibration is the measurement.
  const Predictions& after = result.after.predictions;
  EXPECT_NEAR(after.iteration_ms, run.measured.iteration_ms, 1e-4);
  EXPECT_NEAR(after.bubble_fraction, run.measured.bubble_fraction, 1e-5);
  for (int stage_idx = 0; stage_idx < 2; ++stage_idx)
    EXPECT_EQ(after.stages[stage_idx].peak_memory_bytes,
              run.measured.stages[stage_idx].peak_memory_bytes);
  ASSERT_TRUE(result.after.calibration.has_value());
}

TEST_F(CalibrationTest, ReplanningMovesEveryPredictionCloserToAHiddenTruthRun) {
  const pipeplan::Run run = hidden_truth_run(profile_, plan_);
  expect_every_prediction_closer(plan_, replan(profile_, plan_, run), run);
}

// A run the models cannot reproduce exactly: per-stage factors the layers do not share, a
// slow optimizer, and an iteration 20 % above what even the measured stage times explain.
pipeplan::Run noisy_run(const Plan& plan) {
  pipeplan::Run run = testing::run_as_predicted(plan, plan);
  Measurements& m = run.measured;
  const double fwd_scale[] = {1.3, 0.9};
  const double bwd_scale[] = {1.2, 1.4};
  for (int stage_idx = 0; stage_idx < plan.pp; ++stage_idx) {
    StageMeasurement& s = m.stages[stage_idx];
    s.fwd_ms *= fwd_scale[stage_idx];
    s.bwd_ms *= bwd_scale[stage_idx];
    s.optimizer_ms *= 2;
    s.compute_ms = plan.num_micro_batches * (s.fwd_ms + s.bwd_ms) * 1.01;
    s.busy_ms = s.compute_ms + s.optimizer_ms + s.allreduce_ms;
    s.peak_memory_bytes += stage_idx == 0 ? (1 << 20) : -(300 << 10);
  }
  m.iteration_ms = simulate(measured_simulation_input(plan, run)).iteration_ms * 1.2;
  m.samples_per_s = plan.global_batch * 1000.0 / m.iteration_ms;
  double idle_ms = 0;
  for (StageMeasurement& s : m.stages) {
    s.idle_ms = m.iteration_ms - s.busy_ms;
    idle_ms += s.idle_ms;
  }
  m.bubble_fraction = idle_ms / (m.iteration_ms * plan.pp);
  return run;
}

TEST_F(CalibrationTest, ReplanningMovesEveryPredictionCloserToANoisyRun) {
  const pipeplan::Run run = noisy_run(plan_);
  expect_every_prediction_closer(plan_, replan(profile_, plan_, run), run);
}

TEST_F(CalibrationTest, LayersKeepTheirStageFactorsInAnotherPartition) {
  const CalibrationResult result = calibrate(profile_, plan_, noisy_run(plan_), "run.json");
  const Calibration& c = result.calibration;
  const Profile calibrated = calibrated_profile(profile_, c);
  const LayerTable before(profile_, /*micro_batch_size=*/2, OptimizerKind::kSgd);
  const LayerTable after(calibrated, /*micro_batch_size=*/2, OptimizerKind::kSgd);
  for (const StageCalibration& stage : c.stages)
    for (int layer_idx = stage.first; layer_idx < stage.last; ++layer_idx) {
      EXPECT_NEAR(after.layer(layer_idx).fwd_ms, before.layer(layer_idx).fwd_ms * stage.fwd_scale,
                  1e-9);
      EXPECT_NEAR(after.layer(layer_idx).bwd_ms, before.layer(layer_idx).bwd_ms * stage.bwd_scale,
                  1e-9);
      EXPECT_NEAR(to_ms(after.optimizer_ns(layer_idx, layer_idx + 1)),
                  to_ms(before.optimizer_ns(layer_idx, layer_idx + 1)) * stage.optimizer_scale,
                  1e-6);
    }
  EXPECT_EQ(calibrated.interconnect->p2p.latency_ms, c.latency_ms);
  // Four stages of one layer each: each stage is the sum of its scaled layers, and every
  // stage carries the largest memory correction (the stage count differs from the run's).
  Plan shape = testing::plan_for(profile_, /*dp=*/1, /*pp=*/4);
  PlanningContext context = context_for(calibrated, shape);
  context.calibration = c;
  const Plan four = predict_plan(context, shape);
  for (int stage_idx = 0; stage_idx < 4; ++stage_idx) {
    EXPECT_NEAR(four.predictions.stages[stage_idx].fwd_ms, after.layer(stage_idx).fwd_ms, 1e-6);
    EXPECT_EQ(four.predictions.stages[stage_idx].memory.calibration_bytes, 1 << 20);
  }
}

TEST_F(CalibrationTest, RefusesARunOfAnotherModelOrDeviceKind) {
  const pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  Profile other_model = profile_;
  other_model.model.hash = "fnv1a64:00000000000000ff";
  try {
    calibrate(other_model, plan_, run, "run.json");
    FAIL() << "a run of another model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--calibrate: 'run.json' ran model 'hand_built'"),
              std::string::npos)
        << e.what();
  }
  Profile other_device = profile_;
  other_device.device.kind = "cuda";
  try {
    calibrate(other_device, plan_, run, "run.json");
    FAIL() << "a run on another device kind was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ran on device kind 'cpu'"), std::string::npos)
        << e.what();
  }
  pipeplan::Run foreign = run;
  foreign.plan_hash = "fnv1a64:0000000000000bad";
  EXPECT_THROW(calibrate(profile_, plan_, foreign, "run.json"), Error);
}

// The bad-input message of calibrate(profile, run_plan, run, "run.json"), or "" when it accepts.
std::string refusal(const Profile& profile, const Plan& run_plan, const pipeplan::Run& run) {
  return testing::error_of([&] { calibrate(profile, run_plan, run, "run.json"); });
}

// Issue 18: a run of another configuration than its plan, or at another precision than the
// profile, is refused naming the difference.
TEST_F(CalibrationTest, RefusesARunOfAnotherConfigurationOrPrecisionNamingTheDifference) {
  const Plan wider = testing::plan_for(profile_, /*dp=*/2, /*pp=*/2);
  const pipeplan::Run wider_run = testing::run_as_predicted(wider, wider);
  EXPECT_EQ(refusal(profile_, plan_, wider_run)
                .rfind("run.json: world_size: 4: expected dp*pp = 2 of 'plan.json' (dp=1 pp=2 ", 0),
            0u)
      << refusal(profile_, plan_, wider_run);
  Profile bf16 = profile_;
  bf16.settings.precision = "amp-bf16";
  EXPECT_EQ(refusal(bf16, plan_, testing::run_as_predicted(plan_, plan_)),
            "--calibrate: 'run.json' ran at precision fp32 but the profile was measured at "
            "amp-bf16; calibrate with a run at the profiled precision");
  // An interleaved-1f1b run is calibrated chunk by chunk from its step times: without them it
  // is refused, saying why.
  const Plan interleaved = testing::plan_for(profile_, /*dp=*/1, /*pp=*/2, /*global_batch=*/16,
                                             Schedule::kInterleaved1F1B);
  ASSERT_EQ(interleaved.virtual_stages, 2);
  EXPECT_EQ(refusal(profile_, interleaved, testing::run_as_predicted(interleaved, interleaved))
                .rfind("run.json: measured.step_times: no forward and backward of stage 0's "
                       "chunks: an interleaved-1f1b run is calibrated chunk by chunk",
                       0),
            0u)
      << refusal(profile_, interleaved, testing::run_as_predicted(interleaved, interleaved));
}

// Issue 18: a run of an absurd iteration (1e308 ms before the readers bounded it) reached an
// internal assertion of the partitioner through the fitted latency; at the largest iteration a
// run may hold it is refused as bad input.
TEST_F(CalibrationTest, AnAbsurdIterationIsRefusedNotAnAssertion) {
  pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  run.measured.iteration_ms = kMaxIterationMs;
  EXPECT_NE(refusal(profile_, plan_, run)
                .find("run.json: measured.iteration_ms: 6.5536e+12 ms: expected an iteration that a "
                      "latency of at most 5e+07 ms per message explains"),
            std::string::npos)
      << refusal(profile_, plan_, run);
}

TEST_F(CalibrationTest, LatencyIsKeptWithoutTransfersAndZeroWhenTheRunIsFaster) {
  const Plan alone = testing::plan_for(profile_, /*dp=*/1, /*pp=*/1);
  const CalibrationResult kept =
      calibrate(profile_, alone, testing::run_as_predicted(alone, alone), "run.json");
  EXPECT_EQ(kept.calibration.latency_ms, 0.05);
  EXPECT_EQ(kept.calibration.latency_note.rfind("kept", 0), 0u);
  pipeplan::Run fast = testing::run_as_predicted(plan_, plan_);
  fast.measured.iteration_ms *= 0.5;
  const CalibrationResult zero = calibrate(profile_, plan_, fast, "run.json");
  EXPECT_EQ(zero.calibration.latency_ms, 0);
  EXPECT_EQ(zero.calibration.latency_note.rfind("set to 0", 0), 0u);
}

TEST_F(CalibrationTest, AProfileWithoutInterconnectGetsLatencyOnlyTransfers) {
  Profile no_comm = profile_;
  no_comm.interconnect.reset();
  const Plan plan = testing::plan_for(no_comm, /*dp=*/1, /*pp=*/2);
  pipeplan::Run run = testing::run_as_predicted(plan, plan);
  run.measured.iteration_ms *= 1.25;
  run.measured.samples_per_s /= 1.25;
  const CalibrationResult result = calibrate(no_comm, plan, run, "run.json");
  EXPECT_TRUE(result.calibration.latency_only);
  EXPECT_GT(result.calibration.latency_ms, 0);
  EXPECT_NEAR(result.after.predictions.iteration_ms, run.measured.iteration_ms, 1e-4);
  const Profile calibrated = calibrated_profile(no_comm, result.calibration);
  ASSERT_TRUE(calibrated.interconnect.has_value());
  EXPECT_EQ(calibrated.interconnect->p2p.latency_ms, result.calibration.latency_ms);
  EXPECT_EQ(calibrated.interconnect->p2p.bandwidth_bytes_per_s, kLatencyOnlyBandwidthBytesPerS);
}

TEST_F(CalibrationTest, DescribesEveryCorrection) {
  const pipeplan::Run run = hidden_truth_run(profile_, plan_);
  const CalibrationResult result = calibrate(profile_, plan_, run, "run.json");
  const std::vector<std::string> lines = describe(result, run);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[1].find("stage 0, layers [0, "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("forward x"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("memory +2.0 MiB"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("point-to-point latency 0.050 -> 0.400 ms"), std::string::npos)
      << lines[3];
  EXPECT_NE(lines[4].find("the run's configuration: iteration"), std::string::npos) << lines[4];
}

// The run's configuration is predicted as it ran with data parallelism: ZeRO-1, its bucket
// size and its overlap setting (a ZeRO-1 run was predicted without its sharding before).
TEST_F(CalibrationTest, TheRunsDataParallelSettingsArePredictedAsTheyRan) {
  Plan shape = testing::plan_for(profile_, /*dp=*/2, /*pp=*/2);
  shape.data_parallel = {/*overlap=*/false, /*bucket_bytes=*/int64_t{1} << 12, /*zero=*/1};
  const Plan predicted = predict_plan(context_for(profile_, shape), shape);
  EXPECT_EQ(predicted.data_parallel.zero, 1);
  EXPECT_EQ(predicted.data_parallel.bucket_bytes, int64_t{1} << 12);
  EXPECT_FALSE(predicted.data_parallel.overlap);
  EXPECT_EQ(plan_configuration(predicted), plan_configuration(shape));
  EXPECT_GT(predicted.predictions.stages[0].allgather_ms, 0);  // ZeRO-1 gathers the shards
}

// A zb-h1 run measures B and W apart: each is scaled by its own factor, so that the plan
// calibrated from the run predicts both as measured (issue 21).
TEST_F(CalibrationTest, AZeroBubbleRunScalesBAndWApart) {
  const Profile split = testing::with_backward_split(profile_, 0.5, 0.6);
  const Plan zb = testing::plan_for(split, /*dp=*/1, /*pp=*/2, /*global_batch=*/16,
                                    Schedule::kZeroBubbleH1);
  ASSERT_EQ(zb.schedule, Schedule::kZeroBubbleH1);
  pipeplan::Run run = testing::run_as_predicted(zb, zb);
  for (StageMeasurement& s : run.measured.stages) {
    s.bwd_ms *= 1.5;
    s.bwd_weight_ms *= 0.8;
  }
  const CalibrationResult result = calibrate(split, zb, run, "run.json");
  const Profile calibrated = calibrated_profile(split, result.calibration);
  PlanningContext context = context_for(calibrated, zb);
  context.calibration = result.calibration;
  const Plan after = predict_plan(context, zb);
  for (int stage_idx = 0; stage_idx < zb.pp; ++stage_idx) {
    const StageCalibration& stage = result.calibration.stages[stage_idx];
    EXPECT_NEAR(stage.bwd_weight_scale, 0.8, 1e-9);
    const StageMeasurement& m = run.measured.stages[stage_idx];
    EXPECT_NEAR(after.predictions.stages[stage_idx].bwd_ms, m.bwd_ms, 1e-5) << stage_idx;
    EXPECT_NEAR(after.predictions.stages[stage_idx].bwd_weight_ms, m.bwd_weight_ms, 1e-5)
        << stage_idx;
  }
  // Stage 0 starts with layer 0, whose B is 0: its stage's B is the other layers' alone.
  EXPECT_NEAR(result.calibration.stages[1].bwd_input_scale, 1.5, 1e-9);
}

// An interleaved-1f1b run measures a stage's chunks together; its step times say how the
// stage's time divides among them. Each chunk gets its own factors (issue "The models users
// bring"), so that hidden per-layer factors that differ between a stage's chunks come back,
// and the run's configuration predicted with them is the measurement.
TEST_F(CalibrationTest, AnInterleavedRunIsCalibratedChunkByChunk) {
  const Plan plan = testing::plan_for(profile_, /*dp=*/1, /*pp=*/2, /*global_batch=*/16,
                                      Schedule::kInterleaved1F1B);
  ASSERT_EQ(plan.virtual_stages, 2);
  ASSERT_EQ(plan.stages.size(), 4u);  // a layer per chunk; stage 0 holds chunks 0 and 2
  const std::vector<double> hidden_fwd = {1.5, 0.8, 1.2, 1.1};
  const std::vector<double> hidden_bwd = {1.0, 1.3, 0.7, 0.9};
  Profile truth = scaled(profile_, hidden_fwd, hidden_bwd);
  truth.interconnect->p2p.latency_ms = kHiddenLatencyMs;
  const Plan truth_plan = predict_plan(context_for(truth, plan), plan);
  pipeplan::Run run = testing::run_as_predicted(plan, truth_plan);
  run.measured.stages[1].peak_memory_bytes += 3 << 20;
  // Two steps of per-action times as the truth predicts them, the second 10 % slower: only
  // the chunks' shares matter.
  for (double factor : {1.0, 1.1}) {
    StepTimes step{
        static_cast<int64_t>(run.measured.step_times.size()) + 1, run.measured.iteration_ms, {}};
    for (const RankAssignment& rank : plan.ranks) {
      RankStepTimes times;
      for (const ChunkPrediction& chunk : truth_plan.predictions.stages[rank.stage].chunks)
        for (int mb = 0; mb < plan.num_micro_batches; ++mb) {
          times.fwd_ms.push_back(chunk.fwd_ms * factor);
          times.bwd_ms.push_back(chunk.bwd_ms * factor);
        }
      step.ranks.push_back(times);
    }
    run.measured.step_times.push_back(step);
  }
  const CalibrationResult result = calibrate(profile_, plan, run, "run.json");
  const Calibration& c = result.calibration;
  ASSERT_EQ(c.stages.size(), 4u);
  EXPECT_EQ(c.virtual_stages, 2);
  for (size_t chunk = 0; chunk < 4; ++chunk) {
    EXPECT_EQ(c.stages[chunk].first, plan.stages[chunk].first);
    EXPECT_NEAR(c.stages[chunk].fwd_scale, hidden_fwd[chunk], 1e-6) << chunk;
    EXPECT_NEAR(c.stages[chunk].bwd_scale, hidden_bwd[chunk], 1e-6) << chunk;
    EXPECT_EQ(c.stages[chunk].memory_correction_bytes, chunk % 2 == 1 ? 3 << 20 : 0) << chunk;
  }
  EXPECT_EQ(c.memory_corrections(2), (std::vector<int64_t>{0, 3 << 20}));
  EXPECT_EQ(c.memory_corrections(4), (std::vector<int64_t>(4, 3 << 20)));
  const Predictions& after = result.after.predictions;
  EXPECT_NEAR(after.iteration_ms, run.measured.iteration_ms, 1e-4);
  for (int stage_idx = 0; stage_idx < 2; ++stage_idx) {
    EXPECT_NEAR(after.stages[stage_idx].fwd_ms, run.measured.stages[stage_idx].fwd_ms, 1e-6);
    EXPECT_NEAR(after.stages[stage_idx].bwd_ms, run.measured.stages[stage_idx].bwd_ms, 1e-6);
    EXPECT_EQ(after.stages[stage_idx].peak_memory_bytes,
              run.measured.stages[stage_idx].peak_memory_bytes);
  }
  // The plan file keeps the chunks and V.
  const Json json = to_json(c);
  EXPECT_EQ(json.at("virtual_stages"), 2);
  EXPECT_EQ(to_json(calibration_from_json(JsonReader(json, "plan.json"))), json);
  const std::vector<std::string> lines = describe(result, run);
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[3].rfind("  chunk 2 (stage 0), layers [2, 3): forward x1.200", 0), 0u)
      << lines[3];
  expect_every_prediction_closer(plan, replan(profile_, plan, run), run);
}

}  // namespace
}  // namespace pipeplan
