// Local multi-process launch: fork/exec of the ranks, line relaying with poll(), stopping on
// failure. Free of LibTorch: only POSIX and Linux process calls.
#include "executor/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.h"
#include "executor/rendezvous.h"

namespace pipeplan::executor {
namespace {

using Clock = std::chrono::steady_clock;

// Poll timeout when nothing else is due: reaping must not depend on SIGCHLD reaching this
// thread (a host program's other threads may take it).
constexpr int kReapIntervalMs = 200;
// Bytes read from a pipe per wake-up; level-triggered poll brings us back for the rest, so one
// chatty rank cannot starve the others.
constexpr size_t kReadChunkBytes = size_t{64} * 1024;
// A rank writing this much without a newline has its text relayed as a line anyway.
constexpr size_t kMaxLineBytes = 1 << 20;
// Chunks read from each pipe after its rank ended: bounds the wait if something the rank started
// keeps writing.
constexpr int kMaxDrainReads = 1024;
// Exit code of a child whose launcher died before the child could ask to die with it.
constexpr int kExitLauncherGone = 1;
// Exit code of a child whose command could not be executed (as sh and torchrun use it).
constexpr int kExitCannotExecute = 127;

// Writes everything; returns 0, or the errno of the write that failed (the rest is dropped: a
// rank's lines must not stop the launch, which reports the error once the ranks are done).
int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return written < 0 ? errno : ENOSPC;
    data += written;
    size -= static_cast<size_t>(written);
  }
  return 0;
}

int write_line(int fd, const std::string& text) {
  const std::string line = text + "\n";
  return write_all(fd, line.data(), line.size());
}

// One pipe from a rank: reads what is there and writes whole lines, each with the rank's prefix
// and in one write() so that lines of different ranks never interleave.
class LineRelay {
 public:
  LineRelay(int fd, int out_fd, std::string prefix)
      : fd_(fd), out_fd_(out_fd), prefix_(std::move(prefix)) {}
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;
  ~LineRelay() { close_pipe(); }

  /// The pipe's read end, or -1 once it reached end of file.
  int fd() const { return fd_; }
  const std::string& last_line() const { return last_line_; }
  /// The errno of the first relayed line that could not be written, or 0.
  int write_errno() const { return write_errno_; }

  /// Reads at most `max_reads` chunks without blocking; at end of file relays a partial last
  /// line and closes. Returns false when nothing more is there now.
  bool pump(int max_reads) {
    char chunk[kReadChunkBytes];
    for (int read_idx = 0; read_idx < max_reads && fd_ >= 0; ++read_idx) {
      const ssize_t got = ::read(fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && errno == EAGAIN) return false;
      if (got <= 0) {  // end of file, or an error that ends this pipe all the same
        finish();
        return false;
      }
      pending_.append(chunk, static_cast<size_t>(got));
      emit_complete_lines();
    }
    return fd_ >= 0;
  }

  /// Relays a partial last line (the rank ended without a newline) and closes the pipe.
  void finish() {
    if (!pending_.empty()) emit(pending_);
    pending_.clear();
    close_pipe();
  }

 private:
  void emit_complete_lines() {
    size_t begin = 0;
    for (size_t end; (end = pending_.find('\n', begin)) != std::string::npos; begin = end + 1)
      emit(pending_.substr(begin, end - begin));
    pending_.erase(0, begin);
    if (pending_.size() >= kMaxLineBytes) {
      emit(pending_);
      pending_.clear();
    }
  }

  void emit(const std::string& line) {
    const int err = write_line(out_fd_, prefix_ + line);
    if (write_errno_ == 0) write_errno_ = err;
    if (line.find_first_not_of(" \t\r") != std::string::npos) last_line_ = line;
  }

  void close_pipe() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_;
  int out_fd_;
  std::string prefix_;
  std::string pending_;
  std::string last_line_;
  int write_errno_ = 0;
};

