// `pipeplan infer` for one rank: checks an inference plan, loads the weights (a training
// checkpoint, any split, or the seeded init), streams requests forward through the pipeline,
// measures them and (rank 0) writes run.json.
#pragma once

#include <cstdint>
#include <string>

#include "executor/trainer.h"

namespace pipeplan::executor {

/// Most requests one run may have (--requests): far above any real run, small enough that
/// request numbers times micro-batches never overflow.
inline constexpr int64_t kMaxInferRequests = 1'000'000;

/// The flags of `pipeplan infer` (docs/usage.md, Every flag); its seed is the seeded init's (the
/// same seed: a training run's start) and the synthetic data's.
struct InferOptions : RankOptions {
  int64_t requests = 50;  ///< requests to serve, in [1, kMaxInferRequests]
  /// Requests left out of the statistics (allocator and cache warm-up), < requests.
  int64_t warmup_requests = 3;
  std::string checkpoint_dir;  ///< a training run's --checkpoint-dir; "" for the seeded init
  /// Internal (tests): the last stage's outputs of the first requests, by request and global
  /// micro-batch ("r0.g3"), as a torch archive; with dp > 1 each replica writes PATH.replica-R.
  std::string outputs_path;
};

/// Runs this process's rank (from RANK, WORLD_SIZE, ...) of the inference `options` describe.
///
/// Request r takes global_batch samples of the test split (in order, wrapping around); replica
/// k serves the k-th dp-th of them in num_micro_batches micro-batches. Each rank runs
/// expand_forward_only's order request after request without waiting between them, so stage 0
/// starts request r + 1 as soon as it has sent request r's micro-batches (a pipeline).
///
/// Latency of request r: from stage 0's first forward (its data load) to the last stage's last
/// output of r, over all replicas. Ranks take a common time origin right after a barrier; stage
/// 0 stamps each request's start and the last stage its end, each on its own steady clock from
/// that origin, and rank 0 combines them. The error is the barrier's release skew (microseconds
/// on one machine, one message latency across machines), not the clocks' offset.
///
/// Test accuracy (on the whole test split, after the requests) is measured when the weights are
/// trained (--checkpoint) or the data is a real data set; for synthetic data with the seeded
/// init there is none. Bad input (flags, a training plan, a checkpoint of another model or
/// missing a tensor) throws Error(kBadInput) before any rank waits where possible.
void infer(const InferOptions& options);

}  // namespace pipeplan::executor
