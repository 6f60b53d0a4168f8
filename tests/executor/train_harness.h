// Test harness for the executor: plans built by hand for a model and a split, and ranks of the
// built `pipeplan train` started as processes with the rendezvous variables.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "plans/plan.h"

namespace pipeplan::testing {

/// The split and settings of a test plan.
struct TestPlanSpec {
  std::string model = "mlp_tiny";
  std::vector<std::string> model_args;  ///< "KEY=VALUE" overrides of the model's configuration
  int dp = 1;
  int pp = 1;
  int tp = 1;  ///< ranks per tensor-parallel group
  int64_t micro_batch_size = 4;
  int num_micro_batches = 4;
  Schedule schedule = Schedule::kOneFOneB;
  /// V, the chunks per stage (interleaved-1f1b: at least 2; pp·V chunks split the layers).
  int virtual_stages = 1;
  std::vector<bool> checkpoint;  ///< per entry of plan.stages (pp·V of them); empty for none
  /// Partial checkpointing: per entry of plan.stages, the positions (from the entry's first
  /// layer) of the layers it recomputes; empty for none.
  std::vector<std::vector<int>> recompute_positions;
  OptimizerSettings optimizer = test_optimizer();

  /// SGD at lr 0.05 for a global batch of 16, one warm-up step, cosine to 0.1 of it.
  static OptimizerSettings test_optimizer();
};

/// mlp_tiny with micro-batches of 4 and a global batch of 16 over `dp` replicas of `pp` stages.
TestPlanSpec split_spec(int dp, int pp, Schedule schedule = Schedule::kOneFOneB);

/// A valid plan for `spec` on CPU: stages (pp·V chunks under interleaved-1f1b) split as evenly as
/// layers allow, boundary shapes and dtypes found by running the model once, rank =
/// (replica·pp + stage)·tp + tp rank, predictions all zero.
Plan make_test_plan(const TestPlanSpec& spec);

/// How one rank process ended.
struct RankExit {
  int exit_code = -1;  ///< -1 when it was killed (timeout)
  std::string stderr_text;
};

/// Starts `world_size` processes of the built `pipeplan` with `args` (after the program name),
/// each with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, a free MASTER_PORT,
/// OMP_NUM_THREADS=1 and `env`; waits for all of them. When any has not ended after
/// `timeout_s`, kills every one still running. With `world_size` 0, starts one process
/// without any rendezvous variable; with `only_rank` >= 0, starts only that rank.
std::vector<RankExit> run_ranks(int world_size, const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env = {},
                                int timeout_s = 120, int only_rank = -1);

/// A fresh empty folder under the build tree, named after the running test.
std::string fresh_dir(const std::string& name);

/// The JSON objects of a JSON-lines file.
std::vector<Json> read_json_lines(const std::string& path);

/// The "loss" of each step line of a steps.jsonl, in step order.
std::vector<double> step_losses(const std::string& log_path);

/// All rank exits as text, for failure messages.
std::string describe(const std::vector<RankExit>& exits);

/// The --seed every train() run uses.
inline constexpr uint64_t kTrainSeed = 7;

/// The files of one `pipeplan train` run in one folder.
struct TrainRun {
  std::string dir;
  std::string log;
  std::string run_json;
  std::string checkpoints;
  std::vector<RankExit> exits;
};

/// The run files in `dir` (steps.jsonl, run.json, checkpoints/).
TrainRun in_dir(const std::string& dir);

/// Writes `plan` into `run->dir` and trains it for `steps` on synthetic data with kTrainSeed on
/// its dp·tp·pp ranks (one process without rendezvous variables when that is 1).
void train(TrainRun* run, const Plan& plan, int steps, std::vector<std::string> extra_args = {},
           const std::map<std::string, std::string>& env = {});

/// train() in a fresh folder named `name`.
TrainRun train_new(const Plan& plan, const std::string& name, int steps,
                   std::vector<std::string> extra_args = {});

/// Every rank exited 0.
void expect_success(const std::vector<RankExit>& exits);
void expect_success(const TrainRun& run);

/// Every layer's parameters at the checkpoint of `step`, from all `pp` stage files (under
/// interleaved-1f1b each holds all of its stage's chunks).
std::map<std::string, torch::Tensor> final_parameters(const TrainRun& run, int pp, int64_t step);

/// The same per-step losses, to `relative` of the expected ones.
void expect_same_losses(const std::vector<double>& actual, const std::vector<double>& expected,
                        double relative, const std::string& what);

/// The same tensors by name, each within `relative` and `absolute` (torch::allclose) of the
/// expected one; a failure names the tensor and its largest difference.
void expect_same_parameters(const std::map<std::string, torch::Tensor>& actual,
                            const std::map<std::string, torch::Tensor>& expected,
                            const std::string& what, double relative = 1e-5,
                            double absolute = 1e-6);

/// `pipeplan compare` of `dir`/plan.json against `dir`/run.json (into `dir`/compare.json): each
/// of the `pp` stages' peak memory within `percent` of its prediction.
void expect_memory_predicted(const std::string& dir, int pp, double percent);

/// stderr of a refused run: exactly one line, "pipeplan: error: ..." containing `needle`, and
/// the exit code `exit_code`.
void expect_one_line_error(const RankExit& exit, int exit_code, const std::string& needle);

}  // namespace pipeplan::testing
