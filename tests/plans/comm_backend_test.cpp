// Tests for plans/comm_backend.h.
#include "plans/comm_backend.h"

#include <gtest/gtest.h>

#include "tests/plans/test_plan.h"

namespace pipeplan {
namespace {

TEST(CommBackendTest, FollowsTheRankMapDevices) {
  Plan plan = testing::make_test_plan(/*dp=*/2, /*pp=*/1, /*num_micro_batches=*/2,
                                      Schedule::kOneFOneB);
  EXPECT_EQ(choose_backend(plan), CommBackend::kGloo);
  plan.cluster.device_kind = "cuda";
  plan.ranks[0].device = "cuda:0";
  plan.ranks[1].device = "cuda:1";
  EXPECT_EQ(choose_backend(plan), CommBackend::kNccl);
  plan.ranks[1].device = "cuda:0";
  EXPECT_EQ(choose_backend(plan), CommBackend::kGlooHostStaging);
  plan.ranks[1].node = 1;
  EXPECT_EQ(choose_backend(plan), CommBackend::kNccl);
  EXPECT_EQ(choose_backend(testing::make_test_plan(1, 1, 2, Schedule::kGpipe)),
            CommBackend::kSingleProcess);
}

TEST(CommBackendTest, OnlyGlooSendsOccupyTheSender) {
  EXPECT_TRUE(send_occupies_sender(CommBackend::kGloo));
  EXPECT_TRUE(send_occupies_sender(CommBackend::kGlooHostStaging));
  EXPECT_FALSE(send_occupies_sender(CommBackend::kNccl));
  EXPECT_FALSE(send_occupies_sender(CommBackend::kSingleProcess));
  EXPECT_EQ(to_string(CommBackend::kGlooHostStaging), "gloo-host-staging");
}

}  // namespace
}  // namespace pipeplan
