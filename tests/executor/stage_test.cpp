// Tests for executor/stage.h.
#include "executor/stage.h"

#include <gtest/gtest.h>

#include "models/model.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::executor {
namespace {

TEST(StageTest, ParametersAreViewsOfOneFlatBuffer) {
  const Plan plan = testing::make_test_plan(testing::TestPlanSpec());
  const models::Model model = models::make_model("mlp_tiny");
  StageRuntime stage(model, plan, 0, torch::kCPU, /*seed=*/1);
  EXPECT_EQ(stage.parameters().numel(), models::parameter_count(model));
  stage.parameters().fill_(0.5);
  for (const models::LayerPtr& layer : stage.layers())
    for (const torch::Tensor& parameter : layer->parameters())
      EXPECT_TRUE(torch::all(parameter == 0.5).item<bool>());
}

// Forward and backward of the same micro-batches with and without checkpointing.
TEST(StageTest, CheckpointingGivesTheSameLossAndGradients) {
  testing::TestPlanSpec spec;
  const Plan plain_plan = testing::make_test_plan(spec);
  spec.checkpoint = {true};
  const Plan checkpoint_plan = testing::make_test_plan(spec);
  const models::Model model = models::make_model("mlp_tiny");
  StageRuntime plain(model, plain_plan, 0, torch::kCPU, /*seed=*/1);
  StageRuntime checkpointed(model, checkpoint_plan, 0, torch::kCPU, /*seed=*/1);
  const auto [input, target] = models::random_batch(model, 4, /*seed=*/2);
  plain.begin_iteration(2);
  checkpointed.begin_iteration(2);
  for (int mb = 0; mb < 2; ++mb) {
    const torch::Tensor a = plain.forward(mb, input, target, /*rng_seed=*/mb);
    const torch::Tensor b = checkpointed.forward(mb, input, target, /*rng_seed=*/mb);
    EXPECT_TRUE(torch::equal(a, b));
  }
  for (int mb = 0; mb < 2; ++mb) {
    plain.backward(mb, torch::Tensor(), 0.5);
    checkpointed.recompute(mb);
    checkpointed.backward(mb, torch::Tensor(), 0.5);
  }
  EXPECT_GT(plain.gradients().abs().sum().item<double>(), 0);
  EXPECT_TRUE(torch::equal(plain.gradients(), checkpointed.gradients()));
}

TEST(StageTest, MicroBatchSeedsDifferByStepAndMicroBatch) {
  EXPECT_EQ(micro_batch_seed(1, 2, 3), micro_batch_seed(1, 2, 3));
  EXPECT_NE(micro_batch_seed(1, 2, 3), micro_batch_seed(1, 3, 3));
  EXPECT_NE(micro_batch_seed(1, 2, 3), micro_batch_seed(1, 2, 4));
}

}  // namespace
}  // namespace pipeplan::executor
