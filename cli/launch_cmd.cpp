// `pipeplan launch`: starts N local ranks of a command the way torchrun does (executor/launcher.h).
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "executor/launcher.h"

namespace pipeplan::cli {

Runner add_launch_command(CLI::App& app) {
  auto options = std::make_shared<executor::LaunchOptions>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "Start N local ranks of COMMAND with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, "
      "MASTER_ADDR and MASTER_PORT set; prefix their output with [rank r]; stop all if one fails.");
  sub->add_option("--nproc", options->nproc, "Number of ranks to start on this machine")
      ->required();
  sub->add_option("--master-addr", options->master_addr, "MASTER_ADDR for every rank")
      ->capture_default_str();
  sub->add_option("--master-port", options->master_port,
                  "MASTER_PORT for every rank (default: a free port)");
  sub->add_option("command", options->command, "The command each rank runs, after '--'");
  return [options] { return executor::launch(*options); };
}

}  // namespace pipeplan::cli
