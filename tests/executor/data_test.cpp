// Tests for executor/data.h: epoch order, micro-batch slicing and synthetic data.
#include "executor/data.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "models/zoo.h"

namespace pipeplan::executor {
namespace {

TEST(DataTest, EpochOrderIsASeededPermutation) {
  const auto order = epoch_order(100, /*seed=*/5, /*epoch=*/0);
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 100u);
  EXPECT_EQ(order, epoch_order(100, 5, 0));
  EXPECT_NE(order, epoch_order(100, 5, 1));
  EXPECT_NE(order, epoch_order(100, 6, 0));
}

TEST(DataTest, MicroBatchesTileTheGlobalBatchInTheSameOrderForAnySplit) {
  std::vector<int64_t> order(64);
  std::iota(order.begin(), order.end(), 0);
  // Global micro-batch r*m+k of size 4 in step 1 starts at 16 + 4*(r*m+k), whatever dp and m.
  for (auto [dp, m] : {std::pair{1, 4}, std::pair{2, 2}, std::pair{4, 1}}) {
    std::vector<int64_t> seen;
    for (int replica = 0; replica < dp; ++replica)
      for (int mb = 0; mb < m; ++mb) {
        const auto idx = micro_batch_indices(order, /*step_in_epoch=*/1, /*global_batch=*/16, dp,
                                             replica, m, mb);
        seen.insert(seen.end(), idx.begin(), idx.end());
      }
    std::vector<int64_t> expected(16);
    std::iota(expected.begin(), expected.end(), 16);
    EXPECT_EQ(seen, expected) << "dp=" << dp << " m=" << m;
  }
}

TEST(DataTest, SyntheticDataMatchesTheModelAndIsSeeded) {
  const models::Model model = models::make_model("mlp_tiny");
  const auto source = open_data("synthetic", "", model, /*seed=*/3);
  const auto [inputs, targets] = source->batch(Split::kTrain, {0, 5, 7});
  EXPECT_EQ(inputs.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(targets.sizes(), (std::vector<int64_t>{3}));
  EXPECT_TRUE(torch::equal(inputs, open_data("synthetic", "", model, 3)->batch(Split::kTrain, {0, 5, 7}).first));
  EXPECT_FALSE(torch::equal(inputs, open_data("synthetic", "", model, 4)->batch(Split::kTrain, {0, 5, 7}).first));
  EXPECT_THROW(open_data("imagenet", "", model, 3), Error);
}

}  // namespace
}  // namespace pipeplan::executor
