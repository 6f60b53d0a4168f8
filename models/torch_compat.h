// The one place where LibTorch 1.13 and 2.x differ for pipeplan; everything else calls these.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>

#ifdef PIPEPLAN_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace pipeplan::compat {

/// True when built against LibTorch 2.x or later.
inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

/// True when autocast takes the device type as an argument (LibTorch 2.4 on); before, CUDA
/// autocast had its own functions (`set_enabled`, `set_autocast_gpu_dtype`).
#define PIPEPLAN_AUTOCAST_BY_DEVICE \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

/// RAII: CUDA autocast to `dtype` (kBFloat16 or kHalf) on this thread, as PyTorch's
/// `torch.autocast("cuda", dtype)` does; restores the previous state and, when leaving the
/// outermost autocast region, frees the cached low-precision weight copies.
class CudaAutocastScope {
 public:
  explicit CudaAutocastScope(at::ScalarType dtype) {
#if PIPEPLAN_AUTOCAST_BY_DEVICE
    was_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
    was_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
    at::autocast::increment_nesting();
  }
  ~CudaAutocastScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if PIPEPLAN_AUTOCAST_BY_DEVICE
    at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
#else
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
#endif
  }
  CudaAutocastScope(const CudaAutocastScope&) = delete;
  CudaAutocastScope& operator=(const CudaAutocastScope&) = delete;

 private:
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kHalf;
};

#ifdef PIPEPLAN_HAS_CUDA
/// The CUDA caching allocator's own counters for one device, in bytes.
struct CudaAllocatorBytes {
  int64_t allocated = 0;       ///< in live blocks now
  int64_t peak_allocated = 0;  ///< highest `allocated` since the last cuda_reset_peak
  int64_t reserved = 0;        ///< obtained from cudaMalloc and held (live or cached)
};

/// Reads the aggregate statistics (all pools) of `device_index`. The statistics type and its
/// StatType enum moved namespaces in 2.x; AGGREGATE is index 0 in every version.
inline CudaAllocatorBytes cuda_allocator_bytes(int device_index) {
  constexpr size_t kAggregate = 0;
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
  CudaAllocatorBytes bytes;
  bytes.allocated = stats.allocated_bytes[kAggregate].current;
  bytes.peak_allocated = stats.allocated_bytes[kAggregate].peak;
  bytes.reserved = stats.reserved_bytes[kAggregate].current;
  return bytes;
}

/// Sets the allocator's peak statistics of `device_index` to their current values.
inline void cuda_reset_peak(int device_index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
}
#endif

}  // namespace pipeplan::compat
