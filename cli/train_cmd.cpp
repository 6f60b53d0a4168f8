// `pipeplan train`: one rank of a planned pipeline x data-parallel training run.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "executor/trainer.h"

namespace pipeplan::cli {
namespace {

struct TrainFlags {
  executor::TrainOptions options;
  int64_t steps = 0;
  int64_t epochs = 0;
};

int run_train(TrainFlags& flags) {
  executor::TrainOptions& o = flags.options;
  PIPEPLAN_CHECK(!(flags.steps > 0 && flags.epochs > 0), "--steps ", flags.steps, " and --epochs ",
                 flags.epochs, " both given; give one of them");
  PIPEPLAN_CHECK(!o.resume || !o.checkpoint_dir.empty(),
                 "--resume needs --checkpoint-dir (the folder to resume from)");
  PIPEPLAN_CHECK(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(), "--checkpoint-every ",
                 o.checkpoint_every, " needs --checkpoint-dir");
  check_outputs_distinct({{"-o", o.output_path}, {"--log", o.log_path}, {"--trace", o.trace_path}},
                         {{"--plan", o.plan_path}});
  o.steps = flags.steps;
  o.epochs = flags.epochs;
  executor::train(o);
  return 0;
}

}  // namespace

Runner add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  executor::TrainOptions& o = flags->options;
  CLI::App* sub = app.add_subcommand(
      "train", "Train one rank of a plan (start all ranks with pipeplan launch or torchrun).");
  sub->add_option("--plan", o.plan_path, "plan.json from pipeplan plan")->required();
  sub->add_option("--data", o.data, "Data set: fashion-mnist, cifar10 or synthetic")
      ->capture_default_str();
  sub->add_option("--data-dir", o.data_dir, "Folder of the data set's files");
  sub->add_option("--steps", flags->steps, "Optimizer steps to train")
      ->check(integer_in(1, executor::kMaxTrainSteps));
  sub->add_option("--epochs", flags->epochs, "Epochs to train (default 1)")
      ->check(integer_in(1, executor::kMaxTrainSteps));
  sub->add_option("--seed", o.seed, "Seed of initialisation, data order and dropout")
      ->capture_default_str();
  sub->add_option("--log", o.log_path, "Per-step JSON lines (rank 0)");
  sub->add_option("--checkpoint-dir", o.checkpoint_dir, "Folder for checkpoints");
  sub->add_option("--checkpoint-every", o.checkpoint_every,
                  "Steps between checkpoints (default: only at the end)")
      ->check(integer_in(0, executor::kMaxTrainSteps));
  sub->add_flag("--resume", o.resume, "Continue from the latest complete checkpoint");
  sub->add_option("--trace", o.trace_path, "Chrome trace of every rank's actions (rank 0)");
  sub->add_option("--timeout-s", o.timeout_s, "Seconds to wait for a peer before failing")
      ->check(CLI::PositiveNumber & CLI::Range(0.0, executor::kMaxTimeoutS))
      ->capture_default_str();
  sub->add_option("-o,--output", o.output_path, "run.json (rank 0)")->required();
  return [flags] { return run_train(*flags); };
}

}  // namespace pipeplan::cli
