// Synthetic profiles for the planner benchmarks: a GPT-like stack of layers with plausible
// times and sizes on an H100-class device, deterministic from a seed.
#pragma once

#include <cstdint>
#include <vector>

#include "plans/profile.h"

namespace pipeplan::bench {

/// Shape of the synthetic model.
struct SyntheticModel {
  int num_layers = 1000;    ///< embedding + blocks + head
  int64_t hidden = 2048;    ///< width of a block
  int64_t sequence = 1024;  ///< tokens per sample
  int num_batch_sizes = 8;  ///< profiled at 1, 2, 4, ... 2^(n−1)
  uint64_t seed = 1;
  /// Tensor-parallel sizes each block has a shard at (heads = hidden / 64 must be divisible).
  std::vector<int> tp_sizes = {2, 4, 8};
};

/// A valid profile of `model` (device "cuda", interconnect measured at 100 GB/s, 20 µs), with
/// the B/W split of the backward (bwd_input_ms, bwd_weight_ms) at every point, and each block's
/// shard at each of `tp_sizes`: 1/tp of its parameters and of the compute that splits (all but
/// kReplicatedComputeShare), 5% slower per doubling of tp (smaller matmuls), and 1/tp of its
/// retained bytes except the layer norms' and residual's inputs.
Profile synthetic_profile(const SyntheticModel& model);

}  // namespace pipeplan::bench