// Blocks SIGINT, SIGTERM and SIGCHLD in the calling thread for the launch and reads them from a
// signalfd, so that the poll loop handles them and no process-wide handler is installed.
class SignalWatch {
 public:
  SignalWatch() {
    sigemptyset(&watched_);
    for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&watched_, sig);
    PIPEPLAN_RUNTIME_CHECK(::pthread_sigmask(SIG_BLOCK, &watched_, &previous_) == 0,
                           "launch: cannot block signals");
    fd_ = ::signalfd(-1, &watched_, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0) ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
    PIPEPLAN_RUNTIME_CHECK(fd_ >= 0, "launch: signalfd failed: ", std::strerror(errno));
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  ~SignalWatch() {
    ::close(fd_);
    ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

  int fd() const { return fd_; }

  /// The last SIGINT or SIGTERM read since the previous call, or 0; SIGCHLD only wakes the loop.
  int take_interrupt() {
    int interrupt = 0;
    signalfd_siginfo info;
    while (::read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      if (info.ssi_signo != SIGCHLD) interrupt = static_cast<int>(info.ssi_signo);
    return interrupt;
  }

 private:
  sigset_t watched_;
  sigset_t previous_;
  int fd_ = -1;
};

void set_variable(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  const std::string head = key + "=";
  auto same_key = [&](const std::string& entry) {
    return entry.compare(0, head.size(), head) == 0;
  };
  env.erase(std::remove_if(env.begin(), env.end(), same_key), env.end());
  env.push_back(head + value);
}

bool has_variable(const LaunchOptions& options, const std::string& key) {
  for (const auto& [extra_key, value] : options.extra_env)
    if (extra_key == key) return true;
  return std::getenv(key.c_str()) != nullptr;
}

// Everything a child needs, built before fork: after fork the child makes only
// async-signal-safe calls, since the caller may have other threads (the profiler does).
struct ExecPlan {
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::string exec_error;  // "pipeplan: cannot execute 'cmd': ", strerror follows in the child
  std::vector<char*> argv;
  std::vector<char*> envp;

  /// Points argv and envp at args and env; call once they no longer change.
  void finalize() {
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    for (std::string& entry : env) envp.push_back(entry.data());
    envp.push_back(nullptr);
  }
};

[[noreturn]] void exec_rank(const ExecPlan& plan, int out_fd, int err_fd, pid_t launcher_pid) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher_pid) ::_exit(kExitLauncherGone);
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // The launch's own protocol: forwarded SIGINT/SIGTERM must reach the command, whatever the
  // launcher inherited (a background shell job ignores SIGINT).
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGXFSZ}) ::sigaction(sig, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
  const char* reason = std::strerror(errno);
  write_all(STDERR_FILENO, plan.exec_error.data(), plan.exec_error.size());
  write_all(STDERR_FILENO, reason, std::strlen(reason));
  write_all(STDERR_FILENO, "\n", 1);
  ::_exit(kExitCannotExecute);
}

// True when a process of group `group` is running. Unlike killpg(group, 0) this ignores
// zombies: what a rank started is reparented to PID 1 when the rank dies, and in a container
// PID 1 may never reap it.
bool group_has_live_process(pid_t group) {
  std::unique_ptr<DIR, int (*)(DIR*)> proc(::opendir("/proc"), &::closedir);
  if (proc == nullptr) return true;  // cannot tell: wait for the grace period
  while (const dirent* entry = ::readdir(proc.get())) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const std::string path = std::string("/proc/") + entry->d_name + "/stat";
    std::unique_ptr<FILE, int (*)(FILE*)> stat_file(std::fopen(path.c_str(), "r"), &std::fclose);
    char text[512] = {};
    if (stat_file == nullptr || std::fgets(text, sizeof text, stat_file.get()) == nullptr) continue;
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses; skip to the last ')'.
    const char* after_comm = std::strrchr(text, ')');
    char state = 0;
    int parent = 0;
    int process_group = 0;
    if (after_comm == nullptr ||
        std::sscanf(after_comm + 1, " %c %d %d", &state, &parent, &process_group) != 3)
      continue;
    if (process_group == group && state != 'Z' && state != 'X') return true;
  }
  return false;
}

// "signal 9, SIGKILL": the number as the shell reports it, the name as engineers know it.
std::string signal_text(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
      {SIGSEGV, "SIGSEGV"}, {SIGPIPE, "SIGPIPE"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}};
  for (const auto& [number, name] : kNames)
    if (number == sig) return detail::concat("signal ", sig, ", ", name);
  return detail::concat("signal ", sig);
}

