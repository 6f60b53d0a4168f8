// Measures layers: forward and backward times of consecutive layers run as a stage runs them,
// each layer's retained and transient memory and output facts at one micro-batch size, and the
// optimizer step over its parameters.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/device.h"
#include "plans/profile.h"

namespace pipeplan::profiler {

/// How every layer is measured.
struct LayerSettings {
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  Precision precision = Precision::kFp32;  ///< autocast (CUDA only) around forward and loss
  int warmup = 3;                          ///< untimed passes (forward and backward) first, >= 0
  int repeats = 10;                        ///< timed passes (forward and backward), >= 1
};

/// The model's loss of the last layer's output (compute_loss against a fixed target).
using LossFn = std::function<torch::Tensor(const torch::Tensor& output)>;

/// What measuring one layer at one micro-batch size produced.
struct LayerMeasurement {
  LayerPoint point;          ///< every LayerPoint field (kernel times only on CUDA with CUPTI)
  std::string output_dtype;  ///< runtime::dtype_name of the output ("bfloat16" under amp-bf16)
  torch::Tensor output;      ///< the output of the last timed forward, detached: the next input
};

/// Measures layers on one device with fixed settings, a chain of consecutive layers at a time.
///
/// Timing: `warmup` untimed, then `repeats` timed passes over the chain, each as a pipeline stage
/// runs one micro-batch: every layer's forward in order, then every layer's backward in reverse
/// order, each forward and each backward timed on its own. A layer thus finds the caches as its
/// predecessor left them, not warm with its own weights and input as when one layer is timed
/// again and again (which underestimates the time the layer takes in a stage).
/// Steady clock on the CPU; CUDA events, and CUPTI kernel records for the *_kernel_ms fields, on
/// CUDA. Medians and p90 over the timed passes.
///  - The first layer gets a fresh copy of the chain's input; every later layer a fresh tensor
///    sharing the storage of the previous layer's output (no copy, as in a stage). When that
///    input needs a gradient (the first layer's with `input_requires_grad`, every later layer's;
///    floating-point inputs only) it is computed, as a stage does to send it upstream, into a sink
///    node that ends backward there: each timed backward runs one layer only.
///  - A layer's backward starts from the input gradient its successor's backward produced. The
///    chain's last layer starts from the loss when given one (the model's last layer: its forward
///    and backward include the loss), else from a random gradient of its output's shape and dtype
///    (its successor is outside the chain); so does a layer whose successor produced none.
///  - Parameter gradients stay allocated (zeroed after each pass), so backward accumulates into
///    them in place as in training after the first step.
///  - The B/W split (LayerPoint::bwd_input_ms, bwd_weight_ms) has passes of its own, one after
///    each of the above (warm-up ones included), so that the whole backward keeps its meaning:
///    the chain's forwards again (untimed), then every layer's B in reverse order,
///    torch::autograd::grad of its backward root w.r.t. its input alone (retaining the graph),
///    from the gradient its successor's B produced (or the seed as above), then every layer's W
///    in reverse order, torch::autograd::backward from the same gradient with its parameters as
///    the only inputs (accumulating, releasing the graph), as a zero-bubble schedule defers it.
///    W recomputes the gradients inside the layer on the way to its first parameters, so B + W
///    exceeds the whole backward by about those. B is 0 without an input that takes a gradient
///    (the data, an integer input), W is 0 without parameters; both 0 without any backward.
///  - The inference forward (LayerPoint::inference_fwd_ms) has passes of its own too, `warmup`
///    then `repeats` of them back to back after all of the above, as a served stage runs its
///    micro-batches: the chain's forwards in order, each timed on its own, with the layers in
///    evaluation mode under NoGradGuard as `pipeplan infer` runs them, without the loss.
/// Memory: per layer, after the timed passes (caches and workspaces are in place), one more
/// untimed forward and backward of the layer alone on a fresh copy of its input from the last
/// pass (with the sink as above, so that no graph node holds the input itself), with the
/// allocator's accounting (runtime::MemoryMeter) and a runtime::MemoryTracker installed, backward
/// from a random output gradient (the loss for the chain's last layer when given):
///  - fwd_transient_bytes = peak during forward minus the bytes alive right after it;
///  - retained_bytes = bytes still alive when the caller's references to the input and output
///    are dropped and only the graph (held through the root's grad_fn) keeps things alive;
///    saved_input_bytes / saved_output_bytes = the input / output allocation if still alive then
///    (an output that shares the input's storage counts as input only);
///  - bwd_transient_bytes = peak during backward minus the bytes alive just before it (graph,
///    output gradient, allocated parameter gradients), which includes the input gradient.
/// Then one more inference forward of the layer alone (evaluation mode, NoGradGuard) on another
/// fresh copy of that input, tracked the same way:
///  - inference_fwd_peak_bytes = peak during it minus the bytes alive just before it (the
///    input), which includes the output it allocates.
class LayerProfiler {
 public:
  /// Checks warmup >= 0 and repeats >= 1 (bad input otherwise) and creates the device's timer.
  explicit LayerProfiler(LayerSettings settings);

