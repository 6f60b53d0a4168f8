// End-to-end tests of `pipeplan compare` and `pipeplan plan --calibrate`: a run made by hand
// from a plan of the fixture profile, foreign and malformed runs refused with one line, and
// (Serial) a real 2-rank CPU run: profile, plan, train, compare, calibrate, re-plan, compare.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>

#include "common/json.h"
#include "plans/plan.h"
#include "plans/run.h"
#include "tests/cli/cli_fixture.h"
#include "tests/planner/test_runs.h"

namespace pipeplan {
namespace {

using testing::CliTest;
using testing::Outcome;
using testing::slurp;

// A run of `plan` a little slower than predicted everywhere, written as `name` in `dir`.
void write_slow_run(const Plan& plan, const std::filesystem::path& path) {
  pipeplan::Run run = testing::run_as_predicted(plan, plan);
  for (StageMeasurement& stage : run.measured.stages) {
    stage.fwd_ms *= 1.25;
    stage.compute_ms *= 1.25;
    stage.peak_memory_bytes += 1 << 20;
  }
  run.measured.iteration_ms *= 1.5;
  run.measured.samples_per_s /= 1.5;
  run.plan_path = "plan.json";
  write_run(path.string(), run);
}

TEST_F(CliTest, CompareWritesTheTableJsonAndSvg) {
  ASSERT_EQ(run(plan_args("--pp 2 -o plan.json")).exit_code, 0);
  const Plan plan = read_plan((dir_ / "plan.json").string());
  write_slow_run(plan, dir_ / "run.json");
  const Outcome result =
      run("compare --plan plan.json --run run.json --json compare.json --svg compare.svg");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("forward / micro-batch"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("-33.3%"), std::string::npos) << result.out;  // iteration: 1/1.5 − 1
  EXPECT_NE(result.out.find("iteration error"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("wrote compare.svg"), std::string::npos) << result.out;
  const Json json = read_json_file((dir_ / "compare.json").string());
  EXPECT_EQ(json.at("schema"), "pipeplan.compare/1");
  EXPECT_EQ(json.at("stages").size(), 2u);
  EXPECT_NEAR(json.at("iteration_ms").at("error_percent").get<double>(), (1 / 1.5 - 1) * 100, 1e-9);
  const std::string svg = slurp(dir_ / "compare.svg");
  EXPECT_NE(svg.find(">predicted (plan.json)"), std::string::npos);
  EXPECT_NE(svg.find(">measured step"), std::string::npos);
}

TEST_F(CliTest, CompareAndCalibrateRefuseForeignAndMalformedRuns) {
  ASSERT_EQ(run(plan_args("--pp 2 -o plan.json")).exit_code, 0);
  ASSERT_EQ(run(plan_args("--pp 1 -o other.json")).exit_code, 0);
  const Plan plan = read_plan((dir_ / "plan.json").string());
  write_slow_run(plan, dir_ / "run.json");
  expect_bad_input("compare --plan other.json --run run.json",
                   "run.json: measured.stages: 2 entries: expected pp = 1 of 'other.json'");
  Json broken = read_json_file((dir_ / "run.json").string());
  broken["measured"].erase("iteration_ms");
  write_json_file((dir_ / "broken.json").string(), broken);
  expect_bad_input("compare --plan plan.json --run broken.json",
                   "broken.json: measured.iteration_ms: missing");
  expect_bad_input("compare --plan plan.json", "--run is required");
  // A run of another model: its plan names another model hash.
  Plan other_model = plan;
  other_model.model.name = "resnet_other";
  other_model.model.hash = "fnv1a64:00000000000000ff";
  write_plan((dir_ / "other_model.json").string(), other_model);
  pipeplan::Run foreign = testing::run_as_predicted(other_model, other_model);
  foreign.plan_path = "other_model.json";
  write_run((dir_ / "foreign.json").string(), foreign);
  expect_bad_input(plan_args("--pp 2 --calibrate foreign.json -o c.json"),
                   "--calibrate: 'foreign.json' ran model 'resnet_other'");
  pipeplan::Run lost = testing::run_as_predicted(plan, plan);
  lost.plan_path = "nowhere/plan.json";
  write_run((dir_ / "lost.json").string(), lost);
  expect_bad_input(plan_args("--pp 2 --calibrate lost.json -o c.json"),
                   "nowhere/plan.json: cannot read: No such file or directory");
}

// Issue 18: a run whose world size or configuration is not its plan's is refused by compare and
// by plan --calibrate, naming the difference (exit 2, nothing written).
TEST_F(CliTest, RunsOfAnotherConfigurationAreRefusedNamingTheDifference) {
  // 1f1b: calibration refuses interleaved-1f1b runs before it compares configurations.
  ASSERT_EQ(run(plan_args("--pp 2 --schedule 1f1b -o plan.json")).exit_code, 0);
  const Plan plan = read_plan((dir_ / "plan.json").string());
  write_slow_run(plan, dir_ / "run.json");
  Json wider = read_json_file((dir_ / "run.json").string());
  wider["world_size"] = 4;
  wider["measured"]["ranks"].push_back(wider["measured"]["ranks"][0]);
  wider["measured"]["ranks"].push_back(wider["measured"]["ranks"][1]);
  for (int rank = 2; rank < 4; ++rank) {
    wider["measured"]["ranks"][rank]["rank"] = rank;
    wider["measured"]["ranks"][rank]["replica"] = 1;
  }
  wider["measured"]["timeline"]["rank_stages"] = {0, 1, 0, 1};
  write_json_file((dir_ / "wider.json").string(), wider);
  expect_bad_input("compare --plan plan.json --run wider.json",
                   "wider.json: world_size: 4: expected dp*pp = 2 of 'plan.json' (dp=1 pp=2 ");
  expect_bad_input(plan_args("--pp 2 --calibrate wider.json -o c.json"),
                   "wider.json: world_size: 4: expected dp*pp = 2 of 'plan.json' (dp=1 pp=2 ");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "c.json"));
  Json cut = read_json_file((dir_ / "run.json").string());
  cut["world_size"] = int64_t{4294967298};  // read as 2 when integers were cut to 32 bits
  write_json_file((dir_ / "cut.json").string(), cut);
  expect_bad_input(plan_args("--pp 2 --calibrate cut.json -o c.json"),
                   "cut.json: world_size: 4294967298: expected an integer in [1, 16384]");
  expect_bad_input("compare --plan plan.json --run cut.json",
                   "cut.json: world_size: 4294967298: expected an integer in [1, 16384]");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "c.json"));
}

