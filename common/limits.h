// Limits: the largest values pipeplan accepts in its files and flags. They keep every sum and
// product the planner forms inside 64-bit integers (it counts whole nanoseconds and bytes) and
// every search and simulation of an accepted input under a second.
#pragma once

#include <cstdint>

namespace pipeplan {

/// The longest time a file may hold for one action, one micro-batch or one iteration, and the
/// longest a whole model may take per micro-batch when the planner extrapolates a profile:
/// 1e8 ms (about 28 hours). The planner counts whole nanoseconds in 64 bits (9.2e12 ms at
/// most); with at most kMaxMicroBatches micro-batches of a stage costing up to four such times
/// (forward and backward, recompute, two transfers), an iteration stays below 6.6e12 ms.
inline constexpr double kMaxTimeMs = 1e8;
/// The largest coefficient of variation of an action time a plan may carry (plan.json's fwd_cv,
/// bwd_cv). A profile taken on a loaded host can have a p90 many times its median; the planner
/// caps what it derives from it here, so that every plan it writes is one the readers accept.
inline constexpr double kMaxCoefficientOfVariation = 10;

/// The largest byte count a file may hold, a device may have, or a stage's sums may reach: 2^50
/// bytes (1 PiB). In-flight copies (at most kMaxMicroBatches) and per-parameter multiples keep
/// the memory model below 2^62.
inline constexpr int64_t kMaxBytes = int64_t{1} << 50;

/// The most layers a model may have: 2^16.
inline constexpr int kMaxLayers = 1 << 16;

/// The most devices (ranks) a cluster or plan may have: 2^14 = 16,384. The search builds a rank
/// map of every device for each candidate it evaluates; at 2^16 devices one search took 1.7 s.
inline constexpr int kMaxDevices = 1 << 14;

/// The largest global batch, micro-batch size or profiled batch size: 2^24 samples. The search
/// lists the divisors of the per-replica batch in O(sqrt(2^24)) = 4,096 steps.
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 24;

/// The most micro-batches of one iteration: 16,384 (a global batch of 16,384 in micro-batches of
/// one sample). The simulator plays about four actions per micro-batch and stage, more than once
/// when action times vary; a plan of 1e7 micro-batches made `simulate` grow past 6 GB.
inline constexpr int kMaxMicroBatches = 1 << 14;

/// The most micro-batches times stages of one pipeline: 2^20 = 1,048,576 (e.g. 2,048
/// micro-batches of 512 stages, which the search picks among its best plans for 1,000 layers on
/// 1,024 devices). The simulator plays one pipeline per draw and folds the replicas in, so its
/// work grows with this product (timed by bench/planner_bench's BM_LargestAcceptedPipeline).
inline constexpr int kMaxPipelineMicroBatches = 1 << 20;

/// The most chunks a rank holds under interleaved-1f1b (Plan::virtual_stages). Megatron-LM
/// rarely goes past 4; each chunk adds two boundary transfers per micro-batch.
inline constexpr int kMaxVirtualStages = 8;

/// The smallest gradient bucket a plan may ask for: one float32 gradient.
inline constexpr int64_t kMinBucketBytes = 4;

/// The longest time a file may hold for a whole iteration (an iteration, a stage's compute over
/// its micro-batches): kMaxMicroBatches micro-batches of four actions of kMaxTimeMs, 6.6e12 ms,
/// still below the 9.2e12 ms of 64-bit nanoseconds.
inline constexpr double kMaxIterationMs = kMaxTimeMs * 4 * kMaxMicroBatches;

/// The slowest link bandwidth a file or flag may give: 1 byte/s (0 means "not measured").
inline constexpr double kMinBandwidthBytesPerS = 1;

/// The fastest: 1e18 bytes/s (1 EB/s), the stand-in for "unbounded" of latency-only calibration.
inline constexpr double kMaxBandwidthBytesPerS = 1e18;

/// The most optimizer steps a run may count: 2^40.
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;

/// The largest JSON file pipeplan reads: 1 GiB (a profile of kMaxLayers layers is ~100 MB).
inline constexpr int64_t kMaxJsonFileBytes = int64_t{1} << 30;

/// The deepest nesting of arrays and objects a JSON file may have: 64 (pipeplan's own files
/// nest at most 7 deep). Printing, copying and comparing a JSON value recurse once per level; a
/// file nested 100,000 deep overflowed the stack.
inline constexpr int kMaxJsonDepth = 64;

/// The largest steps log (`train --log`) that `--resume` reads back: 1 GiB (a line per step of
/// about 100 bytes).
inline constexpr int64_t kMaxLogFileBytes = int64_t{1} << 30;

/// The largest checkpoint stage file or TorchScript file pipeplan reads: 2^40 bytes (1 TiB).
inline constexpr int64_t kMaxTensorFileBytes = int64_t{1} << 40;

}  // namespace pipeplan
