// The shared command line: subcommand dispatch and error reporting.
#include "cli/run.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>

#include "cli/flag_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "common/version.h"

namespace pipeplan::cli {

int fail(const std::string& message, int exit_code) {
  // One line: errors reach the user without stack traces or multi-line dumps.
  const std::string line = message.substr(0, message.find('\n'));
  std::fprintf(stderr, "pipeplan: error: %s\n", line.c_str());
  return exit_code;
}

const std::vector<Subcommand>& plain_subcommands() {
  static const std::vector<Subcommand> subcommands = {
      {"plan", add_plan_command},
      {"simulate", add_simulate_command},
      {"compare", add_compare_command},
      {"export", add_export_command},
  };
  return subcommands;
}

void write_outputs(const std::vector<OutputContent>& outputs) {
  check_stream_written(stdout, "standard output");
  write_files_atomic(outputs);
  for (const OutputContent& output : outputs) std::printf("wrote %s\n", output.path.c_str());
}

void protect_standard_streams() {
  // SIGPIPE would kill the process at its first write to a pipe no process reads, without a
  // word and after some outputs were written; ignored, the write fails with EPIPE, which
  // check_stream_written reports.
  std::signal(SIGPIPE, SIG_IGN);
  // A closed descriptor 0, 1 or 2 is opened on /dev/null: the next file opened would take its
  // number, and what is printed would end up in an output file.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int null_fd = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (null_fd >= 0 && null_fd != fd) {
      ::dup2(null_fd, fd);
      ::close(null_fd);
    }
  }
}

int run_command_line(int argc, char** argv, const std::vector<Subcommand>& subcommands,
                     DescribeError describe) {
  protect_standard_streams();
  CLI::App app{"pipeplan: measure a network, plan its pipeline x data-parallel split, train it, "
               "and compare the plan with what was measured.",
               "pipeplan"};
  app.set_version_flag("--version", "pipeplan " + version());
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (const Subcommand& sub : subcommands) {
    Runner runner = sub.add(app);
    runners.emplace_back(app.get_subcommand(sub.name), std::move(runner));
  }
  check_integer_flags_are_decimal(app);
  // CLI11 would only say "a subcommand is required"; name the word it did not know instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const Subcommand& sub : subcommands) {
      if (!sub.internal) names += std::string(names.empty() ? "" : ", ") + sub.name;
      known = known || argv[1] == std::string(sub.name);
    }
    if (!known)
      return fail("unknown subcommand '" + std::string(argv[1]) + "' (subcommands: " + names + ")", 2);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    return fail(e.what(), 2);
  }
  try {
    for (auto& [sub_app, runner] : runners) {
      if (!sub_app->parsed()) continue;
      const int exit_code = runner();
      // Tables and "wrote" lines are output too: a full disk or a closed file must not exit 0.
      check_stream_written(stdout, "standard output");
      return exit_code;
    }
    return fail("no subcommand given (try --help)", 2);
  } catch (const Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const std::exception& e) {
    return fail(describe(e), 1);
  }
}

}  // namespace pipeplan::cli
