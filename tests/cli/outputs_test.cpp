// End-to-end tests of what every command writes: write errors (a full device, standard output)
// end the command naming the path and errno, devices stay devices, an output that is an input is
// refused, and counts that start processes or steps are bounded.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/cli_fixture.h"

namespace pipeplan {
namespace {

using testing::CliTest;
using testing::Outcome;
using testing::slurp;
namespace fs = std::filesystem;

bool is_character_device(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISCHR(info.st_mode);
}

// Exit `exit_code` and one line "pipeplan: error: ..." containing `expected`.
void expect_one_line_error(const Outcome& result, int exit_code, const std::string& expected) {
  EXPECT_EQ(result.exit_code, exit_code) << result.err;
  EXPECT_EQ(result.err.rfind("pipeplan: error: ", 0), 0u) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_NE(result.err.find(expected), std::string::npos) << result.err;
}

TEST_F(CliTest, AFullDeviceAsOutputFailsNamingItAndStaysADevice) {
  expect_one_line_error(run(plan_args("--pp 2 -o /dev/full")), 1,
                        "cannot write '/dev/full': No space left on device");
  EXPECT_TRUE(is_character_device("/dev/full"));
  ASSERT_EQ(run(plan_args("--pp 2 -o plan.json")).exit_code, 0);
  expect_one_line_error(run("simulate --plan plan.json --svg /dev/full"), 1,
                        "cannot write '/dev/full': No space left on device");
  const Outcome to_null = run("simulate --plan plan.json --trace /dev/null --svg /dev/null");
  EXPECT_EQ(to_null.exit_code, 0) << to_null.err;
  EXPECT_TRUE(is_character_device("/dev/null"));
}

TEST_F(CliTest, StandardOutputThatCannotBeWrittenFailsTheCommand) {
  const std::string command =
      "cd '" + dir_.string() + "' && '" + testing::kBinary + "' models > /dev/full 2> err.txt";
  const int status = std::system(command.c_str());
  Outcome result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = slurp(dir_ / "err.txt");
  expect_one_line_error(result, 1, "cannot write standard output: No space left on device");
}

TEST_F(CliTest, LaunchFailsWhenTheRanksOutputCannotBeWritten) {
  const std::string command = "cd '" + dir_.string() + "' && OMP_NUM_THREADS=1 '" +
                              testing::kBinary +
                              "' launch --nproc 1 -- echo hello > /dev/full 2> err.txt";
  const int status = std::system(command.c_str());
  Outcome result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = slurp(dir_ / "err.txt");
  expect_one_line_error(result, 1,
                        "launch: cannot write the ranks' output: No space left on device");
}

TEST_F(CliTest, RefusesAnOutputThatIsAnInput) {
  ASSERT_EQ(run(plan_args("--pp 2 -o plan.json")).exit_code, 0);
  fs::copy_file(testing::kFixture, dir_ / "p.json");
  const std::string before = slurp(dir_ / "p.json");
  expect_bad_input(
      "plan --profile p.json --devices 2 --device-memory 4GiB --global-batch 32 -o ./p.json",
      "-o: './p.json' is the --profile file");
  EXPECT_EQ(slurp(dir_ / "p.json"), before);
  expect_bad_input("simulate --plan plan.json --svg plan.json", "--svg: 'plan.json' is the --plan");
  expect_bad_input("simulate --plan plan.json --trace t.json --svg t.json",
                   "--trace: 't.json' is also the --svg file");
  expect_bad_input("train --plan plan.json --data synthetic -o plan.json",
                   "-o: 'plan.json' is the --plan file");
  expect_bad_input("compare --plan plan.json --run run.json --json plan.json",
                   "--json: 'plan.json' is the --plan file");
  expect_bad_input("profile --model plan.json --no-comm -o plan.json",
                   "-o: 'plan.json' is the --model file");
}

TEST_F(CliTest, BoundsCountsThatStartProcessesOrSteps) {
  expect_bad_input("train --plan p.json --steps 99999999999999999999 -o r.json",
                   "--steps: '99999999999999999999' is not an integer from 1 to 1000000000");
  expect_bad_input("train --plan p.json --epochs 1000000001 -o r.json",
                   "--epochs: '1000000001' is not an integer from 1 to 1000000000");
  expect_bad_input("train --plan p.json --steps 0x10 -o r.json", "--steps: '0x10'");
  expect_bad_input("train --plan p.json --checkpoint-every -1 -o r.json", "--checkpoint-every");
  expect_bad_input("train --plan p.json --timeout-s 1e300 -o r.json", "--timeout-s");
  expect_bad_input("launch --nproc 1000 -- true", "--nproc: '1000' is not a number of local ranks");
  expect_bad_input("profile --model mlp_tiny --no-comm --co-located 1000 -o p.json",
                   "--co-located: 1000 processes are too many here");
}

}  // namespace
}  // namespace pipeplan
