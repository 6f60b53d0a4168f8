// The one place where LibTorch 1.13 and 2.x differ for pipeplan; everything else calls these.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#ifdef PIPEPLAN_HAS_CUDA
#include <ATen/autocast_mode.h>
#endif

/// True when the LibTorch built against is at least MAJOR.MINOR.
#define PIPEPLAN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace pipeplan::compat {

/// True when built against LibTorch 2.x or later.
inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

/// The class c10d's Gloo and NCCL process groups derive from and that carries send, recv,
/// allreduce and barrier: `ProcessGroup` in 1.13, `Backend` in 2.x (where `ProcessGroup` became
/// a dispatcher over backends). Both take the same arguments for the calls pipeplan makes.
#if PIPEPLAN_TORCH_AT_LEAST(2, 0)
using CommGroup = c10d::Backend;
#else
using CommGroup = c10d::ProcessGroup;
#endif

/// RAII: runs the scope under CUDA autocast to `dtype` when `enabled` (a no-op otherwise) and
/// clears autocast's weight-cast cache when the outermost scope ends, as torch.autocast does.
/// Only CUDA builds can enable it.
class CudaAutocastScope {
 public:
  CudaAutocastScope(bool enabled, at::ScalarType dtype) : enabled_(enabled) {
    if (!enabled_) return;
#ifdef PIPEPLAN_HAS_CUDA
#if PIPEPLAN_TORCH_AT_LEAST(2, 4)
    previous_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
    previous_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
    at::autocast::increment_nesting();
#else
    TORCH_CHECK(false, "autocast to ", dtype, " needs a CUDA build of LibTorch");
#endif
  }

  ~CudaAutocastScope() {
    if (!enabled_) return;
#ifdef PIPEPLAN_HAS_CUDA
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if PIPEPLAN_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(at::kCUDA, previous_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
#else
    at::autocast::set_enabled(previous_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
#endif
#endif
  }

  CudaAutocastScope(const CudaAutocastScope&) = delete;
  CudaAutocastScope& operator=(const CudaAutocastScope&) = delete;

 private:
  bool enabled_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

}  // namespace pipeplan::compat
