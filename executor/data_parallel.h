// Data parallelism of one stage over its replicas (plan.data_parallel), as PyTorch DDP and
// DeepSpeed's ZeRO-1 do it: gradient buckets over the flat buffers, their all-reduces (ZeRO-1:
// reduce-scatters) started from autograd hooks while the last backward runs, the replica's shard
// of the optimizer, and ZeRO-1's all-gather of the updated parameters.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "executor/comm.h"
#include "executor/stage.h"
#include "plans/plan.h"
#include "plans/schedule.h"
#include "runtime/optimizer.h"

namespace pipeplan::executor {

/// One gradient bucket of a stage: layers [first_layer, last_layer) of StageRuntime::layers(),
/// all of local chunk `chunk`, whose parameters (those the flat buffers hold at these layers)
/// are the contiguous elements [offset, offset + elements) of the flat parameters and gradients.
struct FlatBucket {
  int chunk = 0;
  int first_layer = 0;
  int last_layer = 0;
  int64_t offset = 0;
  int64_t elements = 0;        ///< parameters without gradients included (their gradient stays 0)
  int64_t gradient_bytes = 0;  ///< of the trainable parameters: what gradient_buckets counted
  /// The trainable parameters the bucket holds (each once): its gradients are complete when
  /// every one of their gradient accumulators has run in the chunk's last backward.
  std::vector<torch::Tensor> parameters;
};

/// The buckets of every chunk of `stage` (built from `plan`), cut by plans/buckets.h's
/// gradient_buckets at plan.data_parallel.bucket_bytes from each layer's trainable gradient
/// bytes (a parameter shared by layers, or by chunks, counts at the layer whose place in the
/// flat buffers holds it), in the order they are started: chunk by chunk in the order their last
/// weight-gradient actions appear in `actions` (this rank's list; a chunk without one last), each
/// chunk's buckets from its last layers to its first. Together they cover the flat buffers once.
std::vector<FlatBucket> flat_buckets(const Plan& plan, StageRuntime& stage,
                                     const std::vector<Action>& actions);

/// ZeRO-1: what replica `replica` of `dp` steps: piece `replica` of every bucket
/// (shard_pieces), in bucket order, as optimizer segments of `stage`'s flat buffers.
std::vector<runtime::FlatSegment> shard_segments(const std::vector<FlatBucket>& buckets,
                                                 StageRuntime& stage, int replica, int dp);

/// The replicas' exchanges of one rank (dp > 1; with dp = 1 every call is a no-op).
///
/// Without overlap, reduce() starts every bucket's collective and waits for them. With
/// plan.data_parallel.overlap, the chunk's last weight-gradient compute (micro-batch m − 1's
/// backward, or zb-h1's W: the action its kAllReduceStart follows) runs after arm(), and the
/// kAllReduceStart calls disarm(): meanwhile a post-hook on each trainable parameter's gradient
/// accumulator counts it done, and a bucket whose parameters are all done starts at once, as
/// DDP's reducer does. Buckets start strictly in flat_buckets order (a ready
/// bucket waits for the ones before it), so every replica starts the same collectives in the same
/// order whatever order its hooks run in; disarm() starts the chunk's buckets whose parameters got
/// no gradient (nothing adds to a chunk's gradients after its last weight pass: a parameter tied
/// across chunks lives in the lowest chunk, whose last backward is the rank's last).
///
/// ZeRO-1 reduce-scatters each bucket instead, except buckets holding a gradient summed with
/// another stage (Comm::sum_over_tie, run by the optimizer step after this): those are
/// all-reduced, so that the tie's whole gradient is averaged on every replica before the stages
/// sum it, as in one process. Buckets without gradient bytes are not exchanged (every replica's
/// gradient there is 0, the average too).
class ReplicaSync {
 public:
  /// Hooks the parameters when the plan overlaps (dp > 1). `buckets` from flat_buckets.
  ReplicaSync(const Plan& plan, StageRuntime& stage, Comm& comm, std::vector<FlatBucket> buckets);
  ~ReplicaSync();
  ReplicaSync(const ReplicaSync&) = delete;
  ReplicaSync& operator=(const ReplicaSync&) = delete;

  /// Before the compute that chunk `chunk`'s kAllReduceStart follows: its hooks start buckets.
  void arm(int chunk);
  /// kAllReduceStart: starts the armed chunk's buckets not started yet, goes on unwaited.
  void disarm();
  /// kAllReduce: starts the buckets not started yet, waits for all, divides the gradients by dp.
  void reduce();
  /// kAllGather (ZeRO-1): every replica's updated pieces into every replica's flat parameters.
  void all_gather();
  /// Whether the gradients this replica steps (ZeRO-1: its shard; else all) are finite.
  bool gradients_finite() const;

 private:
  struct Hook;
  void parameter_done(size_t bucket);
  void start_ready();
  void start(size_t bucket);
  void reset();

  StageRuntime& stage_;
  Comm& comm_;
  std::vector<FlatBucket> buckets_;
  std::vector<BucketOp> ops_;  // by bucket
  std::vector<int> pending_;   // by bucket: parameters not yet done in the armed pass
  size_t next_ = 0;            // the next bucket to start
  int armed_chunk_ = -1;
  bool overlap_ = false;
  bool zero_ = false;
  int dp_ = 1;
  // The hooked gradient accumulators and the hooks' keys, to remove them when done.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace pipeplan::executor
