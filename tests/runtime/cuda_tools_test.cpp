// Tests for runtime/cuda_tools.h (CUDA toolkit only): the busy-time arithmetic everywhere, and on
// a GPU, CUDA-event wall times against CUPTI kernel times of cuBLAS matrix products.
#include "runtime/cuda_tools.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace pipeplan::runtime::cuda {
namespace {

constexpr uint64_t kMs = 1000000;  // nanoseconds

TEST(CudaToolsTest, BusyTimeMergesOverlapsAndClipsToTheWindow) {
  // [0,2] and [1,3] overlap (3 ms busy); [5,6] lies inside; [9,12] is clipped at 10.
  const std::vector<std::pair<uint64_t, uint64_t>> kernels = {
      {9 * kMs, 12 * kMs}, {1 * kMs, 3 * kMs}, {0, 2 * kMs}, {5 * kMs, 6 * kMs}};
  EXPECT_DOUBLE_EQ(busy_ms(kernels, 0, 10 * kMs), 5.0);
  EXPECT_DOUBLE_EQ(busy_ms(kernels, 2 * kMs, 4 * kMs), 1.0);
  EXPECT_DOUBLE_EQ(busy_ms(kernels, 13 * kMs, 20 * kMs), 0.0);
  EXPECT_DOUBLE_EQ(busy_ms({}, 0, kMs), 0.0);
}

// C = A·B for n×n matrices on `stream`, `count` times.
class Gemm {
 public:
  Gemm(int n, cudaStream_t stream) : n_(n) {
    const size_t bytes = sizeof(float) * n * n;
    for (float** matrix : {&a_, &b_, &c_}) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(matrix), bytes), cudaSuccess);
      EXPECT_EQ(cudaMemset(*matrix, 0, bytes), cudaSuccess);
    }
    EXPECT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasSetStream(handle_, stream), CUBLAS_STATUS_SUCCESS);
  }
  ~Gemm() {
    cublasDestroy(handle_);
    for (float* matrix : {a_, b_, c_}) cudaFree(matrix);
  }
  void run(int count) {
    const float one = 1.0f;
    const float zero = 0.0f;
    for (int idx = 0; idx < count; ++idx)
      cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, n_, n_, n_, &one, a_, n_, b_, n_, &zero, c_,
                  n_);
  }

 private:
  int n_;
  float* a_ = nullptr;
  float* b_ = nullptr;
  float* c_ = nullptr;
  cublasHandle_t handle_ = nullptr;
};

TEST(CudaToolsTest, GpuInfoNamesTheDevice) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const GpuInfo info = gpu_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.total_bytes, 0);
  EXPECT_GT(info.free_bytes, 0);
  EXPECT_LE(info.free_bytes, info.total_bytes);
}

TEST(CudaToolsTest, GpuKernelTimeLiesWithinWallTimeAndScalesWithWork) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    Gemm gemm(/*n=*/2048, stream);
    WindowTimer timer(/*device_index=*/0, stream);
    ASSERT_EQ(timer.kernel_records_error(), "");
    gemm.run(/*count=*/2);  // warm-up: cuBLAS picks and loads its kernels
    timer.start();
    gemm.run(/*count=*/4);
    const double four_wall_ms = timer.stop_ms();
    timer.start();
    gemm.run(/*count=*/8);
    const double eight_wall_ms = timer.stop_ms();
    const auto kernel_ms = timer.take_kernel_ms();
    ASSERT_TRUE(kernel_ms.has_value());
    ASSERT_EQ(kernel_ms->size(), 2u);
    EXPECT_GT((*kernel_ms)[0], 0.0);
    EXPECT_LE((*kernel_ms)[0], four_wall_ms * 1.02);
    EXPECT_LE((*kernel_ms)[1], eight_wall_ms * 1.02);
    EXPECT_NEAR((*kernel_ms)[1] / (*kernel_ms)[0], 2.0, 0.3);
    EXPECT_EQ(timer.take_kernel_ms()->size(), 0u);  // taken windows are gone
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace pipeplan::runtime::cuda
