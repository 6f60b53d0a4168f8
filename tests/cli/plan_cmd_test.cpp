// End-to-end tests of `pipeplan plan`'s bounds and warnings (issue 18): every size flag has a
// stated bound that keeps the search under a second, "no feasible plan" is exit 1 and says so
// in --help, and numbers that mislead are warned of.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/json.h"
#include "tests/cli/cli_fixture.h"

namespace pipeplan {
namespace {

using testing::CliTest;
using testing::kFixture;
using testing::Outcome;

// `plan` on the fixture with every flag given by `flags`.
std::string plan_with(const std::string& flags) {
  return "plan --profile '" + kFixture + "' " + flags + " -o p.json";
}

// `plan --global-batch 1099511627776` ran until killed; every size flag now has a bound.
TEST_F(CliTest, SizeFlagsBeyondTheirBoundExitTwoNamingTheBound) {
  const std::string base = "--devices 2 --device-memory 4GiB ";
  const auto start = std::chrono::steady_clock::now();
  expect_bad_input(plan_with(base + "--global-batch 1099511627776"),
                   "--global-batch: 1099511627776: expected an integer in [1, 16777216]");
  expect_bad_input(plan_with(base + "--global-batch 9223372036854775807"),
                   "--global-batch: 9223372036854775807: expected an integer in [1, 16777216]");
  expect_bad_input(plan_with("--devices 100000 --device-memory 4GiB --global-batch 32"),
                   "--devices: 100000: expected an integer in [1, 16384]");
  expect_bad_input(plan_with(base + "--global-batch 32 --devices-per-node 0"),
                   "--devices-per-node: 0: expected an integer in [1, 16384]");
  expect_bad_input(plan_with(base + "--global-batch 32 --pp 1000000"),
                   "--pp: 1000000: expected an integer in [1, 16384]");
  expect_bad_input(plan_with(base + "--global-batch 32 --dp 0"),
                   "--dp: 0: expected an integer in [1, 16384]");
  expect_bad_input(plan_with(base + "--global-batch 32 --micro-batch-size 99999999999"),
                   "--micro-batch-size: 99999999999: expected an integer in [1, 16777216]");
  expect_bad_input(plan_with(base + "--global-batch 32 --top 100000"),
                   "--top: 100000: expected an integer in [1, 100]");
  expect_bad_input(plan_with("--devices 2 --device-memory 2048TiB --global-batch 32"),
                   "--device-memory: 2251799813685248 bytes: expected a size in [1 byte, 1024.0 TiB]");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
}

// At the largest accepted sizes `plan` answers with a plan or exit 1 (its time through the
// command line: bench/planner_scale.sh --sizes 8:16384:16777216:1024).
TEST_F(CliTest, LargestAcceptedSizesAnswer) {
  const Outcome result =
      run(plan_with("--devices 16384 --device-memory 1TiB --global-batch 16777216 --top 100"));
  EXPECT_TRUE(result.exit_code == 0 || result.exit_code == 1) << result.err;
}

// "No feasible plan" is an answer: exit 1, and --help says so.
TEST_F(CliTest, HelpStatesTheExitCodesAndTheBounds) {
  const Outcome help = run("plan --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("1 when no plan fits (an answer, not bad input"), std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("--global-batch and --micro-batch-size at most 16777216"),
            std::string::npos)
      << help.out;
}

// A CPU profile planned for GPU-sized devices: the times are the CPU's.
TEST_F(CliTest, PlanningGpuSizedDevicesFromACpuProfileWarns) {
  const Outcome gpu = run(plan_with("--devices 2 --device-memory 16GiB --global-batch 32"));
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("warning: " + kFixture +
                         ": planning devices of 16.0 GiB from a CPU profile"),
            std::string::npos)
      << gpu.out;
  const Outcome cpu = run(plan_with("--devices 2 --device-memory 4GiB --global-batch 32"));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(cpu.out.find("warning:"), std::string::npos) << cpu.out;
}

// A layer whose forward time falls as the batch grows: `plan` names the layer and the fit.
TEST_F(CliTest, AFitThatFallsAsTheBatchGrowsIsWarnedOf) {
  Json profile = read_json_file(kFixture);
  Json& layer = profile["layers"][1];
  for (Json& point : layer["points"]) {  // 4.5 - 0.25 ms per sample at batch sizes 1 to 8
    const double fwd_ms = 4.5 - 0.25 * point["batch_size"].get<double>();
    point["fwd_ms"] = fwd_ms;
    point["fwd_ms_p90"] = fwd_ms;
  }
  layer["fits"]["fwd_ms"] = Json{{"intercept", 4.5}, {"slope", -0.25}, {"rms_residual", 0.0}};
  write_json_file((dir_ / "falling.json").string(), profile);
  const Outcome result =
      run("plan --profile falling.json --devices 2 --device-memory 4GiB --global-batch 32 -o p.json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("warning: falling.json: layers[1] ('"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("the fwd_ms fit falls as the batch grows"), std::string::npos)
      << result.out;
}

// --schedule interleaved-1f1b with --virtual-stages: a plan of pp·V chunks; the flag alone, a V
// out of range or a micro-batch count no multiple of pp is bad input naming the flag.
TEST_F(CliTest, InterleavedPlansAndItsFlagsRefusals) {
  const std::string base = "--devices 2 --device-memory 4GiB --global-batch 32 ";
  const Outcome planned =
      run(plan_with(base + "--schedule interleaved-1f1b --virtual-stages 2 --pp 2"));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("interleaved-1f1b:2"), std::string::npos) << planned.out;
  const Json plan = read_json_file((dir_ / "p.json").string());
  EXPECT_EQ(plan.at("schedule"), "interleaved-1f1b");
  EXPECT_EQ(plan.at("virtual_stages"), 2);
  EXPECT_EQ(plan.at("stages").size(), 4u);
  expect_bad_input(plan_with(base + "--virtual-stages 2"),
                   "--virtual-stages: 2: only with --schedule interleaved-1f1b (the schedule is "
                   "'auto')");
  expect_bad_input(plan_with(base + "--schedule 1f1b --virtual-stages 2"),
                   "--virtual-stages: 2: only with --schedule interleaved-1f1b");
  expect_bad_input(plan_with(base + "--schedule interleaved-1f1b --virtual-stages 9"),
                   "--virtual-stages: 9: expected an integer in [2, 8]");
  expect_bad_input(plan_with(base + "--schedule interleaved-1f1b --pp 2 --micro-batch-size 32"),
                   "--schedule interleaved-1f1b: pp=2 with 1 micro-batches: expected a multiple of "
                   "pp");
  expect_bad_input(plan_with(base + "--schedule interleaved-1f1b --pp 2 --virtual-stages 8"),
                   "16 chunks for a model of 10 layers");
  expect_bad_input(
      plan_with(base + "--schedule interleaved-1f1b --partition 0:2,2:4,4:10"),
      "--partition: 3 ranges with --schedule interleaved-1f1b: expected --virtual-stages too");
}

}  // namespace
}  // namespace pipeplan
