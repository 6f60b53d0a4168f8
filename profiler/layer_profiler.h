// Measures one layer: forward and backward times, retained and transient memory and output facts
// at one micro-batch size, and the optimizer step over its parameters.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "profiler/device.h"
#include "profiler/report.h"

namespace pipeplan::profiler {

/// How every layer is measured.
struct LayerSettings {
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  Precision precision = Precision::kFp32;  ///< autocast (CUDA only) around forward and loss
  int warmup = 3;                          ///< untimed runs first, per phase (>= 0)
  int repeats = 10;                        ///< timed runs, per phase (>= 1)
};

/// The model's loss of the last layer's output (compute_loss against a fixed target).
using LossFn = std::function<torch::Tensor(const torch::Tensor& output)>;

/// What measuring one layer at one micro-batch size produced.
struct LayerMeasurement {
  LayerPoint point;          ///< every LayerPoint field (kernel times only on CUDA with CUPTI)
  std::string output_dtype;  ///< dtype_name of the output ("bfloat16" under amp-bf16)
  torch::Tensor output;      ///< the output of the last timed forward, detached: the next input
};

/// Measures layers on one device with fixed settings.
///
/// Timing, in two phases of `warmup` untimed then `repeats` timed iterations each: forwards back
/// to back (each building its autograd graph, which is then dropped), as a stage runs them; then
/// backwards, each of a fresh graph from an untimed forward. Steady clock on the CPU; CUDA
/// events, and CUPTI kernel records for the *_kernel_ms fields, on CUDA. Medians and p90.
///  - The layer gets a fresh copy of the input. With `input_requires_grad` (and a floating-point
///    input) its gradient is computed, as a pipeline stage does to send it upstream, into a sink
///    node that ends backward there: no earlier layer runs, and nothing else holds the input.
///  - Backward starts from a random output gradient of the output's shape and dtype, or, given a
///    `loss` (the model's last layer), forward and backward both include the loss.
///  - Parameter gradients stay allocated (zeroed between iterations), so backward accumulates
///    into them in place as in training after the first step.
/// Memory: one more, untimed iteration after the timed ones (caches and workspaces are in place),
/// with the allocator's accounting (MemoryMeter) and a MemoryTracker installed:
///  - fwd_transient_bytes = peak during forward minus the bytes alive right after it;
///  - retained_bytes = bytes still alive when the caller's references to the input and output
///    are dropped and only the graph (held through the root's grad_fn) keeps things alive;
///    saved_input_bytes / saved_output_bytes = the input / output allocation if still alive then
///    (an output that shares the input's storage counts as input only);
///  - bwd_transient_bytes = peak during backward minus the bytes alive just before it (graph,
///    output gradient, allocated parameter gradients), which includes the input gradient.
class LayerProfiler {
 public:
  /// Checks warmup >= 0 and repeats >= 1 (bad input otherwise) and creates the device's timer.
  explicit LayerProfiler(LayerSettings settings);

  /// Measures `layer` (built, on the device, in training mode) on `input` (batch first, on the
  /// device, requiring no gradient). Zeroes and keeps the layer's parameter gradients.
  LayerMeasurement measure(models::Layer& layer, const torch::Tensor& input,
                           bool input_requires_grad, const LossFn& loss = {});

  /// Median milliseconds (after `warmup`, at least 1, untimed steps that create the optimizer
  /// state) of one optimizer step over the layer's parameters with gradients present, for "sgd"
  /// (momentum 0.9, weight decay 1e-4) and "adamw" (weight decay 0.01); 0 for a layer without
  /// parameters. Changes the parameters: call after measure().
  std::map<std::string, double> optimizer_step_ms(models::Layer& layer);

  const LayerSettings& settings() const { return settings_; }

 private:
  struct Pass;
  struct PhaseSamples;
  Pass make_pass(const torch::Tensor& input, bool track_input) const;
  void forward(models::Layer& layer, Pass& pass, const LossFn& loss) const;
  PhaseSamples time_forward(models::Layer& layer, const torch::Tensor& input, bool track_input,
                            const LossFn& loss, LayerMeasurement& measurement);
  PhaseSamples time_backward(models::Layer& layer, const torch::Tensor& input, bool track_input,
                             const LossFn& loss);
  static void summarise(const PhaseSamples& samples, double& median_ms, double& p90_ms,
                        std::optional<double>& kernel_ms);
  void measure_memory(models::Layer& layer, const torch::Tensor& input, bool track_input,
                      const LossFn& loss, LayerPoint& point) const;
  double time_optimizer(torch::optim::Optimizer& optimizer);

  LayerSettings settings_;
  std::unique_ptr<DeviceTimer> timer_;
  torch::Tensor root_grad_;  ///< the backward seed of the layer being measured
};

/// Parameter count and bytes and buffer bytes of a built layer, into `profile`.
void describe_layer(models::Layer& layer, LayerProfile& profile);

/// The `fraction` quantile (0 to 1) of `values` (not empty), interpolating linearly between
/// order statistics as numpy's default does: 0.5 is the median, 0.9 the p90.
double quantile(std::vector<double> values, double fraction);

}  // namespace pipeplan::profiler
