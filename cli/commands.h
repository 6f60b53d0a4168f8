// The subcommands of `pipeplan`: each adds itself to the CLI11 app and returns its runner.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace pipeplan::cli {

/// Runs a parsed subcommand; returns the process exit code. Throws pipeplan::Error on bad input.
using Runner = std::function<int()>;

/// Adds one subcommand with its options to `app`; the returned Runner reads those options.
using AddCommand = Runner (*)(CLI::App& app);

Runner add_models_command(CLI::App& app);
Runner add_plan_command(CLI::App& app);
Runner add_simulate_command(CLI::App& app);

}  // namespace pipeplan::cli
