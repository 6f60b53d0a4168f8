// Tests for executor/plan_checks.h: which CUDA device a rank uses, with a fake device count.
#include "executor/plan_checks.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/common/error_of.h"

namespace pipeplan::executor {
namespace {

std::string error_of(int planned_index, int visible_device_count) {
  return testing::error_of([&] {
    visible_cuda_index(planned_index, visible_device_count, "plan.json: ranks[1].device");
  });
}

TEST(ExecutorPlanChecksTest, OneVisibleDeviceIsCudaZeroWhateverThePlanSays) {
  // srun --gpus-per-task 1: every task sees its own GPU as cuda:0.
  for (int planned = 0; planned < 8; ++planned)
    EXPECT_EQ(visible_cuda_index(planned, /*visible_device_count=*/1, "f"), 0) << planned;
}

TEST(ExecutorPlanChecksTest, SeveralVisibleDevicesKeepThePlannedIndex) {
  EXPECT_EQ(visible_cuda_index(3, /*visible_device_count=*/8, "f"), 3);
  EXPECT_EQ(visible_cuda_index(0, /*visible_device_count=*/2, "f"), 0);
  EXPECT_EQ(error_of(2, 2),
            "plan.json: ranks[1].device: 'cuda:2' but this process sees 2 CUDA devices (check "
            "CUDA_VISIBLE_DEVICES)");
  EXPECT_NE(error_of(0, 0).find("sees no CUDA device"), std::string::npos);
}

}  // namespace
}  // namespace pipeplan::executor