// "host:pid:nanoseconds": different for every launch, on this machine and others.
std::string new_launch_id() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return detail::concat(host, ":", ::getpid(), ":", now_ns);
}

struct RankProcess {
  pid_t pid = -1;    // -1 once reaped
  pid_t group = -1;  // its process group, kept after it is reaped
  std::unique_ptr<LineRelay> out;
  std::unique_ptr<LineRelay> err;
  RankExit exit;
};

// One launch: starts the ranks, then loops over poll() relaying output, reaping ranks and
// stopping them all once one fails or the launcher is interrupted.
class Launch {
 public:
  explicit Launch(const LaunchOptions& options) : options_(options) {}

  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;
  // Only reached with ranks left when something threw: leave no process behind.
  ~Launch() {
    if (running_ranks() == 0) return;
    signal_all(SIGKILL);
    for (RankProcess& rank : ranks_)
      if (rank.pid > 0) ::waitpid(rank.pid, nullptr, 0);
  }

  LaunchResult run() {
    std::fflush(nullptr);  // what the caller printed comes before the ranks' lines
    start_ranks();
    // After a stop the loop also waits (up to the grace period) for what the ranks started in
    // their process groups, so that SIGKILL reaches anything that ignored SIGTERM.
    while (running_ranks() > 0 || (stopping_ && !killed_ && any_group_alive())) {
      std::vector<pollfd> fds = poll_set();
      ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (const int sig = signals_.take_interrupt()) on_interrupt(sig);
      for (RankProcess& rank : ranks_) {
        rank.out->pump(/*max_reads=*/1);
        rank.err->pump(/*max_reads=*/1);
      }
      reap();
      if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) signal_all(SIGKILL);
    }
    return finish();
  }

 private:
  // The launcher's environment, then the rendezvous variables, then the caller's extras.
  std::vector<std::string> rank_environment(int rank) const {
    std::vector<std::string> env;
    for (char** entry = environ; *entry != nullptr; ++entry) env.emplace_back(*entry);
    set_variable(env, "RANK", std::to_string(rank));
    set_variable(env, "LOCAL_RANK", std::to_string(rank));
    set_variable(env, "WORLD_SIZE", std::to_string(options_.nproc));
    set_variable(env, "LOCAL_WORLD_SIZE", std::to_string(options_.nproc));
    set_variable(env, "MASTER_ADDR", options_.master_addr);
    set_variable(env, "MASTER_PORT", std::to_string(port_));
    set_variable(env, kLaunchIdVariable, launch_id_);
    if (omp_threads_ > 0) set_variable(env, "OMP_NUM_THREADS", std::to_string(omp_threads_));
    for (const auto& [key, value] : options_.extra_env) set_variable(env, key, value);
    return env;
  }

  // 0 when OMP_NUM_THREADS is left alone; otherwise the value every rank gets (torchrun's rule).
  int choose_omp_threads() const {
    if (!options_.set_omp_num_threads || has_variable(options_, "OMP_NUM_THREADS")) return 0;
    const int cores = usable_cores();
    const int threads = std::max(1, cores / options_.nproc);
    write_line(options_.stderr_fd,
               detail::concat("pipeplan: setting OMP_NUM_THREADS=", threads, " for each of ",
                              options_.nproc, " ranks (", cores,
                              " cores); set OMP_NUM_THREADS yourself to choose another value"));
    return threads;
  }

  void start_ranks() {
    port_ = options_.master_port != 0 ? options_.master_port : pick_free_port();
    launch_id_ = new_launch_id();
    omp_threads_ = choose_omp_threads();
    result_.ranks.resize(static_cast<size_t>(options_.nproc));
    const pid_t launcher_pid = ::getpid();
    for (int rank = 0; rank < options_.nproc; ++rank) start_rank(rank, launcher_pid);
  }

  void start_rank(int rank, pid_t launcher_pid) {
    ExecPlan plan{options_.command,
                  rank_environment(rank),
                  "pipeplan: cannot execute " + quote(options_.command.front()) + ": ",
                  {},
                  {}};
    plan.finalize();
    int out_pipe[2];
    int err_pipe[2];
    PIPEPLAN_RUNTIME_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0,
                           "launch: pipe failed: ", std::strerror(errno));
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      PIPEPLAN_RUNTIME_CHECK(false, "launch: pipe failed: ", std::strerror(errno));
    }
    const pid_t pid = ::fork();
    if (pid == 0) exec_rank(plan, out_pipe[1], err_pipe[1], launcher_pid);
    const int fork_errno = errno;
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    RankProcess process;
    // Read ends only: a rank's write ends stay blocking, so a full pipe slows it down instead
    // of failing its writes.
    for (int read_fd : {out_pipe[0], err_pipe[0]}) ::fcntl(read_fd, F_SETFL, O_NONBLOCK);
    const std::string prefix = detail::concat("[rank ", rank, "] ");
    process.out = std::make_unique<LineRelay>(out_pipe[0], options_.stdout_fd, prefix);
    process.err = std::make_unique<LineRelay>(err_pipe[0], options_.stderr_fd, prefix);
    PIPEPLAN_RUNTIME_CHECK(pid > 0, "launch: cannot start rank ", rank, ": ",
                           std::strerror(fork_errno));
    // The child does this too; whichever runs first, the group exists before any signal is sent.
    ::setpgid(pid, pid);
    process.pid = pid;
    process.group = pid;
    process.exit.rank = rank;
    ranks_.push_back(std::move(process));
  }

  int running_ranks() const {
    return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(),
                                          [](const RankProcess& rank) { return rank.pid > 0; }));
  }

  bool any_group_alive() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const RankProcess& rank) {
      return ::killpg(rank.group, 0) == 0 && group_has_live_process(rank.group);
    });
  }

  std::vector<pollfd> poll_set() const {
    std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
    for (const RankProcess& rank : ranks_)
      for (const LineRelay* relay : {rank.out.get(), rank.err.get()})
        if (relay->fd() >= 0) fds.push_back({relay->fd(), POLLIN, 0});
    return fds;
  }

  int poll_timeout_ms() const {
    if (!stopping_ || killed_) return kReapIntervalMs;
    const auto left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(kill_deadline_ - Clock::now())
            .count();
    return static_cast<int>(std::clamp<int64_t>(left_ms + 1, 0, kReapIntervalMs));
  }

  // Collects the ranks that ended; the first failure (lowest rank among those ending together)
  // stops the others.
  void reap() {
    for (RankProcess& rank : ranks_) {
      if (rank.pid <= 0) continue;
      int status = 0;
      const pid_t got = ::waitpid(rank.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      rank.pid = -1;
      if (got < 0)  // ECHILD: reaped by someone else, so its status is lost
        rank.exit.exit_code = 1;
      else if (WIFSIGNALED(status))
        rank.exit.signal = WTERMSIG(status);
      else
        rank.exit.exit_code = WEXITSTATUS(status);
      if (!rank.exit.ok() && !stopping_) {
        result_.failed_rank = rank.exit.rank;
        begin_stop(SIGTERM);
      }
    }
  }

  // A second signal while stopping means "now": SIGKILL without waiting for the grace period.
  void on_interrupt(int sig) {
    if (result_.interrupt_signal == 0) result_.interrupt_signal = sig;
    if (stopping_)
      signal_all(SIGKILL);
    else
      begin_stop(sig);
  }

  void begin_stop(int sig) {
    stopping_ = true;
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(options_.stop_grace_s));
    signal_all(sig);
  }

  // Every rank's whole process group, also of ranks already reaped: what they started may live on.
  void signal_all(int sig) {
    for (const RankProcess& rank : ranks_) ::killpg(rank.group, sig);
    if (sig == SIGKILL) killed_ = true;
  }

  LaunchResult finish() {
    for (RankProcess& rank : ranks_) {
      for (LineRelay* relay : {rank.out.get(), rank.err.get()}) {
        relay->pump(kMaxDrainReads);
        relay->finish();
      }
      rank.exit.last_stderr_line = rank.err->last_line();
      for (const LineRelay* relay : {rank.out.get(), rank.err.get()})
        if (result_.output_errno == 0) result_.output_errno = relay->write_errno();
      result_.ranks[static_cast<size_t>(rank.exit.rank)] = rank.exit;
    }
    if (const int sig = signals_.take_interrupt(); sig != 0 && result_.interrupt_signal == 0)
      result_.interrupt_signal = sig;
    return result_;
  }

  const LaunchOptions& options_;
  SignalWatch signals_;
  std::vector<RankProcess> ranks_;
  LaunchResult result_;
  int port_ = 0;
  std::string launch_id_;
  int omp_threads_ = 0;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_;
};

}  // namespace

