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

// Issue 46: with a standard output no process reads, `plan` died of SIGPIPE (exit 141).
TEST_F(CliTest, AClosedOrUnreadStandardOutputNeitherKillsTheCommandNorGoesToAFile) {
  const std::string plan = "'" + testing::kBinary + "' " + plan_args("--pp 2 -o plan.json");
  // Closed: the tables go nowhere (not into plan.json, which took descriptor 1 before), the
  // plan is written.
  const Outcome closed = run_shell(dir_, plan + " >&- 2> err.txt; echo $? > code.txt");
  EXPECT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_EQ(read_json_file((dir_ / "plan.json").string()).at("schema"), "pipeplan.plan/1");
  fs::remove(dir_ / "plan.json");
  // A pipe whose reader has left: exit 1 naming standard output, nothing written.
  const Outcome unread = run_shell(
      dir_, "{ " + plan + " 2> err.txt; echo $? > code.txt; } | (exec 0<&-; sleep 2)");
  expect_one_line_error(unread, 1, "cannot write standard output: Broken pipe");
  EXPECT_FALSE(fs::exists(dir_ / "plan.json"));
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

// A command line started at once; outcome() waits for it (most of a run of pipeplan-torch is
// loading LibTorch, so the runs of a test overlap).
class Started {
 public:
  explicit Started(const std::string& command) : pipe_(::popen((command + " 2>&1").c_str(), "r")) {}
  Started(const Started&) = delete;
  Started& operator=(const Started&) = delete;
  ~Started() {
    if (pipe_ != nullptr) ::pclose(pipe_);
  }
  Outcome outcome() {
    Outcome result;
    char buffer[4096];
    size_t read = 0;
    while (pipe_ != nullptr && (read = std::fread(buffer, 1, sizeof buffer, pipe_)) > 0)
      result.err.append(buffer, read);
    const int status = pipe_ == nullptr ? -1 : ::pclose(pipe_);
    pipe_ = nullptr;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }

 private:
  FILE* pipe_;
};

// Runs every command, at most kParallelRuns at a time; their outcomes in order.
std::vector<Outcome> run_all(const std::vector<std::string>& commands) {
  constexpr size_t kParallelRuns = 6;
  std::vector<Outcome> outcomes;
  for (size_t first = 0; first < commands.size(); first += kParallelRuns) {
    std::vector<std::unique_ptr<Started>> runs;
    for (size_t idx = first; idx < std::min(commands.size(), first + kParallelRuns); ++idx)
      runs.push_back(std::make_unique<Started>(commands[idx]));
    for (auto& started : runs) outcomes.push_back(started->outcome());
  }
  return outcomes;
}

// The integer flags (CLI11 type INT or UINT) that `pipeplan SUB --help` lists, by subcommand.
std::map<std::string, std::vector<std::string>> integer_flags(const std::vector<std::string>& subs) {
  std::vector<std::string> commands;
  for (const std::string& sub : subs) commands.push_back("'" + testing::kBinary + "' " + sub + " --help");
  const std::vector<Outcome> helps = run_all(commands);
  std::map<std::string, std::vector<std::string>> flags;
  for (size_t idx = 0; idx < subs.size(); ++idx) {
    std::istringstream lines(helps[idx].err);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream words(line);
      std::string names, type;
      words >> names >> type;
      if (names.rfind("-", 0) != 0 || (type.rfind("INT", 0) != 0 && type.rfind("UINT", 0) != 0))
        continue;
      flags[subs[idx]].push_back(names.substr(names.rfind(',') + 1));  // "-o,--output"
    }
  }
  return flags;
}

// Issue 46: `train --steps 010` trained 8 steps, `plan --devices 010` planned 8 devices and
// `launch --nproc 010` started 8 ranks: CLI11 reads "010" as octal and "0x10" as hex.
TEST_F(CliTest, EveryIntegerFlagIsDecimal) {
  // Every subcommand, link-bench (which profile starts, hidden from --help) included.
  const std::vector<std::string> subs = {"models", "profile",  "plan",    "simulate", "train",
                                         "infer",  "launch",   "compare", "link-bench"};
  const std::map<std::string, std::vector<std::string>> flags = integer_flags(subs);
  std::vector<std::string> commands, cases;
  for (const auto& [sub, names] : flags)
    for (const std::string& flag : names) {
      // "010" for every flag; a hex, an exponent and a plus sign for plan's (which starts fast).
      std::vector<std::string> values = {"010"};
      if (sub == "plan") values.insert(values.end(), {"0x10", "1e3", "+5"});
      for (const std::string& value : values) {
        cases.push_back(sub + " " + flag + " " + value);
        commands.push_back("cd '" + dir_.string() + "' && '" + testing::kBinary + "' " +
                           cases.back());
      }
    }
  size_t count = 0;
  for (const auto& [sub, names] : flags) count += names.size();
  EXPECT_GE(count, 20u) << "integer flags found in --help";
  for (const char* expected : {"--devices", "--global-batch", "--pp", "--top"})
    EXPECT_NE(std::find(flags.at("plan").begin(), flags.at("plan").end(), expected),
              flags.at("plan").end())
        << expected;
  for (const auto& [sub, flag] : std::vector<std::pair<std::string, std::string>>{
           {"train", "--steps"}, {"launch", "--nproc"}, {"profile", "--seed"},
           {"profile", "--threads"}, {"infer", "--requests"}, {"link-bench", "--repeats"}})
    EXPECT_NE(std::find(flags.at(sub).begin(), flags.at(sub).end(), flag), flags.at(sub).end())
        << sub << " " << flag;
  const std::vector<Outcome> outcomes = run_all(commands);
  for (size_t idx = 0; idx < cases.size(); ++idx) {
    const std::string value = cases[idx].substr(cases[idx].rfind(' ') + 1);
    const std::string flag = cases[idx].substr(cases[idx].find(' ') + 1,
                                               cases[idx].rfind(' ') - cases[idx].find(' ') - 1);
    EXPECT_EQ(outcomes[idx].exit_code, 2) << cases[idx] << ": " << outcomes[idx].err;
    EXPECT_NE(outcomes[idx].err.find(flag + ": '" + value + "' is not"), std::string::npos)
        << cases[idx] << ": " << outcomes[idx].err;
  }
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
