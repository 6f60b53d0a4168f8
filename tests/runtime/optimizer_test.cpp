// Tests for runtime/optimizer.h: PyTorch's update rules, the lr schedule, loss scaling.
#include "runtime/optimizer.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace pipeplan::runtime {
namespace {

constexpr int64_t kGlobalBatch = 512;

OptimizerSettings schedule_settings() {
  OptimizerSettings s;
  s.base_lr = 0.1;  // peak 0.2 at a global batch of 512
  s.base_batch = 256;
  s.warmup_steps = 4;
  s.min_lr_fraction = 0.1;
  return s;
}

TEST(OptimizerTest, LearningRateWarmsUpLinearlyThenDecaysToItsFloor) {
  const OptimizerSettings s = schedule_settings();
  auto lr = [&](int64_t step) { return learning_rate(s, kGlobalBatch, step, /*total_steps=*/20); };
  EXPECT_DOUBLE_EQ(lr(1), 0.05);
  EXPECT_DOUBLE_EQ(lr(4), 0.2);
  EXPECT_NEAR(lr(12), 0.02 + 0.18 / 2, 1e-12);  // half way through the cosine
  EXPECT_NEAR(lr(20), 0.02, 1e-12);
  for (int64_t step = 5; step < 20; ++step) EXPECT_GT(lr(step), lr(step + 1));
}

// Runs `steps` updates of FlatOptimizer and of torch::optim `reference` from the same start.
template <typename Reference>
void expect_same_updates(const OptimizerSettings& settings, Reference make_reference) {
  torch::manual_seed(0);
  const torch::Tensor start = torch::randn({64});
  torch::Tensor flat = start.clone();
  torch::Tensor flat_grad = torch::zeros({64});
  FlatOptimizer mine(settings, flat, flat_grad);
  torch::Tensor theirs_param = start.clone().requires_grad_(true);
  auto theirs = make_reference(theirs_param);
  for (int step = 1; step <= 4; ++step) {
    const torch::Tensor grad = torch::randn({64});
    const double lr = 0.01 * step;
    flat_grad.copy_(grad);
    mine.step(lr);
    theirs_param.mutable_grad() = grad.clone();
    theirs.param_groups()[0].options().set_lr(lr);
    theirs.step();
    EXPECT_TRUE(torch::allclose(flat, theirs_param.detach(), 1e-6, 1e-7)) << "step " << step;
  }
  EXPECT_EQ(mine.steps_taken(), 4);
}

TEST(OptimizerTest, SgdFollowsTorchOptim) {
  OptimizerSettings s = OptimizerSettings::defaults_for(OptimizerKind::kSgd);
  expect_same_updates(s, [&](const torch::Tensor& p) {
    return torch::optim::SGD({p}, torch::optim::SGDOptions(1).momentum(s.momentum).weight_decay(s.weight_decay));
  });
  s.momentum = 0;
  expect_same_updates(s, [&](const torch::Tensor& p) {
    return torch::optim::SGD({p}, torch::optim::SGDOptions(1).weight_decay(s.weight_decay));
  });
}

TEST(OptimizerTest, AdamwFollowsTorchOptim) {
  const OptimizerSettings s = OptimizerSettings::defaults_for(OptimizerKind::kAdamw);
  expect_same_updates(s, [&](const torch::Tensor& p) {
    return torch::optim::AdamW({p}, torch::optim::AdamWOptions(1)
                                        .betas({s.beta1, s.beta2})
                                        .eps(s.eps)
                                        .weight_decay(s.weight_decay));
  });
}

// A CPU step goes through a long buffer a block at a time: every element updated as
// torch::optim updates one tensor (the same operations element by element, so to the bit), the
// last short block too, and the gradients left zero.
TEST(OptimizerTest, LongBuffersStepInBlocksAsTorchOptimStepsOneTensor) {
  const int64_t numel = 3 * (int64_t{1} << 18) + 1001;
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdamw}) {
    const OptimizerSettings s = OptimizerSettings::defaults_for(kind);
    torch::manual_seed(1);
    torch::Tensor flat = torch::randn({numel});
    torch::Tensor flat_grad = torch::zeros({numel});
    FlatOptimizer mine(s, flat, flat_grad);
    torch::Tensor theirs_param = flat.clone().requires_grad_(true);
    std::unique_ptr<torch::optim::Optimizer> theirs;
    if (kind == OptimizerKind::kSgd)
      theirs = std::make_unique<torch::optim::SGD>(
          std::vector<torch::Tensor>{theirs_param},
          torch::optim::SGDOptions(0.05).momentum(s.momentum).weight_decay(s.weight_decay));
    else
      theirs = std::make_unique<torch::optim::AdamW>(
          std::vector<torch::Tensor>{theirs_param},
          torch::optim::AdamWOptions(0.05).betas({s.beta1, s.beta2}).eps(s.eps).weight_decay(
              s.weight_decay));
    for (int step = 1; step <= 3; ++step) {
      const torch::Tensor grad = torch::randn({numel});
      flat_grad.copy_(grad);
      mine.step(0.05);
      theirs_param.mutable_grad() = grad.clone();
      theirs->step();
      EXPECT_TRUE(torch::equal(flat, theirs_param.detach())) << to_string(kind) << " step " << step;
      EXPECT_EQ(flat_grad.count_nonzero().item<int64_t>(), 0) << to_string(kind);
    }
  }
}

TEST(OptimizerTest, LossScalerSkipsAndHalvesOnOverflowAndGrowsAfterCleanSteps) {
  LossScaler scaler(/*enabled=*/true);
  const double start = scaler.scale();
  EXPECT_FALSE(scaler.update(/*found_inf=*/true));
  EXPECT_EQ(scaler.scale(), start / 2);
  for (int step = 0; step < 1999; ++step) EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), start / 2);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), start);
  LossScaler disabled(/*enabled=*/false);
  EXPECT_TRUE(disabled.update(true));
  EXPECT_EQ(disabled.scale(), 1.0);
}

}  // namespace
}  // namespace pipeplan::runtime
