// Synthetic profiles for the planner benchmarks: a GPT-like stack of layers with plausible
// times and sizes on an H100-class device, deterministic from a seed.
#pragma once

#include <cstdint>

#include "plans/profile.h"

namespace pipeplan::bench {

/// Shape of the synthetic model.
struct SyntheticModel {
  int num_layers = 1000;    ///< embedding + blocks + head
  int64_t hidden = 2048;    ///< width of a block
  int64_t sequence = 1024;  ///< tokens per sample
  int num_batch_sizes = 8;  ///< profiled at 1, 2, 4, ... 2^(n−1)
  uint64_t seed = 1;
};

/// A valid profile of `model` (device "cuda", interconnect measured at 100 GB/s, 20 µs), with
/// the B/W split of the backward (bwd_input_ms, bwd_weight_ms) at every point.
Profile synthetic_profile(const SyntheticModel& model);

}  // namespace pipeplan::bench
