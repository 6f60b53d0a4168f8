// CUDA-toolkit-only helpers for device timing (no LibTorch): device facts, CUDA-event wall time
// and CUPTI kernel activity records. Built whenever CMake finds CUPTI, so it is compile-checked
// even where LibTorch has no CUDA; LibTorch's CUDA path drives it with its own streams.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pipeplan::runtime::cuda {

/// What the CUDA runtime says about one device.
struct GpuInfo {
  std::string name;         ///< e.g. "NVIDIA H100 80GB HBM3"
  int64_t total_bytes = 0;  ///< device memory capacity
  int64_t free_bytes = 0;   ///< cudaMemGetInfo's free bytes now (all processes count)
};

/// Number of CUDA devices this process can use; 0 when there is no driver or no device.
int device_count();

/// Facts of device `device_index`. Throws Error(kRuntime) naming the CUDA error on failure.
GpuInfo gpu_info(int device_index);

/// Times windows of work on one CUDA device. Wall time comes from CUDA events on `stream`; GPU
/// busy time comes from CUPTI kernel activity records: the union of the kernel intervals of the
/// device inside each window, which on one stream equals the sum of kernel durations and never
/// counts launch gaps. Every start() and stop() synchronises the device, so a window holds
/// exactly the work launched between them. One timer records kernels at a time (CUPTI's activity
/// buffers are process-wide).
class WindowTimer {
 public:
  /// `stream` is the cudaStream_t the work is queued on (void* keeps CUDA out of this header);
  /// nullptr is the legacy default stream. Enables CUPTI kernel records if it can.
  WindowTimer(int device_index, void* stream);
  ~WindowTimer();
  WindowTimer(const WindowTimer&) = delete;
  WindowTimer& operator=(const WindowTimer&) = delete;

  /// Waits for the device to be idle, then opens a window.
  void start();
  /// Closes the window, waits for its work, and returns its wall time in milliseconds.
  double stop_ms();
  /// GPU busy milliseconds of each window closed since the last call, in order; nullopt when
  /// CUPTI could not be enabled (see kernel_records_error()).
  std::optional<std::vector<double>> take_kernel_ms();
  /// Why CUPTI kernel records are unavailable, or "" when they work.
  const std::string& kernel_records_error() const { return cupti_error_; }

 private:
  struct Events;
  int device_index_;
  void* stream_;
  std::unique_ptr<Events> events_;
  std::string cupti_error_;
  uint64_t window_begin_ns_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> windows_ns_;  ///< closed, not yet taken
};

/// Busy time (milliseconds) inside [begin_ns, end_ns] of the union of `intervals_ns`: the
/// intervals are clipped to the window and overlaps count once. Exposed for tests.
double busy_ms(std::vector<std::pair<uint64_t, uint64_t>> intervals_ns, uint64_t begin_ns,
               uint64_t end_ns);

}  // namespace pipeplan::runtime::cuda
