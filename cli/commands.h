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
/// `pipeplan profile`: per-layer measurement of a model -> profile.json.
Runner add_profile_command(CLI::App& app);
/// `pipeplan launch`: start N local ranks the way torchrun does.
Runner add_launch_command(CLI::App& app);
/// `pipeplan train`: run a plan to train -> run.json, steps.jsonl, checkpoints.
Runner add_train_command(CLI::App& app);
/// `pipeplan infer`: serve requests with an inference plan -> run.json.
Runner add_infer_command(CLI::App& app);
/// `pipeplan plan`: search the best dp x pp plan for a profile -> plan.json.
Runner add_plan_command(CLI::App& app);
/// `pipeplan simulate`: replay a plan's schedule -> timeline trace and SVG.
Runner add_simulate_command(CLI::App& app);
/// `pipeplan export`: a plan in the form another runtime takes (torch.distributed.pipelining,
/// torchtitan, Megatron-LM, DeepSpeed, vLLM).
Runner add_export_command(CLI::App& app);
/// `pipeplan compare`: a plan's predictions against a run's measurements -> table, JSON, SVG.
Runner add_compare_command(CLI::App& app);
/// `pipeplan link-bench` (internal, hidden): one of the two ranks `pipeplan profile` starts to
/// time point-to-point and all-reduce between them.
Runner add_link_bench_command(CLI::App& app);

}  // namespace pipeplan::cli
