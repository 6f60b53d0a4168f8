// `pipeplan infer`: one rank of a planned forward-only pipeline serving requests.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "executor/inferencer.h"
#include "executor/trainer.h"

namespace pipeplan::cli {
namespace {

int run_infer(const executor::InferOptions& options) {
  check_outputs_distinct({{"-o", options.output_path}, {"--save-outputs", options.outputs_path}},
                         {{"--plan", options.plan_path}});
  executor::infer(options);
  return 0;
}

}  // namespace

Runner add_infer_command(CLI::App& app) {
  auto options = std::make_shared<executor::InferOptions>();
  executor::InferOptions& o = *options;
  CLI::App* sub = app.add_subcommand(
      "infer",
      "Serve requests with one rank of an inference plan (start all ranks with pipeplan launch "
      "or torchrun).");
  sub->add_option("--plan", o.plan_path, "plan.json from pipeplan plan --inference")->required();
  sub->add_option("--data", o.data, "Data set: fashion-mnist, cifar10 or synthetic")
      ->capture_default_str();
  sub->add_option("--data-dir", o.data_dir, "Folder of the data set's files");
  sub->add_option("--requests", o.requests, "Requests of global_batch samples to serve")
      ->check(integer_in(1, executor::kMaxInferRequests))
      ->capture_default_str();
  sub->add_option("--warmup", o.warmup_requests, "First requests left out of the statistics")
      ->check(integer_in(0, executor::kMaxInferRequests))
      ->capture_default_str();
  sub->add_option("--checkpoint", o.checkpoint_dir,
                  "A training run's --checkpoint-dir (default: the seeded init)");
  sub->add_option("--seed", o.seed, "Seed of the initial weights and synthetic data")
      ->capture_default_str();
  sub->add_option("--save-outputs", o.outputs_path,
                  "Internal: the last stage's outputs of the first requests (tests)")
      ->group("");
  sub->add_option("--timeout-s", o.timeout_s, "Seconds to wait for a peer before failing")
      ->check(CLI::PositiveNumber & CLI::Range(0.0, executor::kMaxTimeoutS))
      ->capture_default_str();
  sub->add_option("-o,--output", o.output_path, "run.json (rank 0)")->required();
  return [options] { return run_infer(*options); };
}

}  // namespace pipeplan::cli
