// Checkpoints: one file per stage plus a manifest that makes a step's checkpoint complete.
//
//   DIR/step-00000010/stage-0.pt        written by the replica-0 rank of stage 0 (tmp + rename)
//   DIR/step-00000010/stage-1.pt        ...
//   DIR/step-00000010/checkpoint.json   written by rank 0 after a barrier: the step is complete
//
// A stage file holds the stage's parameters and buffers per layer ("layer3.fc.weight",
// "buffer3.running_mean"), the flat optimizer state ("optimizer.momentum", ...) and the plan
// hash, stage index and step. The manifest holds what every rank needs to continue: the step,
// the optimizer's step count, the fp16 loss scale, the last loss and the test accuracies so
// far. Random numbers need no state: they are derived from (seed, step, micro-batch, layer).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "runtime/optimizer.h"
#include "executor/stage.h"
#include "plans/run.h"

namespace pipeplan::executor {

inline constexpr const char* kCheckpointSchema = "pipeplan.checkpoint/1";

/// The manifest of one complete checkpoint.
struct CheckpointManifest {
  std::string plan_hash;
  int64_t step = 0;             ///< optimizer steps done
  int64_t total_steps = 0;      ///< of the run it belongs to (the lr schedule depends on it)
  uint64_t seed = 0;
  std::string data;             ///< data set kind
  int pp = 1;
  int64_t optimizer_steps = 0;  ///< runtime::FlatOptimizer::steps_taken (fp16 may skip steps)
  double loss_scale = 1;
  int64_t loss_scale_clean_steps = 0;
  double loss = 0;              ///< global-batch loss of `step`
  std::vector<EpochAccuracy> test_accuracy;
};

/// "DIR/step-00000010".
std::string checkpoint_step_dir(const std::string& dir, int64_t step);
/// "DIR/step-00000010/stage-1.pt".
std::string checkpoint_stage_path(const std::string& dir, int64_t step, int stage_idx);

/// Writes `stage`'s parameters, buffers and `optimizer` state to the stage file of `step`
/// through a temporary file and a rename. Throws Error(kRuntime) when it cannot write.
void save_stage_checkpoint(const std::string& dir, int64_t step, const std::string& plan_hash,
                           StageRuntime& stage, const runtime::FlatOptimizer& optimizer);
/// Loads the stage file of `step` into `stage` and `optimizer`. Throws Error(kBadInput) naming
/// the file when it is unreadable or corrupt, or made for another plan or stage.
void load_stage_checkpoint(const std::string& dir, int64_t step, const std::string& plan_hash,
                           StageRuntime& stage, runtime::FlatOptimizer& optimizer);

/// Writes the manifest (atomically), completing the checkpoint of `manifest.step`, and removes
/// all but the newest `keep` complete checkpoints.
void write_checkpoint_manifest(const std::string& dir, const CheckpointManifest& manifest, int keep);
/// Reads the manifest of `step`; throws Error(kBadInput) naming the file when it is corrupt.
CheckpointManifest read_checkpoint_manifest(const std::string& dir, int64_t step);
/// The newest step with a manifest in `dir`, or 0 when there is none (or no folder).
int64_t latest_complete_checkpoint(const std::string& dir);

/// Every "layerN.*" tensor of a stage file, by name (for tests and tools).
std::map<std::string, torch::Tensor> read_checkpoint_parameters(const std::string& path);

}  // namespace pipeplan::executor
