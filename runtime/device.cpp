// The device that profiling and training run on: flags, facts, timers, memory, autocast.
#include "runtime/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <chrono>
#include <fstream>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/log.h"

#ifdef PIPEPLAN_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/cuda_tools.h"
#endif

namespace pipeplan::runtime {
namespace {

#ifdef __GLIBC__
// glibc's largest mmap threshold on 64-bit systems (DEFAULT_MMAP_THRESHOLD_MAX): blocks up to
// this size come from the heap, where freed ones are reused.
constexpr int kMmapThresholdBytes = 32 * 1024 * 1024;
constexpr int kNoTrimming = -1;  // M_TRIM_THRESHOLD: never give the heap's top back
#endif

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    if (begin != std::string::npos) return line.substr(begin);
  }
  return "unknown cpu";
}

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_bytes = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_bytes > 0 ? static_cast<int64_t>(pages) * page_bytes : 0;
}

DeviceProfile describe_host() {
  DeviceProfile profile;
  profile.kind = "cpu";
  profile.name = cpu_model_name();
  profile.cores = std::max(1u, std::thread::hardware_concurrency());
  profile.threads = at::get_num_threads();
  profile.memory_bytes = physical_memory_bytes();
  profile.runtime_overhead_bytes = 0;
  return profile;
}

class CpuTimer : public DeviceTimer {
 public:
  void start() override { start_ = std::chrono::steady_clock::now(); }
  double stop_ms() override {
    const auto stop = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(stop - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

#ifdef PIPEPLAN_HAS_CUDA
class CudaTimer : public DeviceTimer {
 public:
  explicit CudaTimer(int device_index)
      : timer_(
            device_index,
            c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_index)).stream()) {
    if (!timer_.kernel_records_error().empty())
      log_warning("no CUPTI kernel times (" + timer_.kernel_records_error() +
                  "); fwd_kernel_ms and bwd_kernel_ms are left out");
  }
  void start() override { timer_.start(); }
  double stop_ms() override { return timer_.stop_ms(); }
  std::optional<std::vector<double>> take_kernel_ms() override { return timer_.take_kernel_ms(); }

 private:
  cuda::WindowTimer timer_;
};

// Creates the cuBLAS and cuDNN handles and workspaces (forward and backward) so that the memory
// they keep outside the caching allocator is in place before it is measured.
void warm_up_cuda_libraries(const c10::Device& device) {
  const auto options = torch::TensorOptions().device(device);
  const torch::Tensor matrix = torch::randn({256, 256}, options).requires_grad_();
  const torch::Tensor image = torch::randn({2, 3, 32, 32}, options);
  const torch::Tensor filters = torch::randn({8, 3, 3, 3}, options).requires_grad_();
  (torch::mm(matrix, matrix).sum() + torch::conv2d(image, filters).sum()).backward();
}

DeviceProfile describe_cuda(const c10::Device& device) {
  const int index = device.index();
  const c10::cuda::CUDAGuard guard(device.index());
  warm_up_cuda_libraries(device);
  torch::cuda::synchronize(index);
  const cuda::GpuInfo info = cuda::gpu_info(index);
  const compat::CudaAllocatorBytes allocator = compat::cuda_allocator_bytes(index);
  DeviceProfile profile = describe_host();
  profile.kind = "cuda";
  profile.name = info.name;
  profile.memory_bytes = info.total_bytes;
  profile.runtime_overhead_bytes =
      std::max<int64_t>(0, info.total_bytes - info.free_bytes - allocator.reserved);
  return profile;
}
#endif

}  // namespace

