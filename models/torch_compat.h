// The one place where LibTorch 1.13 and 2.x differ for pipeplan; everything else calls these.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_set>

#ifdef PIPEPLAN_HAS_CUDA
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
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

namespace detail {
// TCPStoreOptions::useLibUV exists from 2.2 on (true by default from 2.4); these set it where it does.
template <typename Options>
auto set_use_libuv(Options* options, bool use_libuv, int) -> decltype(options->useLibUV = use_libuv, void()) {
  options->useLibUV = use_libuv;
}
template <typename Options>
void set_use_libuv(Options*, bool, long) {}
}  // namespace detail

/// A c10d TCPStore at `host` with `options`. 2.x serves it with libuv by default, but a LibTorch
/// built without libuv (Debian's 2.6) refuses that: then, or when the environment says
/// `USE_LIBUV=0` as it does to torch.distributed, the store uses c10d's classic server. Clients of
/// either server speak the same protocol.
inline c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host,
                                                        c10d::TCPStoreOptions options) {
  const char* use_libuv = std::getenv("USE_LIBUV");
  if (use_libuv != nullptr && std::string(use_libuv) == "0")
    detail::set_use_libuv(&options, false, 0);
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const c10::Error& e) {
    if (std::string(e.what()).find("without libuv") == std::string::npos) throw;
  }
  detail::set_use_libuv(&options, false, 0);
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

/// A LibTorch warning handler that prints each distinct warning once per process, as Python's
/// default filter does; LibTorch's own prints it every time, so a `warnings.warn` in a scripted
/// forward (torchvision's googlenet has one) would print at every micro-batch. 1.13 hands a
/// handler the location and the message, 2.x a c10::Warning.
class WarnOnce : public c10::WarningHandler {
 public:
#if PIPEPLAN_TORCH_AT_LEAST(2, 0)
  void process(const c10::Warning& warning) override {
    if (first(warning.msg())) c10::WarningHandler::process(warning);
  }
#else
  void process(const c10::SourceLocation& location, const std::string& message,
               bool verbatim) override {
    if (first(message)) c10::WarningHandler::process(location, message, verbatim);
  }
#endif

 private:
  bool first(const std::string& message) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return seen_.insert(message).second;
  }
  std::mutex mutex_;
  std::unordered_set<std::string> seen_;
};

/// Makes WarnOnce this process's warning handler (the setter moved namespaces in 2.x).
inline void warn_once_per_process() {
  static WarnOnce handler;
#if PIPEPLAN_TORCH_AT_LEAST(2, 0)
  c10::WarningUtils::set_warning_handler(&handler);
#else
  c10::Warning::set_warning_handler(&handler);
#endif
}

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
