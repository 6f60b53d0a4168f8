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
    : settings_(settings), parameters_(std::move(parameters)), gradients_(std::move(gradients)) {
  if (settings_.kind == OptimizerKind::kSgd) {
    if (settings_.momentum != 0) momentum_ = torch::zeros_like(parameters_);
  } else {
    exp_avg_ = torch::zeros_like(parameters_);
    exp_avg_sq_ = torch::zeros_like(parameters_);
  }
}

// PyTorch's rules, in PyTorch's order of operations (so that results match torch::optim):
//   SGD:   d = g + wd·p;  buf = momentum·buf + d;  p -= lr·buf
//   AdamW: p *= 1 - lr·wd;  m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²;
//          p -= lr/(1-b1^t) · m / (sqrt(v)/sqrt(1-b2^t) + eps)
void FlatOptimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_taken_;
  const OptimizerSettings& s = settings_;
  if (s.kind == OptimizerKind::kSgd) {
    if (s.weight_decay != 0) gradients_.add_(parameters_, s.weight_decay);
    if (!momentum_.defined()) {
      parameters_.add_(gradients_, -lr);
      return;
    }
    momentum_.mul_(s.momentum).add_(gradients_);
    parameters_.add_(momentum_, -lr);
    return;
  }
  if (s.weight_decay != 0) parameters_.mul_(1 - lr * s.weight_decay);
  exp_avg_.mul_(s.beta1).add_(gradients_, 1 - s.beta1);
  exp_avg_sq_.mul_(s.beta2).addcmul_(gradients_, gradients_, 1 - s.beta2);
  const double t = static_cast<double>(steps_taken_);
  const double bias_correction1 = 1 - std::pow(s.beta1, t);
  const double bias_correction2 = 1 - std::pow(s.beta2, t);
  torch::Tensor& denominator = gradients_;  // scratch: the gradient is no longer needed
  torch::sqrt_out(denominator, exp_avg_sq_);
  denominator.div_(std::sqrt(bias_correction2)).add_(s.eps);
  parameters_.addcdiv_(exp_avg_, denominator, -lr / bias_correction1);
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
