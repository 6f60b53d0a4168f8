// The optimizer over a stage's flat parameters, the learning-rate schedule, and fp16 dynamic
// loss scaling.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plans/plan.h"

namespace pipeplan::runtime {

/// The learning rate of optimizer step `step` (1-based) of a run of `total_steps`:
/// peak = base_lr · global_batch / base_batch; linear warm-up peak·step/warmup_steps for
/// step <= warmup_steps; then cosine decay from peak to min_lr_fraction·peak, reached at
/// step = total_steps.
double learning_rate(const OptimizerSettings& settings, int64_t global_batch, int64_t step,
                     int64_t total_steps);

/// One stretch of the values an optimizer updates: a 1-D view into a stage's flat parameters
/// and the view of the same elements of its flat gradients.
struct FlatSegment {
  torch::Tensor parameters;
  torch::Tensor gradients;
};

/// SGD (momentum, weight decay) or AdamW (decoupled weight decay, bias correction) with
/// PyTorch's update rules, over segments of a flat parameter tensor and their gradients: the
/// whole buffer as one segment, or under ZeRO-1 the replica's shard (a piece of every gradient
/// bucket). The state is one flat tensor per kind, as long as the segments together, so a shard
/// holds 1/dp of the replicated state. step() uses the gradients as scratch and leaves them
/// zero. Every update is element-wise, so stepping a shard changes its elements exactly as
/// stepping the whole buffer would.
class FlatOptimizer {
 public:
  FlatOptimizer(const OptimizerSettings& settings, torch::Tensor parameters, torch::Tensor gradients);
  /// Over `segments` (at least one; each 1-D, the parameters' and gradients' of equal length).
  FlatOptimizer(const OptimizerSettings& settings, std::vector<FlatSegment> segments);

  /// One update with learning rate `lr`; leaves the segments' gradients zero.
  void step(double lr);
  /// Elements updated: the segments' total (the length of each state tensor).
  int64_t numel() const { return numel_; }
  /// Steps taken so far (AdamW's bias correction depends on it).
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }
  /// The state tensors by name ("momentum"; "exp_avg", "exp_avg_sq"), each numel() long, for
  /// checkpoints; loading copies into them.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;

 private:
  // The update of one stretch of a segment; `offset` is where its state starts.
  void step_block(torch::Tensor parameters, torch::Tensor gradients, int64_t offset, double lr);

  OptimizerSettings settings_;
  std::vector<FlatSegment> segments_;
  int64_t numel_ = 0;
  torch::Tensor momentum_;    // SGD
  torch::Tensor exp_avg_;     // AdamW
  torch::Tensor exp_avg_sq_;  // AdamW
  int64_t steps_taken_ = 0;
};

/// Whether every element of `gradients` is finite: one float32 sum (a NaN or Inf anywhere makes
/// it non-finite; so would a finite sum above 3e38, no less broken).
bool all_finite(const torch::Tensor& gradients);

/// Dynamic loss scaling for amp-fp16 with torch.cuda.amp.GradScaler's policy: start at 2^16,
/// halve and skip the step when any rank's gradients hold an Inf or NaN, double after 2000
/// clean steps in a row. Disabled (scale 1, never skips) for other precisions.
class LossScaler {
 public:
  explicit LossScaler(bool enabled);
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  /// Records whether the step's gradients overflowed on any rank; returns whether to apply it.
  bool update(bool found_inf);
  /// Clean steps since the scale last changed (checkpoint state).
  int64_t clean_steps() const { return clean_steps_; }
  /// Restores the state a checkpoint saved.
  void restore(double scale, int64_t clean_steps);

 private:
  bool enabled_;
  double scale_;
  int64_t clean_steps_ = 0;
};

}  // namespace pipeplan::runtime
