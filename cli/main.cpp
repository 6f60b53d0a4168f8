// pipeplan's entry point: the dispatch table of subcommands and the one place errors are caught.
#include <c10/util/Exception.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "common/blas_env.h"
#include "common/error.h"
#include "common/files.h"
#include "common/version.h"

namespace {

struct Subcommand {
  const char* name;
  pipeplan::cli::AddCommand add;
  bool internal = false;  ///< started by pipeplan itself; not listed
};

// Order is the order of `pipeplan --help`.
constexpr Subcommand kSubcommands[] = {
    {"models", pipeplan::cli::add_models_command},
    {"profile", pipeplan::cli::add_profile_command},
    {"plan", pipeplan::cli::add_plan_command},
    {"simulate", pipeplan::cli::add_simulate_command},
    {"train", pipeplan::cli::add_train_command},
    {"launch", pipeplan::cli::add_launch_command},
    {"compare", pipeplan::cli::add_compare_command},
    {"link-bench", pipeplan::cli::add_link_bench_command, /*internal=*/true},
};

// One line: errors reach the user without stack traces or multi-line dumps.
std::string first_line(std::string text) {
  const size_t end = text.find('\n');
  if (end != std::string::npos) text.resize(end);
  return text;
}

int fail(const std::string& message, int exit_code) {
  std::fprintf(stderr, "pipeplan: error: %s\n", first_line(message).c_str());
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the checked writes
  // report naming the file, instead of the signal killing the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  pipeplan::reexec_with_best_blas_kernels(argv);
  CLI::App app{"pipeplan: measure a network, plan its pipeline x data-parallel split, train it, "
               "and compare the plan with what was measured.",
               "pipeplan"};
  app.set_version_flag("--version", "pipeplan " + pipeplan::version());
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, pipeplan::cli::Runner>> runners;
  for (const Subcommand& sub : kSubcommands) {
    pipeplan::cli::Runner runner = sub.add(app);
    runners.emplace_back(app.get_subcommand(sub.name), std::move(runner));
  }
  // CLI11 would only say "a subcommand is required"; name the word it did not know instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const Subcommand& sub : kSubcommands) {
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
      pipeplan::check_stream_written(stdout, "standard output");
      return exit_code;
    }
    return fail("no subcommand given (try --help)", 2);
  } catch (const pipeplan::Error& e) {
    return fail(e.what(), e.exit_code());
  } catch (const c10::Error& e) {
    return fail(std::string("LibTorch: ") + e.what_without_backtrace(), 1);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}
