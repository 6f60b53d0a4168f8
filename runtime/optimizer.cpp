// The optimizer, the learning-rate schedule and loss scaling.
#include "runtime/optimizer.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace pipeplan::runtime {
namespace {

// torch.cuda.amp.GradScaler's defaults.
constexpr double kInitialLossScale = 65536.0;
constexpr double kLossScaleGrowth = 2.0;
constexpr double kLossScaleBackoff = 0.5;
constexpr int64_t kLossScaleGrowthInterval = 2000;
constexpr double kPi = 3.14159265358979323846;

// Elements a CPU step updates at a time. The update makes several element-wise passes (SGD 4,
// AdamW 8); over a block, its parameters, gradients and state stay in cache between them, where
// passes over a whole stage's buffers stream each from memory: on the MLP's 33.6 MB stage, with
// the finite check and the zeroing, 8.5 ms against 12.5 (one thread;
// bench/history/2026-11-28-session-22.md). A GPU takes each segment whole: blocks would only
// multiply its kernel launches.
constexpr int64_t kCpuBlockElements = int64_t{1} << 18;

}  // namespace

double learning_rate(const OptimizerSettings& settings, int64_t global_batch, int64_t step,
                     int64_t total_steps) {
  PIPEPLAN_ASSERT(step >= 1 && step <= total_steps, "step ", step, " of ", total_steps);
  const double peak = settings.base_lr * static_cast<double>(global_batch) /
                      static_cast<double>(settings.base_batch);
  if (step <= settings.warmup_steps)
    return peak * static_cast<double>(step) / static_cast<double>(settings.warmup_steps);
  const int64_t decay_steps = total_steps - settings.warmup_steps;
  const double progress = static_cast<double>(step - settings.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(decay_steps, 1));
  const double floor = settings.min_lr_fraction * peak;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(kPi * progress));
}

FlatOptimizer::FlatOptimizer(const OptimizerSettings& settings, torch::Tensor parameters,
                             torch::Tensor gradients)
    : FlatOptimizer(settings, {FlatSegment{std::move(parameters), std::move(gradients)}}) {}

FlatOptimizer::FlatOptimizer(const OptimizerSettings& settings, std::vector<FlatSegment> segments)
    : settings_(settings), segments_(std::move(segments)) {
  PIPEPLAN_ASSERT(!segments_.empty(), "an optimizer over no segment");
  for (const FlatSegment& segment : segments_) {
    PIPEPLAN_ASSERT(
        segment.parameters.dim() == 1 && segment.gradients.sizes() == segment.parameters.sizes(),
        "a segment is a 1-D parameter view and its gradient's");
    numel_ += segment.parameters.numel();
  }
  const torch::TensorOptions options = segments_.front().parameters.options();
  if (settings_.kind == OptimizerKind::kSgd) {
    if (settings_.momentum != 0) momentum_ = torch::zeros({numel_}, options);
  } else {
    exp_avg_ = torch::zeros({numel_}, options);
    exp_avg_sq_ = torch::zeros({numel_}, options);
  }
}

void FlatOptimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_taken_;
  int64_t offset = 0;
  for (const FlatSegment& segment : segments_) {
    const int64_t count = segment.parameters.numel();
    const int64_t block = segment.parameters.is_cuda() ? count : kCpuBlockElements;
    for (int64_t begin = 0; begin < count; begin += block) {
      const int64_t length = std::min(block, count - begin);
      step_block(segment.parameters.narrow(0, begin, length),
                 segment.gradients.narrow(0, begin, length), offset + begin, lr);
    }
    offset += count;
  }
}

// PyTorch's rules, in PyTorch's order of operations (so that results match torch::optim):
//   SGD:   d = g + wd·p;  buf = momentum·buf + d;  p -= lr·buf
//   AdamW: p *= 1 - lr·wd;  m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²;
//          p -= lr/(1-b1^t) · m / (sqrt(v)/sqrt(1-b2^t) + eps)
void FlatOptimizer::step_block(torch::Tensor parameters, torch::Tensor gradients, int64_t offset,
                               double lr) {
  const OptimizerSettings& s = settings_;
  const int64_t count = parameters.numel();
  if (s.kind == OptimizerKind::kSgd) {
    if (s.weight_decay != 0) gradients.add_(parameters, s.weight_decay);
    if (momentum_.defined()) {
      torch::Tensor momentum = momentum_.narrow(0, offset, count);
      momentum.mul_(s.momentum).add_(gradients);
      parameters.add_(momentum, -lr);
    } else {
      parameters.add_(gradients, -lr);
    }
    gradients.zero_();
    return;
  }
  torch::Tensor exp_avg = exp_avg_.narrow(0, offset, count);
  torch::Tensor exp_avg_sq = exp_avg_sq_.narrow(0, offset, count);
  if (s.weight_decay != 0) parameters.mul_(1 - lr * s.weight_decay);
  exp_avg.mul_(s.beta1).add_(gradients, 1 - s.beta1);
  exp_avg_sq.mul_(s.beta2).addcmul_(gradients, gradients, 1 - s.beta2);
  const double t = static_cast<double>(steps_taken_);
  const double bias_correction1 = 1 - std::pow(s.beta1, t);
  const double bias_correction2 = 1 - std::pow(s.beta2, t);
  torch::Tensor& denominator = gradients;  // scratch: the gradient is no longer needed
  torch::sqrt_out(denominator, exp_avg_sq);
  denominator.div_(std::sqrt(bias_correction2)).add_(s.eps);
  parameters.addcdiv_(exp_avg, denominator, -lr / bias_correction1);
  gradients.zero_();
}

bool all_finite(const torch::Tensor& gradients) {
  // One float32 pass: a float64 sum would convert every element first, at many times the cost.
  return std::isfinite(gradients.sum().item<double>());
}

std::vector<std::pair<std::string, torch::Tensor>> FlatOptimizer::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  if (momentum_.defined()) state.emplace_back("momentum", momentum_);
  if (exp_avg_.defined()) state.emplace_back("exp_avg", exp_avg_);
  if (exp_avg_sq_.defined()) state.emplace_back("exp_avg_sq", exp_avg_sq_);
  return state;
}

LossScaler::LossScaler(bool enabled) : enabled_(enabled), scale_(enabled ? kInitialLossScale : 1.0) {}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return true;
  if (found_inf) {
    scale_ *= kLossScaleBackoff;
    clean_steps_ = 0;
    return false;
  }
  if (++clean_steps_ == kLossScaleGrowthInterval) {
    scale_ *= kLossScaleGrowth;
    clean_steps_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int64_t clean_steps) {
  scale_ = scale;
  clean_steps_ = clean_steps;
}

}  // namespace pipeplan::runtime
