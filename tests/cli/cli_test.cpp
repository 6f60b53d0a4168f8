// End-to-end tests of `pipeplan plan` and `pipeplan simulate`: they run the built binary on
// tests/data/resnet_tiny_cpu_profile_fixture.json, a profile written by hand (plausible
// numbers for the 10-layer resnet_tiny on a 2-core CPU, not measured), and check exit codes
// 0 / 1 / 2 and the one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "plans/plan.h"
#include "tests/cli/cli_fixture.h"

namespace pipeplan {
namespace {

using testing::CliTest;
using testing::kFixture;
using testing::Outcome;
using testing::slurp;
namespace fs = std::filesystem;

TEST_F(CliTest, PlanThenSimulateTwoDevices) {
  const Outcome planned = run(plan_args("--pp 2 -o plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("iteration_ms"), std::string::npos) << planned.out;
  EXPECT_NE(planned.out.find("wrote plan.json"), std::string::npos);
  const Plan plan = read_plan((dir_ / "plan.json").string());
  EXPECT_EQ(plan.pp, 2);
  EXPECT_EQ(plan.model.name, "resnet_tiny");
  EXPECT_EQ(plan.profile_path, kFixture);
  EXPECT_EQ(plan.profile_hash.rfind("fnv1a64:", 0), 0u);
  EXPECT_GT(plan.predictions.iteration_ms, 0);
  EXPECT_GT(plan.predictions.stages[1].busy_ms, 0);

  const Outcome simulated =
      run("simulate --plan plan.json --trace timeline.json --svg timeline.svg");
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  EXPECT_NE(simulated.out.find("samples/s"), std::string::npos) << simulated.out;
  const std::string svg = slurp(dir_ / "timeline.svg");
  EXPECT_NE(svg.find(">rank 0 (stage 0)<"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1 (stage 1)<"), std::string::npos);
  EXPECT_NE(slurp(dir_ / "timeline.json").find("\"traceEvents\""), std::string::npos);
}

TEST_F(CliTest, DefaultSearchFindsAPlanAndListsAlternatives) {
  const Outcome result = run(plan_args("--top 3 -o plan.json"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("\n3 "), std::string::npos) << result.out;  // three ranked rows
  EXPECT_TRUE(fs::exists(dir_ / "plan.json"));
}

TEST_F(CliTest, NoFeasiblePlanExitsOneWithReasons) {
  const Outcome result = run("plan --profile '" + kFixture +
                             "' --devices 2 --device-memory 40MiB --global-batch 32 -o p.json");
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_NE(result.out.find("infeasible: dp=1 pp=2 b="), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" > 40.0 MiB"), std::string::npos) << result.out;
  EXPECT_NE(result.err.find("no feasible plan"), std::string::npos) << result.err;
  EXPECT_FALSE(fs::exists(dir_ / "p.json"));
}

TEST_F(CliTest, BadInputExitsTwoWithOneLine) {
  std::ofstream(dir_ / "junk.json") << "{ not json";
  expect_bad_input(
      "plan --profile missing.json --devices 2 --device-memory 4GiB "
      "--global-batch 32 -o p.json",
      "cannot read 'missing.json'");
  expect_bad_input(
      "plan --profile junk.json --devices 2 --device-memory 4GiB --global-batch 32 "
      "-o p.json",
      "'junk.json' is not valid JSON");
  expect_bad_input("plan --profile '" + kFixture +
                       "' --devices 0 --device-memory 4GiB --global-batch 32 -o p.json",
                   "--devices: 0 must be at least 1");
  expect_bad_input(
      "plan --profile '" + kFixture + "' --devices 2 --device-memory 0 --global-batch 32 -o p.json",
      "--device-memory: '0' must be positive");
  expect_bad_input("plan --profile '" + kFixture +
                       "' --devices 2 --device-memory -4GiB --global-batch 32 -o p.json",
                   "--device-memory");
  expect_bad_input(plan_args("--dp 2 --micro-batch-size 5 -o p.json"), "--micro-batch-size: 5");
  expect_bad_input(plan_args("--pp 20 -o p.json"), "--pp: 20 does not divide --devices 2");
  expect_bad_input("plan --profile '" + kFixture +
                       "' --devices 16 --device-memory 4GiB --global-batch 32 --pp 16 -o p.json",
                   "--pp: 16 stages for a model of 10 layers");
  expect_bad_input(plan_args("--partition 0:3,4:10 -o p.json"), "--partition: range '4:10'");
  expect_bad_input(plan_args("--schedule zigzag -o p.json"), "--schedule: 'zigzag'");
  expect_bad_input(plan_args("-o /nonexistent-folder/p.json"), "-o: cannot write");
  expect_bad_input("simulate --plan missing.json", "cannot read 'missing.json'");
  expect_bad_input("simulate", "--plan is required");
}

}  // namespace
}  // namespace pipeplan
