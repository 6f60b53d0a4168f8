// Tests for planner/compare.h: a perfect run has no error, the iteration-error split adds up
// exactly, runs of other plans are refused, compare.json has every field and compare.svg is
// well-formed with both timelines.
#include "planner/compare.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "common/stats.h"
#include "planner/layer_table.h"
#include "tests/common/error_of.h"
#include "tests/planner/test_runs.h"
#include "tests/plans/xml_check.h"

namespace pipeplan {
namespace {

class CompareTest : public ::testing::Test {
 protected:
  const Profile profile_ = testing::four_layer_profile();
  const Plan plan_ = testing::plan_for(profile_, /*dp=*/1, /*pp=*/2);
};

// A run slower than predicted in compute and in everything else.
pipeplan::Run imperfect_run(const Plan& plan) {
  pipeplan::Run run = testing::run_as_predicted(plan, plan);
  Measurements& m = run.measured;
  m.stages[0].fwd_ms *= 1.5;
  StageMeasurement& last = m.stages.back();  // stage 1 of two; the only one of a 1-stage plan
  last.bwd_ms *= 1.25;
  last.optimizer_ms += 0.125;
  m.stages[0].peak_memory_bytes += 3 << 20;
  m.iteration_ms *= 1.7;
  m.samples_per_s /= 1.7;
  m.bubble_fraction = 0.4;
  return run;
}

// `plan` as if it had been calibrated from `run` (for its own configuration, with unit scales).
Plan calibrated_from_run(const Plan& plan, const pipeplan::Run& run) {
  Plan calibrated = plan;
  calibrated.calibration = Calibration();
  calibrated.calibration->run_hash = run_hash(run);
  calibrated.calibration->configuration = plan_configuration(plan);
  calibrated.calibration->stages = {{0, 4, 1, 1, 1, 0}};
  return calibrated;
}

// `count` steps in which every rank took exactly its stage's predicted times, each measured at
// `iteration_ms`.
std::vector<StepTimes> steps_as_predicted(const Plan& plan, int count, double iteration_ms) {
  std::vector<RankStepTimes> ranks;
  for (const RankAssignment& a : plan.ranks) {
    const StagePrediction& s = plan.predictions.stages[a.stage];
    const auto each = [&](double ms) { return std::vector<double>(plan.num_micro_batches, ms); };
    ranks.push_back({each(s.fwd_ms), each(s.bwd_ms),
                     s.recompute_ms > 0 ? each(s.recompute_ms) : std::vector<double>{},
                     s.allreduce_ms, s.optimizer_ms});
  }
  std::vector<StepTimes> steps;
  for (int step = 1; step <= count; ++step) steps.push_back({step, iteration_ms, ranks});
  return steps;
}

TEST_F(CompareTest, StepsThatTookThePredictedTimesReplayToThePrediction) {
  pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  run.measured.step_times = steps_as_predicted(plan_, 3, 1.25 * plan_.predictions.iteration_ms);
  const Comparison c = compare(plan_, "plan.json", run, "run.json");
  const StepReplay& replay = c.replay;
  EXPECT_EQ(replay.steps, 3);
  const std::string table = to_table(c);
  EXPECT_NE(table.find("the last 3 measured steps replayed"), std::string::npos) << table;
  EXPECT_NE(table.find("-20.0%; idle by rank, replayed/measured: "), std::string::npos) << table;
  EXPECT_NEAR(replay.replayed_ms, plan_.predictions.iteration_ms, 1e-9);
  EXPECT_NEAR(replay.measured_ms, 1.25 * plan_.predictions.iteration_ms, 1e-9);
  EXPECT_NEAR(*replay.error_percent(), -20.0, 1e-9);
  ASSERT_EQ(replay.replayed_idle_fraction.size(), 2u);
  ASSERT_EQ(replay.measured_idle_fraction.size(), 2u);
  const SimulationResult predicted = simulate(simulation_input(plan_));
  for (int rank = 0; rank < 2; ++rank) {
    const double busy_ms = predicted.busy_ms[rank];
    EXPECT_NEAR(replay.replayed_idle_fraction[rank], 1 - busy_ms / predicted.iteration_ms, 1e-9);
    EXPECT_NEAR(replay.measured_idle_fraction[rank],
                1 - busy_ms / (1.25 * plan_.predictions.iteration_ms), 1e-9);
  }
}

// Each step is replayed with its own times: one slow first forward of stage 0 in the middle
// step (it delays everything after it) moves that step's replay, and so the median only
// when two of three steps have it.
TEST_F(CompareTest, ReplayIsTheMedianOfEachStepsOwnReplay) {
  pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  const double predicted = plan_.predictions.iteration_ms;
  run.measured.step_times = steps_as_predicted(plan_, 3, predicted);
  run.measured.step_times[1].ranks[0].fwd_ms[0] += 2;
  EXPECT_NEAR(replay_steps(plan_, run).replayed_ms, predicted, 1e-9);
  run.measured.step_times[2].ranks[0].fwd_ms[0] += 2;
  EXPECT_NEAR(replay_steps(plan_, run).replayed_ms, predicted + 2, 1e-9);
}

// The re-simulation draws each stage's actions with the spread the run measured for them.
TEST_F(CompareTest, ResimulationTakesTheMeasuredSpreadOfEachStage) {
  pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  EXPECT_EQ(measured_simulation_input(plan_, run).stages[0].fwd_cv, 0.0);  // no step times
  run.measured.step_times = steps_as_predicted(plan_, 2, plan_.predictions.iteration_ms);
  std::vector<double>& fwd = run.measured.step_times[1].ranks[0].fwd_ms;
  fwd[0] *= 2;
  std::vector<double> stage0 = run.measured.step_times[0].ranks[0].fwd_ms;
  stage0.insert(stage0.end(), fwd.begin(), fwd.end());
  const SimulationInput input = measured_simulation_input(plan_, run);
  EXPECT_DOUBLE_EQ(input.stages[0].fwd_cv, coefficient_of_variation(stage0));
  EXPECT_GT(input.stages[0].fwd_cv, 0.0);
  EXPECT_EQ(input.stages[0].bwd_cv, 0.0);
  EXPECT_EQ(input.stages[1].fwd_cv, 0.0);
}

TEST_F(CompareTest, ARunWhoseStepsHaveAnotherMicroBatchCountIsRefused) {
  pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  run.measured.step_times = steps_as_predicted(plan_, 1, 1);
  run.measured.step_times[0].ranks[1].fwd_ms.push_back(1);
  run.measured.step_times[0].ranks[1].bwd_ms.push_back(1);
  try {
    check_run_of_plan(plan_, "plan.json", run, "run.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run.json: measured.step_times[0].ranks[1].fwd_ms"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CompareTest, APerfectRunHasNoError) {
  const pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  check_run_of_plan(plan_, "plan.json", run, "run.json");
  const Comparison c = compare(plan_, "plan.json", run, "run.json");
  ASSERT_EQ(c.stages.size(), 2u);
  for (const StageComparison& stage : c.stages)
    for (const Difference* d :
         {&stage.peak_memory_bytes, &stage.fwd_ms, &stage.bwd_ms, &stage.recompute_ms,
          &stage.compute_ms, &stage.optimizer_ms, &stage.busy_ms, &stage.idle_ms})
      EXPECT_EQ(d->error_percent(), 0.0);
  EXPECT_EQ(c.iteration_ms.error_percent(), 0.0);
  EXPECT_EQ(c.samples_per_s.error_percent(), 0.0);
  EXPECT_EQ(c.bubble_fraction.error_percent(), 0.0);
  EXPECT_EQ(c.split.error_ns(), 0);
  EXPECT_EQ(c.split.compute_error_ns(), 0);
  EXPECT_EQ(c.split.schedule_error_ns(), 0);
  EXPECT_FALSE(c.in_sample);
}

TEST_F(CompareTest, IterationErrorSplitsExactlyIntoComputeAndTheRest) {
  const pipeplan::Run run = imperfect_run(plan_);
  const Comparison c = compare(plan_, "plan.json", run, "run.json");
  const IterationSplit& s = c.split;
  EXPECT_EQ(s.predicted_ns, to_ns(plan_.predictions.iteration_ms));
  EXPECT_EQ(s.measured_ns, to_ns(run.measured.iteration_ms));
  // The re-simulation is the plan simulated as if it had predicted the measured stage times.
  Plan as_measured = plan_;
  for (size_t stage_idx = 0; stage_idx < as_measured.predictions.stages.size(); ++stage_idx) {
    StagePrediction& p = as_measured.predictions.stages[stage_idx];
    const StageMeasurement& m = run.measured.stages[stage_idx];
    p.fwd_ms = m.fwd_ms;
    p.bwd_ms = m.bwd_ms;
    p.recompute_ms = m.recompute_ms;
    p.allreduce_ms = m.allreduce_ms;
    p.optimizer_ms = m.optimizer_ms;
  }
  const SimulationResult resimulated = simulate(simulation_input(as_measured));
  EXPECT_EQ(s.resimulated_ns, to_ns(resimulated.iteration_ms));
  EXPECT_EQ(c.resimulated_idle_ms, resimulated.idle_ms);
  // Slower compute, so a negative compute error, and a slower measurement still, so a
  // negative remainder too.
  EXPECT_GT(resimulated.iteration_ms, plan_.predictions.iteration_ms);
  EXPECT_LT(s.compute_error_ns(), 0);
  EXPECT_LT(s.schedule_error_ns(), 0);
  // Signed errors: (predicted − measured) / measured.
  EXPECT_NEAR(*c.stages[0].fwd_ms.error_percent(), (1 / 1.5 - 1) * 100, 1e-9);
  EXPECT_NEAR(*c.iteration_ms.error_percent(), (1 / 1.7 - 1) * 100, 1e-9);
  EXPECT_NEAR(*c.samples_per_s.error_percent(), (1.7 - 1) * 100, 1e-9);
}

TEST_F(CompareTest, ErrorsOfZeroMeasurementsHaveNoValue) {
  EXPECT_FALSE((Difference{1.0, 0.0}.error_percent().has_value()));
  EXPECT_EQ((Difference{0.0, 0.0}.error_percent()), 0.0);
  EXPECT_EQ((Difference{3.0, 4.0}.error_percent()), -25.0);
}

// The message of the bad-input error `check_run_of_plan(plan, plan_path, run, "run.json")`
// throws (one line), or "" when it accepts the run.
std::string refusal(const Plan& plan, const std::string& plan_path, const pipeplan::Run& run) {
  const std::string message =
      testing::error_of([&] { check_run_of_plan(plan, plan_path, run, "run.json"); });
  EXPECT_EQ(message.find('\n'), std::string::npos);
  return message;
}

// Issue 18: a run of another configuration is refused naming what differs (world size,
// stages, rank map, micro-batches) before the hash.
TEST_F(CompareTest, ARunOfAnotherPlanIsRefusedNamingTheDifference) {
  const pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  const Plan other = testing::plan_for(profile_, /*dp=*/2, /*pp=*/1);
  EXPECT_EQ(refusal(other, "other.json", run).rfind(
                "run.json: measured.stages: 2 entries: expected pp = 1 of 'other.json' (dp=2 pp=1 ",
                0),
            0u)
      << refusal(other, "other.json", run);
  const Plan wider = testing::plan_for(profile_, /*dp=*/2, /*pp=*/2);
  EXPECT_EQ(refusal(wider, "wider.json", run).rfind(
                "run.json: world_size: 2: expected dp*pp = 4 of 'wider.json'", 0),
            0u);
  const pipeplan::Run wider_run = testing::run_as_predicted(wider, wider);
  Plan swapped = wider;
  std::swap(swapped.ranks[0].replica, swapped.ranks[2].replica);
  EXPECT_NE(refusal(swapped, "swapped.json", wider_run)
                .find("run.json: measured.ranks[0]: stage 0 of replica 0: expected stage 0 of "
                      "replica 1 of 'swapped.json'"),
            std::string::npos);
  Plan edited = plan_;
  edited.predictions.iteration_ms += 1;  // any change to the plan changes its hash
  const std::string what = refusal(edited, "plan.json", run);
  EXPECT_EQ(what.rfind("run.json: plan.hash: '" + run.plan_hash + "': expected the hash of", 0),
            0u)
      << what;
  EXPECT_NE(what.find("the run came from another plan"), std::string::npos) << what;
}

TEST_F(CompareTest, APlanCalibratedFromTheRunIsComparedInSample) {
  const pipeplan::Run run = testing::run_as_predicted(plan_, plan_);
  Plan calibrated = calibrated_from_run(plan_, run);
  calibrated.predictions.iteration_ms *= 2;
  EXPECT_NO_THROW(check_run_of_plan(calibrated, "calibrated.json", run, "run.json"));
  EXPECT_TRUE(compare(calibrated, "calibrated.json", run, "run.json").in_sample);
  calibrated.calibration->configuration = "dp=1 pp=2 b=4 m=4 1f1b stages 0:1,1:4";
  EXPECT_THROW(check_run_of_plan(calibrated, "calibrated.json", run, "run.json"), Error);
}

// Issue 18: with one stage the table compared a "bubble" that is the ranks' idle time.
TEST_F(CompareTest, OneStageHasNoBubbleRow) {
  const Plan one_stage = testing::plan_for(profile_, /*dp=*/2, /*pp=*/1);
  const std::string table =
      to_table(compare(one_stage, "plan.json", imperfect_run(one_stage), "run.json"));
  EXPECT_EQ(table.find("bubble"), std::string::npos) << table;
  EXPECT_NE(table.find("samples/s"), std::string::npos) << table;
  const std::string piped = to_table(compare(plan_, "plan.json", imperfect_run(plan_), "run.json"));
  EXPECT_NE(piped.find("bubble"), std::string::npos) << piped;
}

TEST_F(CompareTest, JsonHasEveryField) {
  const Json json = to_json(compare(plan_, "plan.json", imperfect_run(plan_), "run.json"));
  EXPECT_EQ(json.at("schema"), kCompareSchema);
  for (const char* key :
       {"plan", "run", "in_sample", "configuration", "measured_steps", "stages", "iteration_ms",
        "samples_per_s", "bubble_fraction", "iteration_split", "resimulated_idle_ms_by_rank"})
    EXPECT_TRUE(json.contains(key)) << key;
  const Json& stage = json.at("stages").at(0);
  for (const char* key : {"peak_memory_bytes", "fwd_ms", "bwd_ms", "recompute_ms", "compute_ms",
                          "optimizer_ms", "allreduce_ms", "busy_ms", "idle_ms"})
    for (const char* part : {"predicted", "measured", "error_percent"})
      EXPECT_TRUE(stage.at(key).contains(part)) << key << "." << part;
  for (const char* key :
       {"parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "master_copy_bytes",
        "buffers_bytes", "activations_bytes", "recompute_bytes", "transient_bytes",
        "comm_buffers_bytes", "runtime_overhead_bytes", "calibration_bytes", "total_bytes"})
    EXPECT_TRUE(stage.at("memory_terms").contains(key)) << key;
  EXPECT_TRUE(stage.contains("measured_load_ms"));
  const Json& split = json.at("iteration_split");
  for (const char* key :
       {"predicted_ms", "resimulated_ms", "measured_ms", "error_ms", "compute_error_ms",
        "schedule_error_ms", "error_percent", "compute_error_percent", "schedule_error_percent"})
    EXPECT_TRUE(split.contains(key)) << key;
  EXPECT_TRUE(json.at("step_replay").contains("replayed_ms"));
  EXPECT_NEAR(split.at("compute_error_percent").get<double>() +
                  split.at("schedule_error_percent").get<double>(),
              split.at("error_percent").get<double>(), 1e-9);
}

TEST_F(CompareTest, SvgIsWellFormedWithBarsAndBothTimelines) {
  const std::string svg = to_svg(compare(plan_, "plan.json", imperfect_run(plan_), "run.json"));
  EXPECT_EQ(testing::xml_problem(svg), "");
  EXPECT_NE(svg.find(">peak memory per stage"), std::string::npos);
  EXPECT_NE(svg.find(">compute per iteration per stage"), std::string::npos);
  EXPECT_NE(svg.find(">stage 1 measured<"), std::string::npos);
  EXPECT_NE(svg.find(">predicted (plan.json): iteration"), std::string::npos);
  EXPECT_NE(svg.find(">measured step 12 (run.json): iteration"), std::string::npos);
  // One row per rank in each of the two timelines.
  size_t rows = 0;
  for (size_t pos = 0; (pos = svg.find(">rank 1 (stage 1)<", pos)) != std::string::npos; ++pos)
    ++rows;
  EXPECT_EQ(rows, 2u);
}

TEST_F(CompareTest, TableShowsStagesRunAndTheSplit) {
  const std::string table = to_table(compare(plan_, "plan.json", imperfect_run(plan_), "run.json"));
  EXPECT_NE(table.find("forward / micro-batch"), std::string::npos) << table;
  EXPECT_NE(table.find("-33.3%"), std::string::npos) << table;  // stage 0 forward: 1 / 1.5 − 1
  EXPECT_NE(table.find("iteration error"), std::string::npos) << table;
  EXPECT_NE(table.find("= compute model"), std::string::npos) << table;
  EXPECT_EQ(table.find("replayed"), std::string::npos) << table;  // the run has no step times
  EXPECT_NE(table.find("activations"), std::string::npos) << table;
}

// A compute model off by 10% or more of the iteration points at calibration; a run as predicted
// and a plan calibrated from the run do not.
TEST_F(CompareTest, ALargeComputeErrorPointsAtCalibration) {
  const pipeplan::Run run = imperfect_run(plan_);
  const std::string table = to_table(compare(plan_, "plan.json", run, "run.json"));
  EXPECT_NE(table.find("`pipeplan plan --calibrate run.json` with the same profile"),
            std::string::npos)
      << table;
  const pipeplan::Run exact = testing::run_as_predicted(plan_, plan_);
  EXPECT_EQ(to_table(compare(plan_, "plan.json", exact, "run.json")).find("--calibrate"),
            std::string::npos);
  const Plan calibrated = calibrated_from_run(plan_, run);
  EXPECT_EQ(to_table(compare(calibrated, "calibrated.json", run, "run.json")).find("--calibrate"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
