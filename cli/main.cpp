// pipeplan-torch: every subcommand, the LibTorch ones (models, profile, train, launch,
// link-bench) included. `pipeplan` starts it for those (cli/plain_main.cpp).
#include <c10/util/Exception.h>

#include <csignal>

#include "cli/run.h"
#include "common/blas_env.h"
#include "models/torch_compat.h"

namespace {

std::string describe(const std::exception& error) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error))
    return std::string("LibTorch: ") + torch_error->what_without_backtrace();
  return error.what();
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the checked writes
  // report naming the file, instead of the signal killing the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  pipeplan::reexec_with_best_blas_kernels(argv);
  pipeplan::compat::warn_once_per_process();
  using namespace pipeplan::cli;
  // Order is the order of `pipeplan --help`.
  const std::vector<Subcommand> subcommands = {
      {"models", add_models_command},
      {"profile", add_profile_command},
      {"plan", add_plan_command},
      {"simulate", add_simulate_command},
      {"train", add_train_command},
      {"infer", add_infer_command},
      {"launch", add_launch_command},
      {"compare", add_compare_command},
      {"export", add_export_command},
      {"link-bench", add_link_bench_command, /*internal=*/true},
  };
  return run_command_line(argc, argv, subcommands, describe);
}
