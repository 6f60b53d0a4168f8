// The device that profiling and training run on: parsing --device and --precision, device
// facts, timers, allocator-level memory readings and autocast, for the CPU and CUDA.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/torch_compat.h"
#include "plans/plan.h"
#include "runtime/memory_tracker.h"
#include "plans/profile.h"

namespace pipeplan::runtime {

/// Parses "cpu", "cuda" (device 0) or "cuda:N" and checks that this build and machine have it.
/// Throws Error(kBadInput) naming --device: unknown device, CUDA on a build without CUDA, no
/// such CUDA device.
c10::Device parse_device(const std::string& text);

/// Checks that `precision` can run on `device`: the CPU profiles fp32 only.
void check_precision(const c10::Device& device, Precision precision);

/// The dtype's name as profile.json writes it: "float32", "bfloat16", "float16", "int64", ...
std::string dtype_name(c10::ScalarType dtype);

/// Facts of the device: name, logical cores, intra-op threads in use (at::get_num_threads()),
/// memory capacity, and runtime overhead. On the CPU the overhead is 0: the executor compares
/// against the same allocator-tracked bytes this profile records, which exclude the process's
/// own code and libraries. On CUDA it is the device memory in use after CUDA, cuBLAS and cuDNN
/// initialisation that the caching allocator does not account for (cudaMemGetInfo's used bytes
/// minus the allocator's reserved bytes, after a warm-up matrix product and convolution); it
/// also counts other processes on the GPU, so profile on an otherwise idle one.
DeviceProfile describe_device(const c10::Device& device);

/// Makes this process's CPU allocations reuse freed memory instead of faulting in fresh pages:
/// glibc malloc keeps blocks up to 32 MiB on its heap and never returns the heap's free top to
/// the system. By default it gives memory back between a training step's backward and the next
/// forward, whose activations then page-fault at a cost that varies with the heap's layout:
/// noise a profile must not carry. profile_model calls it. The executor does not: its steps
/// reuse the heap anyway, so the setting does not change a run's step time
/// (bench/history/2026-11-22-sessions-1-3.md). The process keeps its peak heap.
/// No-op without glibc.
void keep_freed_cpu_memory();

/// Waits until all work queued on `device` is done (no-op on the CPU).
void synchronize(const c10::Device& device);
/// Waits for the work queued on `device`'s current stream (no-op on the CPU): what a
/// steady-clock interval around one action's compute needs, cheaper than synchronize.
void wait_for_stream(const c10::Device& device);

/// Times windows of work on a device.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  /// Waits for queued work, then starts a window.
  virtual void start() = 0;
  /// Ends the window, waiting for its work; returns its wall time in milliseconds.
  virtual double stop_ms() = 0;
  /// GPU kernel busy milliseconds (CUPTI) of each window closed since the last call, in order;
  /// nullopt on the CPU or where CUPTI is unavailable.
  virtual std::optional<std::vector<double>> take_kernel_ms() { return std::nullopt; }
};

/// A steady clock on the CPU; CUDA events and CUPTI kernel records on a CUDA device.
std::unique_ptr<DeviceTimer> make_device_timer(const c10::Device& device);

/// Bytes allocated on one device, by the allocator's own accounting: on the CPU the tracker's
/// count of allocations LibTorch reported while it was installed; on CUDA the caching
/// allocator's allocated-bytes statistics (every thread and stream counts, in block sizes).
/// Readings are meaningful as differences.
class MemoryMeter {
 public:
  MemoryMeter(const c10::Device& device, std::shared_ptr<MemoryTracker> tracker);
  /// Makes peak_bytes() start again from current_bytes().
  void reset_peak();
  int64_t current_bytes() const;
  /// Highest current_bytes() since the last reset_peak().
  int64_t peak_bytes() const;

 private:
  c10::Device device_;
  std::shared_ptr<MemoryTracker> tracker_;
};

/// RAII: autocast for `precision` on `device` (nothing for fp32).
class AutocastScope {
 public:
  AutocastScope(const c10::Device& device, Precision precision);

 private:
  std::optional<compat::CudaAutocastScope> cuda_;
};

}  // namespace pipeplan::runtime