void LaunchOptions::validate() const {
  PIPEPLAN_CHECK(nproc >= 1 && nproc <= max_local_processes(), "--nproc: ",
                 quote(std::to_string(nproc)), " is not a number of local ranks; give ",
                 local_processes_limit());
  PIPEPLAN_CHECK(master_port >= 0 && master_port <= 65535,
                 "--master-port: ", quote(std::to_string(master_port)),
                 " is not a TCP port; give 1 to 65535, or leave it out to pick a free one");
  PIPEPLAN_CHECK(!master_addr.empty() && master_addr.find_first_of(" \t\n=") == std::string::npos,
                 "--master-addr: ", quote(master_addr), " is not a host name or address");
  PIPEPLAN_CHECK(
      !command.empty() && !command.front().empty(),
      "launch: no COMMAND given; put it after '--': pipeplan launch --nproc N -- COMMAND...");
  PIPEPLAN_CHECK(stop_grace_s >= 0, "launch: stop grace ", stop_grace_s,
                 " s is negative; give 0 or more");
  for (const auto& [key, value] : extra_env)
    PIPEPLAN_CHECK(!key.empty() && key.find('=') == std::string::npos,
                   "launch: environment variable name ", quote(key), " is empty or contains '='");
}

LaunchResult run_ranks(const LaunchOptions& options) {
  options.validate();
  Launch launch(options);
  return launch.run();
}

