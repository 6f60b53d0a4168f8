// Tests for executor/launcher.h: `pipeplan launch` run as a program with small shell commands.
#include "executor/launcher.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "plans/plan.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::executor {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

// A test that hangs is a failed test: the launcher must end well within this.
constexpr double kRunTimeoutS = 60;
// A failed rank's peers must be gone this soon: under the 5 s grace period, so SIGTERM did it.
constexpr double kStopLatencyLimitS = 3.0;

const std::string kPipeplan = std::string(PIPEPLAN_BINARY_DIR) + "/cli/pipeplan";

// A fresh folder for one test's files.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/launcher_test.XXXXXX";
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// True while `pid` runs; a zombie (dead, not reaped by PID 1 in a container) counts as gone.
bool is_running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t after_comm = stat.rfind(')');
  return after_comm != std::string::npos && after_comm + 2 < stat.size() &&
         stat[after_comm + 2] != 'Z' && stat[after_comm + 2] != 'X';
}

// Waits until `path` exists and is not empty; false after `timeout_s`.
bool wait_for_file(const std::string& path, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (!read_text(path).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

struct CommandRun {
  int exit_code = -1;
  std::string out;
  std::string err;
  double seconds = 0;        ///< from start to exit, including pipeplan's own start-up
  double ended_epoch_s = 0;  ///< when it exited, seconds since the epoch (as `date +%s.%N`)
};

double epoch_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// How long the launch took to end after a rank wrote `date +%s.%N` to `name` and failed:
// independent of how long pipeplan itself takes to start on a loaded machine.
double stop_latency_s(const CommandRun& run, const TempDir& dir, const std::string& name) {
  return run.ended_epoch_s - std::atof(read_text(dir.file(name)).c_str());
}

// Starts `pipeplan ARGS...` with stdout and stderr going to files in `dir`; `env` entries
// "KEY=VALUE" are set, "KEY" alone is unset.
pid_t start_pipeplan(const std::vector<std::string>& args, const std::vector<std::string>& env,
                     const TempDir& dir) {
  std::vector<std::string> argv_storage{kPipeplan};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string out_path = dir.file("launcher.out");
  const std::string err_path = dir.file("launcher.err");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDOUT_FILENO);
    ::dup2(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDERR_FILENO);
    for (const std::string& entry : env) {
      const size_t equals = entry.find('=');
      if (equals == std::string::npos)
        ::unsetenv(entry.c_str());
      else
        ::setenv(entry.substr(0, equals).c_str(), entry.substr(equals + 1).c_str(), 1);
    }
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  return pid;
}

// Waits for the process started by start_pipeplan and collects its outputs.
CommandRun finish_pipeplan(pid_t pid, const TempDir& dir, Clock::time_point started) {
  CommandRun run;
  int status = 0;
  const auto deadline = started + std::chrono::duration<double>(kRunTimeoutS);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "pipeplan launch did not end within " << kRunTimeoutS << " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  run.ended_epoch_s = epoch_s();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_text(dir.file("launcher.out"));
  run.err = read_text(dir.file("launcher.err"));
  return run;
}

CommandRun run_pipeplan(const std::vector<std::string>& args, const TempDir& dir,
                        const std::vector<std::string>& env = {"OMP_NUM_THREADS=1"}) {
  const auto started = Clock::now();
  return finish_pipeplan(start_pipeplan(args, env, dir), dir, started);
}

// `pipeplan launch --nproc N -- sh -c SCRIPT`.
CommandRun launch_sh(int nproc, const std::string& script, const TempDir& dir,
                     const std::vector<std::string>& env = {"OMP_NUM_THREADS=1"}) {
  return run_pipeplan({"launch", "--nproc", std::to_string(nproc), "--", "sh", "-c", script}, dir,
                      env);
}

std::vector<pid_t> read_pids(const TempDir& dir, const std::vector<std::string>& names) {
  std::vector<pid_t> pids;
  for (const std::string& name : names)
    pids.push_back(std::atoi(read_text(dir.file(name)).c_str()));
  return pids;
}

TEST(LauncherTest, SerialSetsRendezvousVariablesPerRank) {
  TempDir dir;
  const CommandRun run =
      run_pipeplan({"launch", "--nproc", "3", "--master-addr", "10.1.2.3", "--master-port", "29511",
                    "--", "sh", "-c",
                    "echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE "
                    "A=$MASTER_ADDR P=$MASTER_PORT"},
                   dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_THAT(run.out,
                HasSubstr("[rank " + std::to_string(rank) + "] R=" + std::to_string(rank) +
                          " L=" + std::to_string(rank) + " W=3 LW=3 A=10.1.2.3 P=29511\n"));
  EXPECT_EQ(lines_of(run.out).size(), 3u);
}

TEST(LauncherTest, SerialPicksOneFreePortForAllRanksByDefault) {
  TempDir dir;
  const CommandRun run = launch_sh(2, "echo $MASTER_ADDR:$MASTER_PORT", dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::vector<std::string> lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 2u);
  const std::string address = lines[0].substr(lines[0].find(']') + 2);
  EXPECT_EQ(address, lines[1].substr(lines[1].find(']') + 2));
  EXPECT_THAT(address, StartsWith("127.0.0.1:"));
  const int port = std::atoi(address.substr(address.find(':') + 1).c_str());
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

TEST(LauncherTest, SerialPrefixesEveryLineOfStdoutAndStderr) {
  TempDir dir;
  const CommandRun run =
      launch_sh(2, "printf 'a\\nb\\n'; printf 'e1\\ne2\\n' >&2; printf 'tail'", dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const std::string rank : {"0", "1"}) {
    for (const std::string line : {"a", "b", "tail"})
      EXPECT_THAT(run.out, HasSubstr("[rank " + rank + "] " + line + "\n"));
    for (const std::string line : {"e1", "e2"})
      EXPECT_THAT(run.err, HasSubstr("[rank " + rank + "] " + line + "\n"));
  }
  EXPECT_EQ(lines_of(run.out).size(), 6u);
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr("e1")));
}

TEST(LauncherTest, SerialRelaysLongOutputWholeAndUninterleaved) {
  TempDir dir;
  const CommandRun run = launch_sh(3, "seq 1 20000", dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<int> next(3, 1);
  for (const std::string& line : lines_of(run.out)) {
    ASSERT_THAT(line, StartsWith("[rank ")) << line;
    const int rank = line[6] - '0';
    ASSERT_GE(rank, 0);
    ASSERT_LT(rank, 3);
    ASSERT_EQ(line.substr(9), std::to_string(next[static_cast<size_t>(rank)]++)) << line;
  }
  EXPECT_EQ(next, (std::vector<int>{20001, 20001, 20001}));
}

TEST(LauncherTest, SerialFailingRankStopsTheOthersAndIsNamed) {
  TempDir dir;
  // Rank 0 sleeps in a child of its shell; rank 1 fails once rank 0's pids are on disk.
  const std::string script =
      "if [ $RANK = 0 ]; then echo $$ > " + dir.file("shell.0") + "; sleep 60 & echo $! > " +
      dir.file("sleep.0") + "; wait; exit 0; fi; while [ ! -s " + dir.file("sleep.0") +
      " ]; do sleep 0.02; done; echo $$ > " + dir.file("shell.1") +
      "; echo 'first line' >&2; echo 'bad thing happened' >&2; date +%s.%N > " +
      dir.file("failed") + "; exit 3";
  const CommandRun run = launch_sh(2, script, dir);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_LT(stop_latency_s(run, dir, "failed"), kStopLatencyLimitS);
  EXPECT_EQ(lines_of(run.err).back(),
            "pipeplan: error: rank 1 failed (exit 3): bad thing happened");
  for (pid_t pid : read_pids(dir, {"shell.0", "sleep.0", "shell.1"})) {
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(is_running(pid)) << "pid " << pid << " outlived the launch";
  }
}

TEST(LauncherTest, SerialRankExitingTwoMakesTheLaunchExitTwo) {
  TempDir dir;
  const CommandRun run = launch_sh(
      2, "if [ $RANK = 1 ]; then echo 'pipeplan: error: plan.json: dp: 3 is not 2' >&2; exit 2; fi",
      dir);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(lines_of(run.err).back(),
            "pipeplan: error: rank 1 failed (exit 2): pipeplan: error: plan.json: dp: 3 is not 2");
}

TEST(LauncherTest, SerialRankKilledBySignalIsReportedWithTheSignal) {
  TempDir dir;
  const CommandRun run = launch_sh(
      2,
      "if [ $RANK = 1 ]; then date +%s.%N > " + dir.file("failed") + "; kill -9 $$; fi; sleep 60",
      dir);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_LT(stop_latency_s(run, dir, "failed"), kStopLatencyLimitS);
  EXPECT_THAT(lines_of(run.err).back(),
              StartsWith("pipeplan: error: rank 1 failed (killed by signal 9"));
}

// A training rank killed mid-run: the launch names it, stops the other rank (blocked waiting
// for the dead one's activations or gradients) and leaves no process behind.
TEST(LauncherTest, SerialTrainingRankKilledMidRunIsNamedAndNothingIsLeft) {
  TempDir dir;
  const std::string plan_path = dir.file("plan.json");
  write_plan(plan_path, testing::make_test_plan(testing::split_spec(/*dp=*/1, /*pp=*/2)));
  // Each rank records its pid, then becomes `pipeplan train` (same pid); a background shell
  // kills rank 1 with SIGKILL once it has started training (its first step line).
  const std::string script =
      "echo $$ > " + dir.file("pid") + "$RANK; "
      "if [ $RANK = 1 ]; then (while [ ! -s " + dir.file("steps.jsonl") + " ]; do sleep 0.05; "
      "done; date +%s.%N > " + dir.file("failed") + "; kill -9 $$) & fi; "
      "exec " + kPipeplan + " train --plan " + plan_path + " --data synthetic --steps 100000 "
      "--log " + dir.file("steps.jsonl") + " -o " + dir.file("run.json");
  const CommandRun run = launch_sh(2, script, dir);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_LT(stop_latency_s(run, dir, "failed"), kStopLatencyLimitS);
  EXPECT_THAT(lines_of(run.err).back(),
              StartsWith("pipeplan: error: rank 1 failed (killed by signal 9"));
  for (const pid_t pid : read_pids(dir, {"pid0", "pid1"}))
    EXPECT_EQ(::kill(pid, 0), -1) << "rank process " << pid << " is still alive";
  EXPECT_FALSE(std::filesystem::exists(dir.file("run.json")));
}

// A full disk while a rank saves a checkpoint (simulated with a file-size limit: writes past it
// fail with EFBIG): one line naming the file and errno, and no temporary file left behind.
TEST(LauncherTest, SerialAFullDiskWhileCheckpointingIsReportedInOneLine) {
  TempDir dir;
  const std::string plan_path = dir.file("plan.json");
  write_plan(plan_path, testing::make_test_plan(testing::TestPlanSpec()));
  const std::string checkpoints = dir.file("checkpoints");
  const CommandRun run = run_pipeplan(
      {"launch", "--nproc", "1", "--", "prlimit", "--fsize=4096", kPipeplan, "train", "--plan",
       plan_path, "--data", "synthetic", "--steps", "2", "--checkpoint-dir", checkpoints,
       "--checkpoint-every", "1", "-o", dir.file("run.json")},
      dir);
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(lines_of(run.err).back(),
            "pipeplan: error: rank 0 failed (exit 1): pipeplan: error: cannot write '" +
                checkpoints + "/step-00000001/stage-0.pt': File too large")
      << run.err;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(checkpoints))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

TEST(LauncherTest, BoundsTheNumberOfRanksByTheCores) {
  TempDir dir;
  const int limit = max_local_processes();
  EXPECT_LE(limit, kMaxLocalProcesses);
  EXPECT_LE(limit, kLocalProcessesPerCore * usable_cores());
  const CommandRun run =
      run_pipeplan({"launch", "--nproc", std::to_string(limit + 1), "--", "true"}, dir);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "pipeplan: error: --nproc: '" + std::to_string(limit + 1) +
                         "' is not a number of local ranks; give " + local_processes_limit() +
                         "\n");
}

TEST(LauncherTest, SerialGivesEveryRankOfALaunchTheSameNewLaunchId) {
  TempDir dir;
  const CommandRun first = launch_sh(2, "echo id=$PIPEPLAN_LAUNCH_ID", dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::vector<std::string> lines = lines_of(first.out);
  ASSERT_EQ(lines.size(), 2u);
  const std::string id = lines[0].substr(lines[0].find("id="));
  EXPECT_GT(id.size(), std::string("id=").size());
  EXPECT_EQ(id, lines[1].substr(lines[1].find("id=")));
  const CommandRun second = launch_sh(1, "echo id=$PIPEPLAN_LAUNCH_ID", dir);
  EXPECT_EQ(second.out.find(id), std::string::npos) << "two launches share " << id;
}

TEST(LauncherTest, SerialSetsOmpNumThreadsOnlyWhenTheUserDidNot) {
  TempDir dir;
  const CommandRun set = launch_sh(2, "echo OMP=$OMP_NUM_THREADS", dir, {"OMP_NUM_THREADS"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  cpu_set_t cpus;
  ASSERT_EQ(::sched_getaffinity(0, sizeof cpus, &cpus), 0);
  const std::string expected = "OMP=" + std::to_string(std::max(1, CPU_COUNT(&cpus) / 2));
  EXPECT_THAT(set.out, HasSubstr("[rank 0] " + expected + "\n"));
  EXPECT_THAT(set.out, HasSubstr("[rank 1] " + expected + "\n"));
  EXPECT_THAT(set.err, HasSubstr("setting OMP_NUM_THREADS="));
  EXPECT_EQ(lines_of(set.err).size(), 1u);

  const CommandRun kept = launch_sh(2, "echo OMP=$OMP_NUM_THREADS", dir, {"OMP_NUM_THREADS=7"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_THAT(kept.out, HasSubstr("[rank 0] OMP=7\n"));
  EXPECT_THAT(kept.out, HasSubstr("[rank 1] OMP=7\n"));
  EXPECT_EQ(kept.err, "");
}

TEST(LauncherTest, SerialCommandThatCannotRunFailsWithTheExecError) {
  TempDir dir;
  const CommandRun run =
      run_pipeplan({"launch", "--nproc", "2", "--", "no-such-command-pipeplan"}, dir);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(lines_of(run.err).back(),
              HasSubstr("failed (exit 127): pipeplan: cannot execute 'no-such-command-pipeplan': "
                        "No such file or directory"));
}

TEST(LauncherTest, BadFlagsExitTwoWithOneLine) {
  TempDir dir;
  const std::vector<std::vector<std::string>> cases = {
      {"launch", "--nproc", "0", "--", "true"},
      {"launch", "--nproc", "-1", "--", "true"},
      {"launch", "--nproc", "x", "--", "true"},
      {"launch", "--nproc", "2"},
      {"launch", "--nproc", "2", "--"},
      {"launch", "--nproc", "2", "--master-port", "70000", "--", "true"},
      {"launch", "--nproc", "2", "--master-port", "-5", "--", "true"},
      {"launch", "--nproc", "2", "--master-port", "http", "--", "true"},
      {"launch", "--", "true"},
  };
  for (const std::vector<std::string>& args : cases) {
    const CommandRun run = run_pipeplan(args, dir);
    std::string joined;
    for (const std::string& arg : args) joined += arg + " ";
    EXPECT_EQ(run.exit_code, 2) << joined << run.err;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << joined << run.err;
    EXPECT_THAT(run.err, StartsWith("pipeplan: error: ")) << joined;
    EXPECT_EQ(run.out, "") << joined;
  }
  EXPECT_THAT(run_pipeplan({"launch", "--nproc", "2", "--"}, dir).err, HasSubstr("COMMAND"));
  EXPECT_THAT(
      run_pipeplan({"launch", "--nproc", "2", "--master-port", "70000", "--", "true"}, dir).err,
      HasSubstr("'70000'"));
}

TEST(LauncherTest, SerialSigtermToTheLauncherStopsEveryRank) {
  TempDir dir;
  const auto started = Clock::now();
  const pid_t launcher =
      start_pipeplan({"launch", "--nproc", "2", "--", "sh", "-c",
                      "echo $$ > " + dir.path() + "/shell.$RANK; sleep 60 & echo $! > " +
                          dir.path() + "/sleep.$RANK; wait"},
                     {"OMP_NUM_THREADS=1"}, dir);
  for (const std::string name : {"sleep.0", "sleep.1"})
    ASSERT_TRUE(wait_for_file(dir.file(name), 20));
  ::kill(launcher, SIGTERM);
  const CommandRun run = finish_pipeplan(launcher, dir, started);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("pipeplan: error: interrupted by signal 15"));
  for (pid_t pid : read_pids(dir, {"shell.0", "shell.1", "sleep.0", "sleep.1"}))
    EXPECT_FALSE(is_running(pid)) << "pid " << pid << " outlived the launch";
}

TEST(LauncherTest, SerialRanksDieWithAKilledLauncher) {
  TempDir dir;
  const auto started = Clock::now();
  const pid_t launcher = start_pipeplan({"launch", "--nproc", "2", "--", "sh", "-c",
                                         "echo $$ > " + dir.path() + "/rank.$RANK; exec sleep 60"},
                                        {"OMP_NUM_THREADS=1"}, dir);
  for (const std::string name : {"rank.0", "rank.1"})
    ASSERT_TRUE(wait_for_file(dir.file(name), 20));
  ::kill(launcher, SIGKILL);
  finish_pipeplan(launcher, dir, started);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (pid_t pid : read_pids(dir, {"rank.0", "rank.1"}))
    EXPECT_FALSE(is_running(pid)) << "rank pid " << pid << " outlived its launcher";
}

TEST(LauncherTest, SerialRankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  LaunchOptions options;
  options.nproc = 2;
  options.stop_grace_s = 0.5;
  options.set_omp_num_threads = false;
  options.extra_env = {{"PIPEPLAN_TEST_DIR", dir.path()}};
  options.command = {"sh", "-c",
                     "if [ $RANK = 0 ]; then trap '' TERM; echo $$ > $PIPEPLAN_TEST_DIR/r0; "
                     "while true; do sleep 0.05; done; fi; "
                     "while [ ! -s $PIPEPLAN_TEST_DIR/r0 ]; do sleep 0.02; done; exit 1"};
  options.stdout_fd = options.stderr_fd = ::open("/dev/null", O_WRONLY);
  const auto started = Clock::now();
  const LaunchResult result = run_ranks(options);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ::close(options.stdout_fd);
  EXPECT_EQ(result.failed_rank, 1);
  EXPECT_EQ(result.ranks.at(1).exit_code, 1);
  EXPECT_EQ(result.ranks.at(0).signal, SIGKILL);
  EXPECT_GE(seconds, options.stop_grace_s);
  EXPECT_LT(seconds, 10.0);  // rank 0 would loop forever: SIGKILL ended it
  EXPECT_EQ(describe_failure(result), "rank 1 failed (exit 1) with nothing on stderr");
}

TEST(LauncherTest, SerialExtraEnvironmentReachesEveryRank) {
  TempDir dir;
  LaunchOptions options;
  options.nproc = 2;
  options.extra_env = {{"PIPEPLAN_PROBE", "x"}, {"OMP_NUM_THREADS", "3"}};
  options.command = {"sh", "-c",
                     "echo $PIPEPLAN_PROBE$OMP_NUM_THREADS$RANK > " + dir.path() + "/$RANK"};
  const LaunchResult result = run_ranks(options);
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(read_text(dir.file("0")), "x30\n");
  EXPECT_EQ(read_text(dir.file("1")), "x31\n");
}

TEST(LauncherTest, DescribesFailuresAndInterruptions) {
  LaunchResult result;
  result.ranks.resize(2);
  result.ranks[1] = RankExit{1, 0, SIGKILL, ""};
  result.failed_rank = 1;
  EXPECT_THAT(describe_failure(result), StartsWith("rank 1 failed (killed by signal 9"));
  EXPECT_THAT(describe_failure(result), HasSubstr("with nothing on stderr"));
  result.failed_rank = -1;
  EXPECT_EQ(describe_failure(result), "");
  result.interrupt_signal = SIGINT;
  EXPECT_THAT(describe_failure(result), StartsWith("interrupted by signal 2"));
  LaunchOptions options;
  EXPECT_THROW(options.validate(), Error);  // no command
  options.command = {"true"};
  EXPECT_NO_THROW(options.validate());
  options.extra_env = {{"A=B", "c"}};
  EXPECT_THROW(options.validate(), Error);
}

}  // namespace
}  // namespace pipeplan::executor
