// Tests for runtime/optimizer.h: PyTorch's update rules, the lr schedule, loss scaling.
#include "runtime/optimizer.h"

#include <gtest/gtest.h>

#include <utility>
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

// A buffer three blocks and a bit long (kCpuBlockElements = 2^18 in runtime/optimizer.cpp).
constexpr int64_t kLongBuffer = 3 * (int64_t{1} << 18) + 1001;

// Runs 4 updates of FlatOptimizer over `numel` elements cut into `segments` segments (as ZeRO-1
// steps a shard), and of torch::optim `reference` over one tensor from the same start. The
// updates are the same operations element by element, so the parameters must be equal to the
// bit, however the buffer is cut into segments and blocks; each step leaves the gradients zero.
template <typename Reference>
void expect_same_updates(const OptimizerSettings& settings, Reference make_reference,
                         int64_t numel = 64, int segments = 1) {
  torch::manual_seed(0);
  const torch::Tensor start = torch::randn({numel});
  torch::Tensor flat = start.clone();
  torch::Tensor flat_grad = torch::zeros({numel});
  std::vector<FlatSegment> pieces;
  for (int piece = 0; piece < segments; ++piece) {
    const int64_t begin = numel * piece / segments;
    const int64_t length = numel * (piece + 1) / segments - begin;
    pieces.push_back({flat.narrow(0, begin, length), flat_grad.narrow(0, begin, length)});
  }
  FlatOptimizer mine(settings, std::move(pieces));
  torch::Tensor theirs_param = start.clone().requires_grad_(true);
  auto theirs = make_reference(theirs_param);
  for (int step = 1; step <= 4; ++step) {
    const torch::Tensor grad = torch::randn({numel});
    const double lr = 0.01 * step;
    flat_grad.copy_(grad);
    mine.step(lr);
    theirs_param.mutable_grad() = grad.clone();
    theirs.param_groups()[0].options().set_lr(lr);
    theirs.step();
    EXPECT_TRUE(torch::equal(flat, theirs_param.detach())) << "step " << step;
    EXPECT_EQ(flat_grad.count_nonzero().item<int64_t>(), 0) << "step " << step;
  }
  EXPECT_EQ(mine.steps_taken(), 4);
}

TEST(OptimizerTest, SgdFollowsTorchOptim) {
  OptimizerSettings s = OptimizerSettings::defaults_for(OptimizerKind::kSgd);
  const auto sgd = [&](const torch::Tensor& p) {
    return torch::optim::SGD(
        {p}, torch::optim::SGDOptions(1).momentum(s.momentum).weight_decay(s.weight_decay));
  };
  expect_same_updates(s, sgd);
  expect_same_updates(s, sgd, kLongBuffer, /*segments=*/2);
  s.momentum = 0;  // `sgd` reads it at each call
  expect_same_updates(s, sgd);
}

TEST(OptimizerTest, AdamwFollowsTorchOptim) {
  const OptimizerSettings s = OptimizerSettings::defaults_for(OptimizerKind::kAdamw);
  const auto adamw = [&](const torch::Tensor& p) {
    return torch::optim::AdamW({p}, torch::optim::AdamWOptions(1)
                                        .betas({s.beta1, s.beta2})
                                        .eps(s.eps)
                                        .weight_decay(s.weight_decay));
  };
  expect_same_updates(s, adamw);
  expect_same_updates(s, adamw, kLongBuffer, /*segments=*/2);
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
