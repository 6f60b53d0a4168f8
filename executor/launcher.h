// Local multi-process launch the way torchrun does it: N ranks with the rendezvous variables,
// their output relayed line by line, and all of them stopped when one fails.
#pragma once

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

namespace pipeplan::executor {

/// Seconds a rank may take to exit after SIGTERM before it gets SIGKILL.
inline constexpr double kDefaultStopGraceS = 5.0;

/// What to start and how. Every rank runs the same `command` with its own environment.
struct LaunchOptions {
  int nproc = 1;                          ///< ranks to start, 1 to max_local_processes()
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR given to every rank
  int master_port = 0;                    ///< MASTER_PORT; 0 picks a free port (binds port 0)
  std::vector<std::string> command;       ///< program and arguments, searched in PATH
  /// Set in every rank after the rendezvous variables (so they may override them).
  std::vector<std::pair<std::string, std::string>> extra_env;
  /// Set OMP_NUM_THREADS = max(1, cores / nproc) when neither the launcher's environment nor
  /// `extra_env` has it, and print a note saying so.
  bool set_omp_num_threads = true;
  double stop_grace_s = kDefaultStopGraceS;  ///< SIGTERM -> SIGKILL grace when stopping ranks
  int stdout_fd = STDOUT_FILENO;  ///< where ranks' stdout lines go, each prefixed "[rank r] "
  int stderr_fd = STDERR_FILENO;  ///< where ranks' stderr lines go, each prefixed "[rank r] "

  /// Throws Error(kBadInput) naming the flag (--nproc, --master-port, --master-addr) or the
  /// missing COMMAND.
  void validate() const;
};

/// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

/// Most processes pipeplan starts on one machine, however many cores it has.
inline constexpr int kMaxLocalProcesses = 64;
/// Processes per usable core beyond which ranks mostly wait for each other's cores.
inline constexpr int kLocalProcessesPerCore = 4;

/// The most ranks `launch --nproc` and `profile --co-located` start here:
/// min(kMaxLocalProcesses, kLocalProcessesPerCore × usable_cores()).
int max_local_processes();

/// "1 to 8 (4 per usable core, 2 here; at most 64)": the limit for error messages.
std::string local_processes_limit();

/// How one rank ended.
struct RankExit {
  int rank = 0;
  int exit_code = 0;             ///< when it exited; 127 when its command could not be executed
  int signal = 0;                ///< when it was killed by a signal (then exit_code is 0)
  std::string last_stderr_line;  ///< its last non-empty stderr line, without the prefix
  /// True when it exited 0.
  bool ok() const { return signal == 0 && exit_code == 0; }
};

/// How a launch ended.
struct LaunchResult {
  std::vector<RankExit> ranks;  ///< indexed by rank
  int failed_rank = -1;         ///< the first rank seen failing; -1 when none failed
  int interrupt_signal = 0;     ///< SIGINT or SIGTERM the launcher received and forwarded; or 0
  int output_errno = 0;         ///< errno of the first relayed line that could not be written
  /// True when every rank exited 0 and the launcher was not interrupted.
  bool ok() const { return failed_rank < 0 && interrupt_signal == 0; }
};

/// Starts `options.nproc` ranks and waits for all of them. Each rank runs in its own process
/// group with stdin from /dev/null and dies (SIGKILL) if the calling thread ends; the calling
/// thread must not have SIGCHLD ignored. When a rank fails, or the launcher gets SIGINT or
/// SIGTERM (forwarded to every rank), all ranks' process groups get SIGTERM, then SIGKILL after
/// `stop_grace_s`. Returns once every rank is reaped and its output relayed. Throws
/// Error(kBadInput) for bad options, Error(kRuntime) when processes cannot be started.
LaunchResult run_ranks(const LaunchOptions& options);

/// One line describing a failed launch: "rank 1 failed (exit 2): <its last stderr line>", or
/// "interrupted by signal 2, SIGINT; stopped all 2 ranks". "" when `result.ok()`.
std::string describe_failure(const LaunchResult& result);

/// `pipeplan launch`: run_ranks, then 0 when every rank succeeded and their output was relayed.
/// Otherwise throws Error with describe_failure's line: kBadInput (exit 2) when the failed rank
/// exited 2, kRuntime (exit 1) for any other exit code, a signal or an interruption, and
/// kRuntime naming errno when the ranks succeeded but their lines could not be written.
int launch(const LaunchOptions& options);

/// A TCP port that is free now on this machine (bound to port 0 and released); another process
/// may take it before it is used, as with torchrun.
int pick_free_port();

}  // namespace pipeplan::executor