c10::Device parse_device(const std::string& text) {
  if (text == "cpu") return c10::Device(c10::DeviceType::CPU);
  int index = 0;
  if (text != "cuda") {
    const bool cuda_n = text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8 &&
                        text.find_first_not_of("0123456789", 5) == std::string::npos;
    PIPEPLAN_CHECK(cuda_n, "--device: ", quote(text), " is not cpu, cuda or cuda:N");
    index = std::stoi(text.substr(5));
  }
#ifdef PIPEPLAN_HAS_CUDA
  const int count = static_cast<int>(torch::cuda::device_count());
  PIPEPLAN_CHECK(index < count, "--device: ", quote(text), " but this machine has ", count,
                 " CUDA device(s)");
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
  throw Error(ErrorKind::kBadInput,
              detail::concat("--device: ", quote(text), " needs a pipeplan built with CUDA ",
                             "(this LibTorch ", TORCH_VERSION, " is CPU-only); use --device cpu"));
#endif
}

void check_precision(const c10::Device& device, Precision precision) {
  PIPEPLAN_CHECK(device.is_cuda() || precision == Precision::kFp32,
                 "--precision: ", quote(to_string(precision)),
                 " needs --device cuda; the cpu is profiled in fp32 only");
}

std::string dtype_name(c10::ScalarType dtype) {
  using c10::ScalarType;
  static constexpr std::pair<ScalarType, const char*> kNames[] = {
      {ScalarType::Float, "float32"}, {ScalarType::Double, "float64"},
      {ScalarType::Half, "float16"},  {ScalarType::BFloat16, "bfloat16"},
      {ScalarType::Long, "int64"},    {ScalarType::Int, "int32"},
      {ScalarType::Short, "int16"},   {ScalarType::Char, "int8"},
      {ScalarType::Byte, "uint8"},    {ScalarType::Bool, "bool"}};
  for (const auto& [type, name] : kNames)
    if (type == dtype) return name;
  return c10::toString(dtype);
}

DeviceProfile describe_device(const c10::Device& device) {
#ifdef PIPEPLAN_HAS_CUDA
  if (device.is_cuda()) return describe_cuda(device);
#endif
  PIPEPLAN_ASSERT(device.is_cpu(), "device ", device.str());
  return describe_host();
}

void keep_freed_cpu_memory() {
#ifdef __GLIBC__
  ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  ::mallopt(M_TRIM_THRESHOLD, kNoTrimming);
#endif
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

void wait_for_stream(const c10::Device& device) {
  if (device.is_cuda())
    c10::impl::getDeviceGuardImpl(device.type())->getStream(device).synchronize();
}

std::unique_ptr<DeviceTimer> make_device_timer(const c10::Device& device) {
#ifdef PIPEPLAN_HAS_CUDA
  if (device.is_cuda()) return std::make_unique<CudaTimer>(device.index());
#endif
  PIPEPLAN_ASSERT(device.is_cpu(), "device ", device.str());
  return std::make_unique<CpuTimer>();
}

MemoryMeter::MemoryMeter(const c10::Device& device, std::shared_ptr<MemoryTracker> tracker)
    : device_(device), tracker_(std::move(tracker)) {}

void MemoryMeter::reset_peak() {
#ifdef PIPEPLAN_HAS_CUDA
  if (device_.is_cuda()) return compat::cuda_reset_peak(device_.index());
#endif
  tracker_->reset_peak();
}

int64_t MemoryMeter::current_bytes() const {
#ifdef PIPEPLAN_HAS_CUDA
  if (device_.is_cuda()) return compat::cuda_allocator_bytes(device_.index()).allocated;
#endif
  return tracker_->current_bytes(c10::DeviceType::CPU);
}

int64_t MemoryMeter::peak_bytes() const {
#ifdef PIPEPLAN_HAS_CUDA
  if (device_.is_cuda()) return compat::cuda_allocator_bytes(device_.index()).peak_allocated;
#endif
  return tracker_->peak_bytes(c10::DeviceType::CPU);
}

AutocastScope::AutocastScope(const c10::Device& device, Precision precision) {
  if (precision == Precision::kFp32) return;
  PIPEPLAN_ASSERT(device.is_cuda(), "autocast on ", device.str());
  cuda_.emplace(/*enabled=*/true, precision == Precision::kAmpBf16 ? at::kBFloat16 : at::kHalf);
}

}  // namespace pipeplan::runtime
