// Checkpoints: one file per stage plus a manifest that makes a step's checkpoint complete.
//
//   DIR/step-00000010/stage-0.pt        written by the replica-0 rank of stage 0 (tmp + rename)
//   DIR/step-00000010/stage-1.pt        ...
//   DIR/step-00000010/checkpoint.json   written by rank 0 after a barrier: the step is complete
//   DIR/step-00000010/stage-1-shard-0.pt  ZeRO-1: replica 0 of stage 1's optimizer shard
//   DIR/step-00000010/stage-1-tp-1.pt     tensor parallelism: tp rank 1 of stage 1 (rank 0's is
//                                         stage-1.pt)
//
// A stage file holds the stage's parameters and buffers per layer ("layer3.fc.weight",
// "buffer3.running_mean"), the flat optimizer state ("optimizer.momentum", ...) and the plan
// hash, stage index, step and the checksum of its tensors. Under ZeRO-1 the stage file holds no
// optimizer state: each replica writes its shard's to a shard file of its own (same meta, plus
// the replica), and reads it back on resume, which is exact only with the same dp and zero. The
// manifest holds what every rank needs to continue: the step, the optimizer's step count, the fp16
// loss scale, the last loss, the test accuracies so far, every stage file's checksum, and a
// checksum of itself. Resuming and serving (pipeplan infer) verify all of them, so a flipped
// byte, a stage file of another step or an edited manifest is refused naming the file. Random
// numbers need no state: they are derived from (seed, step, micro-batch, layer).
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

inline constexpr const char* kCheckpointSchema = "pipeplan.checkpoint/2";

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
  /// Per stage index, the checksum save_stage_checkpoint returned for its file.
  std::vector<std::string> stage_checksums;
  /// The data-parallel settings the optimizer state was saved under (optional keys, written when
  /// dp > 0: dp 0 says "not recorded", as in manifests from before they were).
  int dp = 0;
  int zero = 0;
  /// ZeRO-1 (zero = 1): per stage, per replica, the checksum of its shard file; else empty.
  std::vector<std::vector<std::string>> shard_checksums;
  /// Tensor parallelism (optional keys, written when tp > 1): the group size the stage files
  /// were cut for (1 when absent), and per stage the checksum of each tp rank's file (rank 0's
  /// is stage_checksums' entry).
  int tp = 1;
  std::vector<std::vector<std::string>> tp_checksums;
  /// The model's name and content hash (ModelRef: name and configuration) the weights belong
  /// to (optional keys; "" in manifests from before they were written).
  std::string model_name;
  std::string model_hash;
};

/// "DIR/step-00000010".
std::string checkpoint_step_dir(const std::string& dir, int64_t step);
/// "DIR/step-00000010/stage-1.pt"; of tensor-parallel rank 2 above 0, "stage-1-tp-2.pt".
std::string checkpoint_stage_path(const std::string& dir, int64_t step, int stage_idx,
                                  int tp_rank = 0);
/// "DIR/step-00000010/stage-1-shard-0.pt": replica 0's optimizer shard of stage 1 (ZeRO-1).
std::string checkpoint_shard_path(const std::string& dir, int64_t step, int stage_idx, int replica);

/// Writes `stage`'s parameters, buffers and `optimizer` state (none when null) to the stage file
/// of `step`:
/// serialized in memory, then written with checked writes through a temporary file and a rename
/// (common/files.h). Returns the checksum of the tensors written, for the manifest. Throws
/// Error(kRuntime) naming the file and errno when it cannot write (a full disk); the temporary
/// file is then removed and earlier checkpoints are untouched.
/// With tensor parallelism each tp rank writes the file of its `tp_rank`: its shards, under the
/// whole parameters' names.
std::string save_stage_checkpoint(const std::string& dir, int64_t step,
                                  const std::string& plan_hash, StageRuntime& stage,
                                  const runtime::FlatOptimizer* optimizer, int tp_rank = 0);
/// Loads the stage file of `step` into `stage` and `optimizer` (null: no optimizer state) after
/// checking that it is a regular file (a FIFO would block the load), made for this plan, stage and
/// step, and that its tensors hash to `expected_checksum` (the manifest's record). Throws
/// Error(kBadInput) naming the file otherwise, or when it is unreadable or corrupt.
void load_stage_checkpoint(const std::string& dir, int64_t step, const std::string& plan_hash,
                           const std::string& expected_checksum, StageRuntime& stage,
                           runtime::FlatOptimizer* optimizer, int tp_rank = 0);
/// ZeRO-1: writes (as save_stage_checkpoint does) the state of `optimizer`, replica `replica`'s
/// shard of stage `stage_idx`, to its shard file; returns the checksum of its tensors.
std::string save_optimizer_shard(const std::string& dir, int64_t step, const std::string& plan_hash,
                                 int stage_idx, int replica,
                                 const runtime::FlatOptimizer& optimizer);
/// ZeRO-1: loads that shard file into `optimizer` with load_stage_checkpoint's checks (and the
/// replica's).
void load_optimizer_shard(const std::string& dir, int64_t step, const std::string& plan_hash,
                          int stage_idx, int replica, const std::string& expected_checksum,
                          runtime::FlatOptimizer& optimizer);

/// Writes the manifest (atomically), completing the checkpoint of `manifest.step`, and removes
/// all but the newest `keep` complete checkpoints, and every incomplete one (a step folder
/// without a manifest, left by a killed run or a full disk).
void write_checkpoint_manifest(const std::string& dir, const CheckpointManifest& manifest, int keep);
/// Reads the manifest of `step`; throws Error(kBadInput) naming the file and field when it is
/// corrupt: its checksum does not match (checked first), a value is none a run writes (a step
/// beyond total_steps, more optimizer or clean steps than steps, a loss scale that is no power of
/// two, an accuracy outside [0, 1], a checksum of another form), its step is not its folder's,
/// or it lists no checksum per stage (and with tp > 1, per stage and tp rank).
CheckpointManifest read_checkpoint_manifest(const std::string& dir, int64_t step);
/// The newest step with a manifest in `dir`, or 0 when there is none (or no folder). Entries
/// that are not "step-" and decimal digits (a stray "step-abc") are ignored.
int64_t latest_complete_checkpoint(const std::string& dir);

/// Loads every parameter and buffer of `stage` by name ("layer3.fc.weight", "buffer3.running_mean")
/// from whichever stage file of the checkpoint of `step` in `dir` (manifest `manifest`) holds it,
/// so that weights trained with one split serve another (pp=1 trained, pp=2 served). Each file is
/// checked as load_stage_checkpoint checks it: a regular file, its recorded step and checksum
/// the manifest's, and all its tensors hashing to that checksum. Throws Error(kBadInput) naming
/// the file when one is not, and the tensor when no file holds it or its shape differs.
void load_stage_weights_by_name(const std::string& dir, int64_t step,
                                const CheckpointManifest& manifest, StageRuntime& stage);
/// Every "layerN.*" tensor of a stage file, by name (for tests and tools).
std::map<std::string, torch::Tensor> read_checkpoint_parameters(const std::string& path);

}  // namespace pipeplan::executor
