// CUDA-toolkit-only helpers: device facts, CUDA-event windows and CUPTI kernel activity records.
#include "runtime/cuda_tools.h"

#include <cuda_runtime_api.h>
#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "common/error.h"

namespace pipeplan::runtime::cuda {
namespace {

// CUPTI asks for activity buffers of this size; records are ~200 bytes, so one buffer holds
// thousands of kernels and a layer's window rarely needs a second one.
constexpr size_t kActivityBufferBytes = 4 << 20;
constexpr size_t kActivityBufferAlignBytes = 8;
constexpr double kNsPerMs = 1e6;

void check_cuda(cudaError_t status, const char* what) {
  PIPEPLAN_RUNTIME_CHECK(status == cudaSuccess, what, " failed: ", cudaGetErrorString(status));
}

std::string cupti_message(CUptiResult status, const char* what) {
  const char* text = nullptr;
  if (cuptiGetResultString(status, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown";
  return detail::concat(what, " failed: ", text);
}

// The kernel records CUPTI delivers. CUPTI's buffers and callbacks are process-wide, so this is
// a singleton; WindowTimer enables it while it lives.
class KernelRecords {
 public:
  static KernelRecords& get() {
    static KernelRecords records;
    return records;
  }

  // Enables kernel records; returns "" on success or why not.
  std::string enable() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!registered_) {
      const CUptiResult status = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
      if (status != CUPTI_SUCCESS) return cupti_message(status, "cuptiActivityRegisterCallbacks");
      registered_ = true;
    }
    const CUptiResult status = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (status != CUPTI_SUCCESS) return cupti_message(status, "cuptiActivityEnable");
    return "";
  }

  void disable() { cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); }

  // Delivers every buffered record (the caller has synchronised the device) and hands over the
  // kernel intervals of `device_index` collected so far.
  std::vector<std::pair<uint64_t, uint64_t>> take(int device_index) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(mutex_);
    PIPEPLAN_RUNTIME_CHECK(dropped_ == 0, "CUPTI dropped ", dropped_, " kernel records");
    std::vector<std::pair<uint64_t, uint64_t>> mine;
    std::vector<Kernel> others;
    for (const Kernel& kernel : kernels_) {
      if (kernel.device == static_cast<uint32_t>(device_index))
        mine.emplace_back(kernel.start_ns, kernel.end_ns);
      else
        others.push_back(kernel);
    }
    kernels_ = std::move(others);
    return mine;
  }

 private:
  struct Kernel {
    uint32_t device;
    uint64_t start_ns;
    uint64_t end_ns;
  };

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer =
        static_cast<uint8_t*>(std::aligned_alloc(kActivityBufferAlignBytes, kActivityBufferBytes));
    *size = *buffer == nullptr ? 0 : kActivityBufferBytes;
    *max_records = 0;  // as many as fit
  }

  static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                        size_t /*size*/, size_t valid_bytes) {
    get().collect(context, stream_id, buffer, valid_bytes);
    std::free(buffer);
  }

  void collect(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t valid_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
          record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
        continue;
      // Every kernel record version from 4 on (CUDA 9 to 13) keeps start, end and deviceId at
      // the same offsets, so the oldest layout reads them all.
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel4*>(record);
      if (kernel->end > kernel->start)
        kernels_.push_back({kernel->deviceId, kernel->start, kernel->end});
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS)
      dropped_ += dropped;
  }

  std::mutex mutex_;
  bool registered_ = false;
  std::vector<Kernel> kernels_;
  size_t dropped_ = 0;
};

uint64_t cupti_now_ns() {
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  return now;
}

}  // namespace

struct WindowTimer::Events {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
};

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error for later callers
    return 0;
  }
  return count;
}

GpuInfo gpu_info(int device_index) {
  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, device_index), "cudaGetDeviceProperties");
  check_cuda(cudaSetDevice(device_index), "cudaSetDevice");
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  GpuInfo info;
  info.name = properties.name;
  info.total_bytes = static_cast<int64_t>(total_bytes);
  info.free_bytes = static_cast<int64_t>(free_bytes);
  return info;
}

WindowTimer::WindowTimer(int device_index, void* stream)
    : device_index_(device_index), stream_(stream), events_(std::make_unique<Events>()) {
  check_cuda(cudaSetDevice(device_index_), "cudaSetDevice");
  check_cuda(cudaEventCreate(&events_->start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&events_->stop), "cudaEventCreate");
  cupti_error_ = KernelRecords::get().enable();
  if (cupti_error_.empty()) (void)KernelRecords::get().take(device_index_);  // older records
}

WindowTimer::~WindowTimer() {
  if (cupti_error_.empty()) KernelRecords::get().disable();
  cudaEventDestroy(events_->start);
  cudaEventDestroy(events_->stop);
}

void WindowTimer::start() {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (cupti_error_.empty()) window_begin_ns_ = cupti_now_ns();
  check_cuda(cudaEventRecord(events_->start, static_cast<cudaStream_t>(stream_)),
             "cudaEventRecord");
}

double WindowTimer::stop_ms() {
  check_cuda(cudaEventRecord(events_->stop, static_cast<cudaStream_t>(stream_)), "cudaEventRecord");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (cupti_error_.empty()) windows_ns_.emplace_back(window_begin_ns_, cupti_now_ns());
  float elapsed_ms = 0;
  check_cuda(cudaEventElapsedTime(&elapsed_ms, events_->start, events_->stop),
             "cudaEventElapsedTime");
  return elapsed_ms;
}

std::optional<std::vector<double>> WindowTimer::take_kernel_ms() {
  if (!cupti_error_.empty()) return std::nullopt;
  const std::vector<std::pair<uint64_t, uint64_t>> kernels =
      KernelRecords::get().take(device_index_);
  std::vector<double> busy;
  busy.reserve(windows_ns_.size());
  for (const auto& [begin_ns, end_ns] : windows_ns_)
    busy.push_back(busy_ms(kernels, begin_ns, end_ns));
  windows_ns_.clear();
  return busy;
}

double busy_ms(std::vector<std::pair<uint64_t, uint64_t>> intervals_ns, uint64_t begin_ns,
               uint64_t end_ns) {
  std::sort(intervals_ns.begin(), intervals_ns.end());
  uint64_t busy_ns = 0;
  uint64_t covered_until = begin_ns;  // everything before this is counted already
  for (const auto& [start_ns, stop_ns] : intervals_ns) {
    const uint64_t from = std::max(start_ns, covered_until);
    const uint64_t to = std::min(stop_ns, end_ns);
    if (to <= from) continue;
    busy_ns += to - from;
    covered_until = to;
  }
  return static_cast<double>(busy_ns) / kNsPerMs;
}

}  // namespace pipeplan::runtime::cuda