// |error| of a compare.json difference, in percent.
double abs_error(const Json& difference) {
  return std::abs(difference.at("error_percent").get<double>());
}

// Every prediction of `after` is closer to the run than `before`'s; a prediction already
// within kClose of the measurement stays within it (its sign can flip with the noise of a
// shared machine).
void expect_closer(const Json& before, const Json& after, const std::string& what) {
  constexpr double kClosePercent = 3;
  const double b = abs_error(before);
  const double a = abs_error(after);
  if (b < kClosePercent)
    EXPECT_LT(a, kClosePercent) << what << ": " << b << "% -> " << a << "%";
  else
    EXPECT_LT(a, b) << what << ": " << b << "% -> " << a << "%";
}

// A real 2-rank CPU run of mlp_tiny under `schedule` ("--schedule 1f1b"): profile, plan,
// train, compare; then plan --calibrate from the run with the same configuration pinned, and
// compare again: every prediction moves closer to what was measured.
class CalibrationCliTest : public CliTest {
 protected:
  void expect_calibration_moves_every_prediction_closer(const std::string& schedule);
};

void CalibrationCliTest::expect_calibration_moves_every_prediction_closer(
    const std::string& schedule) {
  const std::string pinned =
      "--devices 2 --device-memory 1GiB --global-batch 32 --pp 2 --dp 1 --micro-batch-size 4 " +
      schedule + " --checkpoint none ";
  ASSERT_EQ(run("profile --model mlp_tiny --batch-sizes 2,4,8 -o profile.json").exit_code, 0);
  const Outcome planned = run("plan --profile profile.json " + pinned + "-o plan.json");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const Plan plan = read_plan((dir_ / "plan.json").string());
  const Outcome trained = run("launch --nproc 2 -- '" + testing::kBinary +
                              "' train --plan plan.json --data synthetic --steps 40 -o run.json");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const Outcome before = run("compare --plan plan.json --run run.json --json before.json");
  ASSERT_EQ(before.exit_code, 0) << before.err;
  std::string split;
  for (const StagePlan& stage : plan.stages)
    split +=
        (split.empty() ? "" : ",") + std::to_string(stage.first) + ":" + std::to_string(stage.last);
  const Outcome calibrated = run("plan --profile profile.json " + pinned + "--partition " + split +
                                 " --calibrate run.json -o calibrated.json");
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.err;
  EXPECT_NE(calibrated.out.find("point-to-point latency"), std::string::npos) << calibrated.out;
  const Outcome after = run("compare --plan calibrated.json --run run.json --json after.json");
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_NE(after.out.find("in-sample"), std::string::npos) << after.out;
  const Json b = read_json_file((dir_ / "before.json").string());
  const Json a = read_json_file((dir_ / "after.json").string());
  ASSERT_EQ(a.at("configuration"), b.at("configuration"));
  for (size_t stage_idx = 0; stage_idx < 2; ++stage_idx)
    for (const char* key : {"peak_memory_bytes", "fwd_ms", "bwd_ms", "compute_ms"})
      expect_closer(b.at("stages").at(stage_idx).at(key), a.at("stages").at(stage_idx).at(key),
                    "stage " + std::to_string(stage_idx) + " " + key);
  for (const char* key : {"iteration_ms", "samples_per_s", "bubble_fraction"})
    expect_closer(b.at(key), a.at(key), key);
  std::cout << before.out << "\n" << calibrated.out << "\n" << after.out;
}

TEST_F(CalibrationCliTest, SerialRealRunIsComparedAndCalibrationMovesEveryPredictionCloser) {
  expect_calibration_moves_every_prediction_closer("--schedule 1f1b");
}

// An interleaved-1f1b run calibrates chunk by chunk (issue "The models users bring").
TEST_F(CalibrationCliTest, SerialInterleavedRunCalibratesChunkByChunk) {
  expect_calibration_moves_every_prediction_closer(
      "--schedule interleaved-1f1b --virtual-stages 2");
  const Json plan = read_json_file((dir_ / "calibrated.json").string());
  EXPECT_EQ(plan.at("calibration").at("virtual_stages"), 2);
  EXPECT_EQ(plan.at("calibration").at("stages").size(), 4u);
}

}  // namespace
}  // namespace pipeplan
