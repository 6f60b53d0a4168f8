// Tests for runtime/memory_tracker.h: LibTorch's allocation reporting reaches the tracker.
#include "runtime/memory_tracker.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace pipeplan::runtime {
namespace {

TEST(MemoryTrackerTest, CountsCpuAllocationsAndFrees) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryTrackingScope scope(tracker);
  const int64_t before = tracker->current_bytes(c10::DeviceType::CPU);
  void* data = nullptr;
  {
    torch::Tensor t = torch::empty({1024, 256}, torch::kFloat32);  // 1 MiB
    data = t.data_ptr();
    EXPECT_EQ(tracker->current_bytes(c10::DeviceType::CPU) - before, 1024 * 256 * 4);
    EXPECT_TRUE(tracker->is_live(data));
  }
  EXPECT_EQ(tracker->current_bytes(c10::DeviceType::CPU), before);
  EXPECT_FALSE(tracker->is_live(data));
  EXPECT_GE(tracker->peak_bytes(c10::DeviceType::CPU) - before, 1024 * 256 * 4);
  tracker->reset_peak();
  EXPECT_EQ(tracker->peak_bytes(c10::DeviceType::CPU), tracker->current_bytes(c10::DeviceType::CPU));
}

TEST(MemoryTrackerTest, SeesWhatAutogradKeepsForBackward) {
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryTrackingScope scope(tracker);
  torch::Tensor x = torch::randn({64, 128}, torch::requires_grad());
  void* x_data = x.data_ptr();
  torch::Tensor y = torch::relu(x * 2.0);  // mul saves nothing of x for a scalar; relu saves y
  void* y_data = y.data_ptr();
  x = torch::Tensor();
  EXPECT_TRUE(tracker->is_live(x_data));  // still the leaf held by y's graph (AccumulateGrad)
  auto grad_fn = y.grad_fn();
  y = torch::Tensor();
  EXPECT_TRUE(tracker->is_live(y_data));  // relu's saved result
  grad_fn.reset();
  EXPECT_FALSE(tracker->is_live(y_data));
}

}  // namespace
}  // namespace pipeplan::runtime