std::string describe_failure(const LaunchResult& result) {
  if (result.failed_rank >= 0) {
    const RankExit& failed = result.ranks.at(static_cast<size_t>(result.failed_rank));
    const std::string how = failed.signal != 0 ? "killed by " + signal_text(failed.signal)
                                               : detail::concat("exit ", failed.exit_code);
    const std::string last = failed.last_stderr_line.empty() ? " with nothing on stderr"
                                                             : ": " + failed.last_stderr_line;
    return detail::concat("rank ", failed.rank, " failed (", how, ")", last);
  }
  if (result.interrupt_signal != 0)
    return detail::concat("interrupted by ", signal_text(result.interrupt_signal), "; stopped all ",
                          result.ranks.size(), " ranks");
  return "";
}

int launch(const LaunchOptions& options) {
  const LaunchResult result = run_ranks(options);
  PIPEPLAN_RUNTIME_CHECK(!result.ok() || result.output_errno == 0,
                         "launch: cannot write the ranks' output: ",
                         std::strerror(result.output_errno), " (their lines were lost)");
  if (result.ok()) return 0;
  const bool bad_input = result.failed_rank >= 0 &&
                         result.ranks[static_cast<size_t>(result.failed_rank)].signal == 0 &&
                         result.ranks[static_cast<size_t>(result.failed_rank)].exit_code == 2;
  throw Error(bad_input ? ErrorKind::kBadInput : ErrorKind::kRuntime, describe_failure(result));
}

int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  PIPEPLAN_RUNTIME_CHECK(
      fd >= 0, "launch: cannot open a socket to pick MASTER_PORT: ", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  const bool named = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int saved_errno = errno;
  ::close(fd);
  PIPEPLAN_RUNTIME_CHECK(named, "launch: cannot pick a free port for MASTER_PORT: ",
                         std::strerror(saved_errno), "; give one with --master-port");
  return ntohs(address.sin_port);
}

int usable_cores() {
  cpu_set_t cpus;
  if (::sched_getaffinity(0, sizeof cpus, &cpus) == 0) return std::max(1, CPU_COUNT(&cpus));
  return std::max(1u, std::thread::hardware_concurrency());
}

int max_local_processes() {
  return std::min(kMaxLocalProcesses, kLocalProcessesPerCore * usable_cores());
}

std::string local_processes_limit() {
  return detail::concat("1 to ", max_local_processes(), " (", kLocalProcessesPerCore,
                        " per usable core, ", usable_cores(), " here; at most ",
                        kMaxLocalProcesses, ")");
}

}  // namespace pipeplan::executor
