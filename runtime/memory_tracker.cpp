// Memory accounting from LibTorch's allocation reporting.
#include "runtime/memory_tracker.h"

#include <algorithm>

namespace pipeplan::runtime {

void MemoryTracker::reportMemoryUsage(void* ptr, int64_t alloc_size, int64_t /*total_allocated*/,
                                      int64_t /*total_reserved*/, c10::Device device) {
  record(ptr, alloc_size, device);
}

void MemoryTracker::reportMemoryUsage(void* ptr, int64_t alloc_size, size_t /*total_allocated*/,
                                      size_t /*total_reserved*/, c10::Device device) {
  record(ptr, alloc_size, device);
}

int MemoryTracker::slot(c10::DeviceType type) { return type == c10::DeviceType::CUDA ? 1 : 0; }

void MemoryTracker::record(void* ptr, int64_t alloc_size, c10::Device device) {
  if (ptr == nullptr || alloc_size == 0) return;
  const int device_slot = slot(device.type());
  std::lock_guard<std::mutex> lock(mutex_);
  if (alloc_size > 0) {
    live_bytes_[ptr] = alloc_size;
    current_bytes_[device_slot] += alloc_size;
    peak_bytes_[device_slot] = std::max(peak_bytes_[device_slot], current_bytes_[device_slot]);
    return;
  }
  auto it = live_bytes_.find(ptr);
  if (it == live_bytes_.end()) return;  // allocated before tracking began
  current_bytes_[device_slot] -= it->second;
  live_bytes_.erase(it);
}

int64_t MemoryTracker::current_bytes(c10::DeviceType type) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_bytes_[slot(type)];
}

int64_t MemoryTracker::peak_bytes(c10::DeviceType type) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_bytes_[slot(type)];
}

void MemoryTracker::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int device_slot = 0; device_slot < kSlots; ++device_slot)
    peak_bytes_[device_slot] = current_bytes_[device_slot];
}

bool MemoryTracker::is_live(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_bytes_.count(ptr) > 0;
}

int64_t MemoryTracker::live_bytes(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_bytes_.find(ptr);
  return it == live_bytes_.end() ? 0 : it->second;
}

MemoryTrackingScope::MemoryTrackingScope(std::shared_ptr<MemoryTracker> tracker)
    : guard_(c10::DebugInfoKind::PROFILER_STATE, std::move(tracker)) {}

}  // namespace pipeplan::runtime
