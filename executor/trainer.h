// `pipeplan train` for one rank: checks the plan, joins the job, trains exactly as planned,
// evaluates, checkpoints and (rank 0) writes the log, run.json and the trace.
#pragma once

#include <cstdint>
#include <string>

namespace pipeplan::executor {

/// Most optimizer steps one run may have (--steps, --epochs × steps per epoch): a bound far
/// above any real run, below which step numbers and their products never overflow.
inline constexpr int64_t kMaxTrainSteps = 1'000'000'000;
/// Longest --timeout-s: a week.
inline constexpr double kMaxTimeoutS = 7 * 24 * 3600;

/// The flags `pipeplan train` and `pipeplan infer` share (docs/usage.md, Every flag).
struct RankOptions {
  std::string plan_path;
  std::string data = "fashion-mnist";  ///< fashion-mnist, cifar10, synthetic
  std::string data_dir;                ///< "" for the data set's default location
  uint64_t seed = 0;                   ///< model initialisation, data order, dropout
  std::string output_path;             ///< run.json (rank 0)
  double timeout_s = 300;              ///< rendezvous and every wait on a peer, (0, kMaxTimeoutS]
};

/// The flags of `pipeplan train` (docs/usage.md, Every flag).
struct TrainOptions : RankOptions {
  int64_t steps = 0;             ///< optimizer steps, <= kMaxTrainSteps; 0: count epochs
  int64_t epochs = 0;            ///< used when steps is 0; 0 and 0 mean one epoch
  std::string log_path;          ///< steps.jsonl, "" for none
  std::string checkpoint_dir;    ///< "" for no checkpoints
  int64_t checkpoint_every = 0;  ///< steps between checkpoints; 0: only at the end
  bool resume = false;           ///< continue from the latest complete checkpoint
  std::string trace_path;        ///< Chrome trace, "" for none
};

/// Runs this process's rank (from RANK, WORLD_SIZE, ...) of the training `options` describe.
/// Bad input (flags, plan, data, checkpoint) throws Error(kBadInput) before any rank waits on
/// another where possible; a failing or missing peer, a NaN or a timeout throws Error(kRuntime).
void train(const TrainOptions& options);

}  // namespace pipeplan::executor
