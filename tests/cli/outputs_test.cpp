// End-to-end tests of what every command writes and reads: write errors (a full device, standard
// output) end the command naming the path and errno, devices stay devices, a FIFO nobody reads is
// refused, an output that is an input is refused, counts that start processes or steps are
// bounded, every integer flag is decimal, and inputs no reader takes are bad input.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
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

// Runs `command` with sh in the test's folder; its exit code is what it writes to code.txt.
Outcome run_shell(const fs::path& dir, const std::string& command) {
  std::system(("cd '" + dir.string() + "' && " + command).c_str());
  Outcome result;
  std::istringstream(slurp(dir / "code.txt")) >> result.exit_code;
  result.err = slurp(dir / "err.txt");
  return result;
}

// Issue 46: `-o FIFO` waited for ever for a reader.
TEST_F(CliTest, AFifoNoProcessReadsIsRefusedAsOutputNotWaitedFor) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  const Outcome result = run_shell(
      dir_, "timeout 30 '" + testing::kBinary + "' " + plan_args("--pp 2 -o fifo") +
                " > /dev/null 2> err.txt; echo $? > code.txt");
  expect_one_line_error(result, 2,
                        "cannot write 'fifo': No such device or address (a FIFO that no process "
                        "opened for reading)");
}

// Issue 46: a profile nested 100,000 deep under one key crashed `plan` (SIGSEGV, exit 139), and
// a loop of links as the profile ended with exit 1 and a raw filesystem error.
TEST_F(CliTest, DeepNestingAndLinkLoopsAsInputsAreBadInput) {
  std::string text = slurp(testing::kFixture);
  const std::string key = "\"tool_version\": \"";
  ASSERT_NE(text.find(key), std::string::npos);
  const int depth = 100000;
  text.replace(text.find(key), key.size(),
               "\"tool_version\": " + std::string(depth, '[') + std::string(depth, ']') +
                   ", \"x\": \"");
  std::ofstream(dir_ / "deep.json") << text;
  const std::string rest = " --devices 2 --device-memory 1GiB --global-batch 16 -o o.json";
  const Outcome deep = run("plan --profile deep.json" + rest);
  expect_one_line_error(deep, 2, "deep.json: tool_version[0][0]");
  EXPECT_NE(deep.err.find("nested deeper than 64 levels"), std::string::npos) << deep.err;
  EXPECT_LT(deep.err.size(), 400u);
  fs::create_symlink("loop.json", dir_ / "loop.json");
  expect_bad_input("plan --profile loop.json" + rest,
                   "loop.json: cannot read: Too many levels of symbolic links");
  expect_bad_input("simulate --plan loop.json", "loop.json: cannot read: Too many levels");
  EXPECT_FALSE(fs::exists(dir_ / "o.json"));
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
