// pipeplan: the program users run. plan, simulate, compare and export need no LibTorch and run
// here, without the 0.7-1.0 s that loading LibTorch takes (bench/planner_scale.sh's start-up row);
// every other subcommand, and --help and --version, replace this process with pipeplan-torch
// from the same folder, given the same arguments.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>

#include "cli/run.h"

namespace {

std::string describe(const std::exception& error) { return error.what(); }

// Runs pipeplan-torch in place of this process; returns only when it could not be started.
int exec_torch_commands(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string torch_binary = (self.parent_path() / "pipeplan-torch").string();
  if (!ec) ::execv(torch_binary.c_str(), argv);
  return pipeplan::cli::fail("cannot start " + torch_binary + ": " +
                                 (ec ? ec.message() : std::string(std::strerror(errno))) +
                                 " (it is built beside pipeplan and runs its LibTorch commands)",
                             1);
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the checked writes
  // report naming the file, instead of the signal killing the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  using namespace pipeplan::cli;
  bool plain = false;
  for (const Subcommand& sub : plain_subcommands())
    plain = plain || (argc > 1 && argv[1] == std::string(sub.name));
  if (!plain) return exec_torch_commands(argv);
  return run_command_line(argc, argv, plain_subcommands(), describe);
}