  /// Measures the chain `layers` (consecutive layers of one model, not empty, built, on the
  /// device, in training mode) on `input`, the first layer's input (batch first, on the device,
  /// requiring no gradient); one measurement per layer, in order. `loss`, when given, is applied
  /// to the last layer's output. Zeroes and keeps the layers' parameter gradients. All graphs of
  /// one pass are alive at once, as in a stage: the chain's activations must fit the device.
  std::vector<LayerMeasurement> measure_chain(const std::vector<models::Layer*>& layers,
                                              const torch::Tensor& input, bool input_requires_grad,
                                              const LossFn& loss = {});

  /// measure_chain of the one layer `layer`.
  LayerMeasurement measure(models::Layer& layer, const torch::Tensor& input,
                           bool input_requires_grad, const LossFn& loss = {});

  /// Median milliseconds of one optimizer step as training takes it (runtime/optimizer.h: the
  /// finite check over the flat gradients, FlatOptimizer::step, which zeroes them) over
  /// `numel` float32 parameters in one flat buffer, for "sgd" and "adamw" with the plan's default
  /// settings, after `warmup` (at least 1) untimed steps; 0 for both when `numel` is 0. The
  /// gradients are refilled (untimed) before each step, as backward leaves them. A flat buffer
  /// of a whole stage is what the executor steps; timing each small layer's tensors alone keeps
  /// them in cache and misses the finite check and the zeroing, and so underestimates the step
  /// (bench/history/2026-11-22-session-4.md).
  std::map<std::string, double> flat_optimizer_step_ms(int64_t numel);

  const LayerSettings& settings() const { return settings_; }

 private:
  struct Pass;
  struct PhaseSamples;
  enum class Phase;
  struct Chain;
  Pass make_pass(const torch::Tensor& input, bool track_input, bool copy_input) const;
  void forward(models::Layer& layer, Pass& pass, const LossFn& loss) const;
  std::vector<Pass> forward_chain(Chain& chain, const torch::Tensor& input, bool timed);
  static void make_seeds(Chain& chain, const std::vector<Pass>& passes);
  void backward_chain(Chain& chain, std::vector<Pass>& passes, bool timed);
  void split_backward_chain(Chain& chain, std::vector<Pass>& passes, bool timed);
  void inference_chain(Chain& chain, const torch::Tensor& input, bool timed);
  void take_kernel_windows(Chain& chain);
  std::vector<LayerMeasurement> finish_chain(const Chain& chain, const torch::Tensor& input,
                                             const std::vector<torch::Tensor>& outputs) const;
  static void summarise(const PhaseSamples& samples, double& median_ms, double& p90_ms,
                        std::optional<double>& kernel_ms);
  static double median_or_zero(const PhaseSamples& samples);
  void measure_memory(models::Layer& layer, const torch::Tensor& input, bool track_input,
                      const LossFn& loss, const torch::Tensor& root_grad, LayerPoint& point) const;
  int64_t measure_inference_memory(models::Layer& layer, const torch::Tensor& input) const;

  LayerSettings settings_;
  std::unique_ptr<runtime::DeviceTimer> timer_;
};

/// Parameter count and bytes and buffer bytes of a built layer, into `profile`.
void describe_layer(models::Layer& layer, LayerProfile& profile);

}  // namespace pipeplan::profiler
