// DDP-style gradient buckets over one chunk's layers, last layer first.
#include "plans/buckets.h"

#include "common/error.h"

namespace pipeplan {

std::vector<GradientBucket> gradient_buckets(const std::vector<int64_t>& layer_gradient_bytes,
                                             int64_t bucket_bytes) {
  PIPEPLAN_ASSERT(bucket_bytes > 0, "a bucket holds some bytes");
  std::vector<GradientBucket> buckets;
  const int layers = static_cast<int>(layer_gradient_bytes.size());
  GradientBucket open{layers, layers, 0};
  for (int layer = layers - 1; layer >= 0; --layer) {
    open.first = layer;
    open.bytes += layer_gradient_bytes[layer];
    if (open.bytes >= bucket_bytes) {
      buckets.push_back(open);
      open = {layer, layer, 0};
    }
  }
  if (open.first < open.last) {
    if (open.bytes == 0 && !buckets.empty())
      buckets.back().first = open.first;
    else
      buckets.push_back(open);
  }
  return buckets;
}

}  // namespace pipeplan
