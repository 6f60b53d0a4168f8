// End-to-end tests of `pipeplan plan` and `pipeplan simulate`: they run the built binary on
// tests/data/resnet_tiny_cpu_profile_fixture.json, a profile written by hand (plausible
// numbers for the 10-layer resnet_tiny on a 2-core CPU, not measured), and check exit codes
// 0 / 1 / 2 and the one-line errors.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/json.h"
#include "plans/plan.h"
#include "plans/profile.h"
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
      "missing.json: cannot read: No such file or directory");
  expect_bad_input(
      "plan --profile junk.json --devices 2 --device-memory 4GiB --global-batch 32 "
      "-o p.json",
      "junk.json: not valid JSON (error at byte 4)");
  expect_bad_input("plan --profile '" + kFixture +
                       "' --devices 0 --device-memory 4GiB --global-batch 32 -o p.json",
                   "--devices: 0: expected an integer in [1, 16384]");
  expect_bad_input(
      "plan --profile '" + kFixture + "' --devices 2 --device-memory 0 --global-batch 32 -o p.json",
      "--device-memory: '0': expected a positive size");
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
  expect_bad_input("simulate --plan missing.json", "missing.json: cannot read");
  expect_bad_input("simulate", "--plan is required");
}

// Issue 18: a plan file that parses but means nothing made `simulate` print numbers; now it
// is refused as "<file>: <field>: <value>: <what is expected>", exit 2.
TEST_F(CliTest, SimulateRefusesPlansThatMeanNothing) {
  // 1f1b: the spoiled stage times below are not an interleaved stage's chunks' sums.
  ASSERT_EQ(run(plan_args("--pp 2 --schedule 1f1b -o plan.json")).exit_code, 0);
  const Json plan = read_json_file((dir_ / "plan.json").string());
  const auto spoiled = [&](const std::string& name, const std::function<void(Json&)>& spoil) {
    Json bad = plan;
    spoil(bad);
    write_json_file((dir_ / name).string(), bad);
    return "simulate --plan " + name;
  };
  expect_bad_input(spoiled("dp.json", [](Json& j) { j["dp"] = 2; }),
                   "dp.json: cluster.devices: 2: expected dp*pp = 4");
  expect_bad_input(spoiled("cut.json", [](Json& j) { j["dp"] = int64_t{4294967297}; }),
                   "cut.json: dp: 4294967297: expected an integer in [1, 16384]");
  expect_bad_input(spoiled("past.json", [](Json& j) { j["stages"][1]["last"] = 12; }),
                   "past.json: stages[1].last: 12: expected a layer in [");
  expect_bad_input(spoiled("empty.json", [](Json& j) { j["stages"][0]["last"] = 0; }),
                   "empty.json: stages[0].last: 0: expected an integer in [1, 65536]");
  expect_bad_input(spoiled("shape.json",
                           [](Json& j) { j["stages"][0]["output_sample_shape"] = Json::array(); }),
                   "shape.json: stages[0].output_sample_shape: []: expected the dimensions");
  expect_bad_input(spoiled("config.json", [](Json& j) { j["model"]["config"]["num_classes"] = -10; }),
                   "config.json: model.config.num_classes: -10: expected a finite number >= 0");
  expect_bad_input(spoiled("many.json", [](Json& j) { j["num_micro_batches"] = 10000000; }),
                   "many.json: num_micro_batches: 10000000: expected an integer in [1, 16384]");
  expect_bad_input(spoiled("long.json", [](Json& j) { j["schedule"] = std::string(1 << 20, 'z'); }),
                   "long.json: schedule: 'zzzz");
  const Outcome long_line = run("simulate --plan long.json");
  EXPECT_LT(long_line.err.size(), 300u) << long_line.err.size();
  Json zero = plan;
  for (Json& stage : zero["predictions"]["stages"]) {
    stage["fwd_ms"] = stage["bwd_ms"] = stage["recompute_ms"] = stage["compute_ms"] = 0.0;
  }
  write_json_file((dir_ / "zero.json").string(), zero);
  expect_bad_input("simulate --plan zero.json",
                   "zero.json: predictions.stages: every stage predicts 0 ms of compute");
}

// Issue 18: a FIFO given as an input file blocked forever.
TEST_F(CliTest, InputFilesMustBeRegularFiles) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo.json").c_str(), 0600), 0);
  expect_bad_input("simulate --plan fifo.json",
                   "fifo.json: not a regular file (a FIFO); expected a file");
  expect_bad_input(
      "plan --profile fifo.json --devices 2 --device-memory 4GiB --global-batch 32 -o p.json",
      "fifo.json: not a regular file");
}

// Issue 18: with one stage the list showed gpipe and 1f1b as two plans and called idle time a
// bubble.
TEST_F(CliTest, OneStagePlansAreListedOnceWithoutABubble) {
  const Outcome result = run(plan_args("--pp 1 --top 10 -o plan.json"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.find(" gpipe "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" 1f1b "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("      - "), std::string::npos) << result.out;  // the bubble column
  EXPECT_EQ(read_plan((dir_ / "plan.json").string()).predictions.bubble_fraction, 0);
  const Outcome simulated = run("simulate --plan plan.json");
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  EXPECT_NE(simulated.out.find(", bubble - (plan predicted"), std::string::npos) << simulated.out;
}

// Issue 18: `simulate --trace t.json --svg /dev/full` wrote t.json, then failed on the SVG and
// left it behind; an existing trace was replaced.
TEST_F(CliTest, AFailedOutputLeavesTheOthersAsTheyWere) {
  ASSERT_EQ(run(plan_args("--pp 2 -o plan.json")).exit_code, 0);
  const Outcome failed = run("simulate --plan plan.json --trace new.json --svg /dev/full");
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  EXPECT_NE(failed.err.find("cannot write '/dev/full': No space left on device"),
            std::string::npos)
      << failed.err;
  EXPECT_FALSE(fs::exists(dir_ / "new.json"));
  std::ofstream(dir_ / "old.json") << "old\n";
  EXPECT_EQ(run("simulate --plan plan.json --trace old.json --svg /dev/full").exit_code, 1);
  EXPECT_EQ(slurp(dir_ / "old.json"), "old\n");
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

// What `profile` does for each tensor-parallel size above 2 that the machine has the cores or
// GPUs for: link-bench over that many ranks times their all-reduce alone, and rank 0 writes a
// "group_allreduce" element of the profile's interconnect.
TEST_F(CliTest, LinkBenchOverFourRanksTimesTheirAllReduce) {
  const Outcome timed =
      run("launch --nproc 4 -- '" + testing::kBinary + "' link-bench --repeats 1 -o group.json");
  ASSERT_EQ(timed.exit_code, 0) << timed.err;
  const GroupAllReduce group =
      group_allreduce_from_json(read_json_file((dir_ / "group.json").string()), "group.json");
  EXPECT_EQ(group.ranks, 4);
  EXPECT_EQ(group.allreduce.points.size(), 8u);  // 4 KiB to 64 MiB in factors of 4
  EXPECT_GT(group.allreduce.bandwidth_bytes_per_s, 0);
  for (const CommProfile::Point& point : group.allreduce.points) EXPECT_GT(point.time_ms, 0);
}

}  // namespace
}  // namespace pipeplan
