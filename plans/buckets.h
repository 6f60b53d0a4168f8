// Gradient buckets: which layers' gradients a replica all-reduces (or reduce-scatters) together,
// the rule the planner and the executor share.
#pragma once

#include <cstdint>
#include <vector>

namespace pipeplan {

/// Layers [first, last) of one chunk (indices into the list given to gradient_buckets) and the
/// gradient bytes they hold.
struct GradientBucket {
  int first = 0;
  int last = 0;
  int64_t bytes = 0;
};

/// PyTorch DDP's bucketing at layer granularity: walking a chunk's layers from the last to the
/// first (the order their gradients complete in a backward), a layer joins the open bucket,
/// which closes once it holds at least `bucket_bytes`. Returned in that order (the first bucket
/// holds the chunk's last layers). Layers without gradients join the bucket open when they are
/// reached; a last bucket without any gradient bytes merges into the one before it, so every
/// bucket but a lone all-empty one has bytes. One bucket covering every layer when
/// `bucket_bytes` is at least their sum; empty for no layers.
std::vector<GradientBucket> gradient_buckets(const std::vector<int64_t>& layer_gradient_bytes,
                                             int64_t bucket_bytes);

}  // namespace pipeplan
