// One rank's start-up and shared state for `pipeplan train` and `pipeplan infer`: the checked
// plan and job, the data, the stage under memory tracking, the process groups, the recorder and
// the schedule interpreter, and what every rank then reports to rank 0.
#pragma once

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "executor/comm.h"
#include "executor/data.h"
#include "executor/interpreter.h"
#include "executor/metrics.h"
#include "executor/rendezvous.h"
#include "executor/stage.h"
#include "executor/trainer.h"
#include "models/model.h"
#include "plans/plan.h"
#include "runtime/memory_tracker.h"

namespace pipeplan::executor {

/// One rank of a run, built in the order a run needs it: the constructor checks everything that
/// is bad input (before any rank waits on another) and opens the data; build_stage() starts
/// memory tracking and builds the stage; connect() joins the job; start_interpreter() starts the
/// clock common to all ranks. Accessors of what is not built yet must not be called.
class RankSession {
 public:
  /// Reads RANK, WORLD_SIZE, ... and the plan; checks --timeout-s, that the plan is of `mode`
  /// (the command's) and the model's, the world size, this rank's device and that -o can be
  /// written; opens the data. Throws Error(kBadInput) naming the flag or field.
  RankSession(const RankOptions& options, PlanMode mode);

  /// Enters the rank's CUDA device, starts tracking memory and builds this rank's stage
  /// (seeded with options.seed).
  void build_stage();
  /// Rendezvous and the process groups (Comm::connect), waiting at most --timeout-s on a peer.
  void connect();
  /// Makes the recorder (its first `warmup_steps` steps unmeasured) and the interpreter
  /// (`training`: the parts a training iteration steps; none to serve), then a barrier after
  /// which every rank takes its time origin.
  void start_interpreter(int warmup_steps, std::optional<TrainingParts> training);

  /// The job's variables and the checked plan (from the constructor on).
  const RendezvousEnv& env() const { return env_; }
  const Plan& plan() const { return plan_; }
  /// plan_hash(plan()): what checkpoints and run.json name the plan by.
  const std::string& plan_hash() const { return plan_hash_; }
  /// The opened data set (from the constructor on).
  const DataSource& data() const { return *data_; }
  /// The memory tracker and the stage (from build_stage() on).
  runtime::MemoryTracker& tracker() { return *tracker_; }
  StageRuntime& stage() { return *stage_; }
  const StageRuntime& stage() const { return *stage_; }
  /// The process groups (from connect() on).
  Comm& comm() { return *comm_; }
  /// The recorder and the interpreter (from start_interpreter() on).
  Recorder& recorder() { return *recorder_; }
  const Recorder& recorder() const { return *recorder_; }
  Interpreter& interpreter() { return *interpreter_; }
  /// Whether this is rank 0, which writes the outputs.
  bool is_rank0() const { return env_.rank == 0; }
  /// This rank's replica in [0, dp) and stage in [0, pp).
  int replica() const { return plan_.ranks[env_.rank].replica; }
  int stage_idx() const { return plan_.ranks[env_.rank].stage; }
  /// This rank's place in its stage's tensor-parallel group, in [0, tp).
  int tp_rank() const { return plan_.ranks[env_.rank].tp_rank; }

  /// The (input, target) of the samples at `indices` of `split`, on this rank's device.
  std::pair<torch::Tensor, torch::Tensor> load(Split split,
                                               const std::vector<int64_t>& indices) const;
  /// The share of the test split predicted right by the stage's layers in evaluation mode (a
  /// training plan's go back to training mode after): each replica takes a contiguous dp-th of
  /// the split in micro-batches of micro_batch_size (the last may be short), one forward-only
  /// pass; the counts are summed over all ranks. `step`: the step the evaluation follows.
  double test_accuracy(int64_t step);
  /// The recorder's summary with the peak memory measured since the last reset_peak() (and on
  /// CUDA the allocator's peak).
  RankMeasurement measure_rank() const;
  /// Every rank's `report` (through the store, under `key`/<rank>): rank 0 gets them by rank,
  /// the others nothing. Every rank must call it with the same key.
  std::vector<Json> gather_reports(const std::string& key, const Json& report);

 private:
  RankOptions options_;
  PlanMode mode_;
  RendezvousEnv env_;
  Plan plan_;
  std::string plan_hash_;
  models::Model model_;
  torch::Device device_{torch::kCPU};
  std::optional<c10::DeviceGuard> device_guard_;
  // Declared before the tracking scope so that it is freed after the scope ends (freeing
  // memory allocated before tracking, while tracking, makes LibTorch print a warning).
  std::unique_ptr<DataSource> data_;
  std::shared_ptr<runtime::MemoryTracker> tracker_;
  std::unique_ptr<runtime::MemoryTrackingScope> tracking_;
  std::unique_ptr<StageRuntime> stage_;
  // This rank's tensor-parallel group: its split layers hold it from build_stage() on; connect()
  // gives it the group's all-reduce.
  models::TensorParallelGroupPtr tp_group_;
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<Interpreter> interpreter_;
};

}  // namespace pipeplan::executor
