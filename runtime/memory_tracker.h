// Memory accounting from LibTorch's own allocation reporting: every CPU and CUDA allocation and
// free that the allocators report while a tracker is installed as the profiler-state debug info.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace pipeplan::runtime {

/// Counts the bytes LibTorch allocates and frees while installed (see MemoryTrackingScope), per
/// device type. Only allocations made while tracking count: freeing memory allocated before
/// installation changes nothing, so create the tensors you want to watch inside the scope.
/// Thread-safe: autograd worker threads inherit the debug info and report here too.
class MemoryTracker : public c10::MemoryReportingInfoBase {
 public:
  bool memoryProfilingEnabled() const override { return true; }
  // LibTorch 1.13 reports totals as int64_t, 2.x as size_t; the overload that matches the
  // installed version overrides the pure virtual, the other is never called.
  void reportMemoryUsage(void* ptr, int64_t alloc_size, int64_t total_allocated,
                         int64_t total_reserved, c10::Device device);
  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t total_allocated,
                         size_t total_reserved, c10::Device device);

  /// Bytes allocated while tracking and not yet freed, on devices of `type`.
  int64_t current_bytes(c10::DeviceType type) const;
  /// Highest current_bytes(type) since installation or the last reset_peak().
  int64_t peak_bytes(c10::DeviceType type) const;
  /// Sets every device type's peak to its current bytes.
  void reset_peak();
  /// Whether the allocation starting at `ptr` was made while tracking and is still alive.
  bool is_live(const void* ptr) const;
  /// Size the allocator reported for the live tracked allocation starting at `ptr` (a storage's
  /// base pointer), or 0 when there is none.
  int64_t live_bytes(const void* ptr) const;

 private:
  void record(void* ptr, int64_t alloc_size, c10::Device device);
  static int slot(c10::DeviceType type);

  static constexpr int kSlots = 2;  // CPU, CUDA
  mutable std::mutex mutex_;
  std::unordered_map<const void*, int64_t> live_bytes_;
  int64_t current_bytes_[kSlots] = {0, 0};
  int64_t peak_bytes_[kSlots] = {0, 0};
};

/// RAII: installs `tracker` as this thread's profiler-state debug info until destroyed.
class MemoryTrackingScope {
 public:
  explicit MemoryTrackingScope(std::shared_ptr<MemoryTracker> tracker);

 private:
  c10::DebugInfoGuard guard_;
};

}  // namespace pipeplan::runtime
