// Layer measurement: timed forward/backward passes over a chain of layers, one tracked memory
// iteration per layer, and the optimizer steps.
#include "profiler/layer_profiler.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "common/error.h"
#include "common/stats.h"
#include "runtime/optimizer.h"
#include "runtime/memory_tracker.h"

namespace pipeplan::profiler {
namespace {

constexpr double kMedian = 0.5;
constexpr double kP90 = 0.9;
// The learning rate changes nothing about the time of an optimizer step.
constexpr double kLearningRate = 0.01;

// The grad_fn of a layer's input: receives the input gradient and ends backward there, so that
// backward runs this layer alone and no graph node refers to the input tensor itself (a leaf
// input would be held by its AccumulateGrad node and look "saved").
class InputGradSink : public torch::autograd::Node {
 public:
  std::string name() const override { return "pipeplan::InputGradSink"; }
  // The input gradient of the last backward that reached this node; undefined before.
  const torch::Tensor& gradient() const { return gradient_; }

 protected:
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    gradient_ = std::move(grads[0]);  // kept, as a stage keeps it to send upstream
    return {};
  }

 private:
  torch::Tensor gradient_;
};

// Runs backward as Tensor::backward does (accumulating into parameter gradients), but from the
// root's gradient edge, so that the caller need not hold the root tensor.
void run_backward(const torch::autograd::Edge& root, const torch::Tensor& root_grad) {
  torch::autograd::Engine::get_default_engine().execute({root}, {root_grad}, /*keep_graph=*/false,
                                                        /*create_graph=*/false,
                                                        /*accumulate_grad=*/true);
}

// The parameters whose gradients a W pass computes.
std::vector<torch::Tensor> trainable_parameters(models::Layer& layer) {
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& param : layer.parameters())
    if (param.requires_grad()) params.push_back(param);
  return params;
}

void allocate_gradients(models::Layer& layer) {
  for (torch::Tensor& param : layer.parameters())
    if (param.requires_grad() && !param.grad().defined())
      param.mutable_grad() = torch::zeros_like(param);
}

void zero_gradients(models::Layer& layer) {
  for (const torch::Tensor& param : layer.parameters())
    if (param.grad().defined()) param.grad().zero_();
}

// RAII: puts layers in evaluation mode (batch norm from its running statistics, no dropout), as
// an inference run does, and back in training mode.
class EvalScope {
 public:
  explicit EvalScope(std::vector<models::Layer*> layers) : layers_(std::move(layers)) {
    for (models::Layer* layer : layers_) layer->eval();
  }
  ~EvalScope() {
    for (models::Layer* layer : layers_) layer->train();
  }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  std::vector<models::Layer*> layers_;
};

// The base address of the allocation behind `tensor`, as the allocator reported it.
const void* storage_base(const torch::Tensor& tensor) {
  return tensor.defined() ? tensor.storage().data_ptr().get() : nullptr;
}

}  // namespace

// The timed samples of one phase of one layer, and the kernel busy time of the same windows
// (CUDA with CUPTI).
struct LayerProfiler::PhaseSamples {
  std::vector<double> wall_ms;
  std::optional<std::vector<double>> kernel_ms;
};

// Median and p90 of the timed windows; the median kernel time of the same windows.
void LayerProfiler::summarise(const PhaseSamples& samples, double& median_ms, double& p90_ms,
                              std::optional<double>& kernel_ms) {
  median_ms = quantile(samples.wall_ms, kMedian);
  p90_ms = quantile(samples.wall_ms, kP90);
  if (!samples.kernel_ms) return;
  PIPEPLAN_ASSERT(samples.kernel_ms->size() == samples.wall_ms.size(), samples.kernel_ms->size(),
                  " kernel windows for ", samples.wall_ms.size(), " wall times");
  kernel_ms = quantile(*samples.kernel_ms, kMedian);
}

// Median of the timed windows, or 0 for a phase that had none (nothing to compute).
double LayerProfiler::median_or_zero(const PhaseSamples& samples) {
  return samples.wall_ms.empty() ? 0.0 : quantile(samples.wall_ms, kMedian);
}

// The tensors of one layer's forward: the input given to the layer, its output, the backward
// root, and the input's gradient sink.
struct LayerProfiler::Pass {
  torch::Tensor input;
  torch::Tensor output;
  torch::Tensor root;                   // the output, or the loss for the model's last layer
  std::shared_ptr<InputGradSink> sink;  // when the input's gradient is computed
};

// What a timer window measured: a forward, the whole backward, B (the input gradient alone) or W
// (the parameter gradients alone) of the split backward, or an inference forward.
enum class LayerProfiler::Phase {
  kForward,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kInferenceForward,
  kCount  // the number of phases
};

// A chain being measured: its layers and loss, how each layer's input is treated, the backward
// seeds, and the samples of every layer.
struct LayerProfiler::Chain {
  // Which phase of which layer a timer window measured, and whether it was a timed pass.
  struct Window {
    size_t layer_idx = 0;
    Phase phase = Phase::kForward;
    bool timed = false;
  };

  std::vector<models::Layer*> layers;
  LossFn loss;  // of the last layer's output, or empty
  bool first_input_requires_grad = false;
  std::vector<bool> track_input;     // per layer, set by the first pass
  std::vector<torch::Tensor> seeds;  // per layer: random output gradient, ones for the loss
  // By phase, then per layer.
  std::array<std::vector<PhaseSamples>, static_cast<size_t>(Phase::kCount)> by_phase;
  std::vector<Window> windows;  // every window in order, to assign CUPTI's kernel times

  LossFn loss_of(size_t layer_idx) const {
    return layer_idx + 1 == layers.size() ? loss : LossFn();
  }
  std::vector<PhaseSamples>& samples(Phase phase) { return by_phase[static_cast<size_t>(phase)]; }
  const std::vector<PhaseSamples>& samples(Phase phase) const {
    return by_phase[static_cast<size_t>(phase)];
  }
  void record(size_t layer_idx, Phase phase, bool timed, double wall_ms) {
    windows.push_back({layer_idx, phase, timed});
    if (timed) samples(phase)[layer_idx].wall_ms.push_back(wall_ms);
  }
  // The gradient a layer's backward starts from: what its successor's backward produced as the
  // input gradient (`successor_gradient`), or the seed when there is none.
  torch::Tensor root_grad(size_t layer_idx, const torch::Tensor& successor_gradient) const {
    return successor_gradient.defined() ? successor_gradient : seeds[layer_idx];
  }
};

LayerProfiler::LayerProfiler(LayerSettings settings) : settings_(std::move(settings)) {
  PIPEPLAN_CHECK(settings_.warmup >= 0, "--warmup: ", settings_.warmup,
                 " is negative (use 0 or more)");
  PIPEPLAN_CHECK(settings_.repeats >= 1, "--repeats: ", settings_.repeats, " is below 1");
  runtime::check_precision(settings_.device, settings_.precision);
  timer_ = runtime::make_device_timer(settings_.device);
}

LayerProfiler::Pass LayerProfiler::make_pass(const torch::Tensor& input, bool track_input,
                                             bool copy_input) const {
  Pass pass;
  pass.input = copy_input ? input.detach().clone() : input.detach();
  if (track_input) {
    pass.sink = std::make_shared<InputGradSink>();
    torch::autograd::set_history(pass.input, pass.sink);
  }
  return pass;
}

void LayerProfiler::forward(models::Layer& layer, Pass& pass, const LossFn& loss) const {
  const runtime::AutocastScope autocast(settings_.device, settings_.precision);
  pass.output = layer.forward(pass.input);
  pass.root = loss ? loss(pass.output) : pass.output;
}

LayerMeasurement LayerProfiler::measure(models::Layer& layer, const torch::Tensor& input,
                                        bool input_requires_grad, const LossFn& loss) {
  return std::move(measure_chain({&layer}, input, input_requires_grad, loss).front());
}

std::vector<LayerMeasurement> LayerProfiler::measure_chain(
    const std::vector<models::Layer*>& layers, const torch::Tensor& input, bool input_requires_grad,
    const LossFn& loss) {
  PIPEPLAN_ASSERT(!layers.empty() && input.dim() >= 1 && !input.requires_grad(), "chain input");
  Chain chain;
  chain.layers = layers;
  chain.loss = loss;
  chain.first_input_requires_grad = input_requires_grad;
  for (std::vector<PhaseSamples>& samples : chain.by_phase) samples.resize(layers.size());
  for (models::Layer* layer : layers) {
    allocate_gradients(*layer);
    zero_gradients(*layer);
  }
  (void)timer_->take_kernel_ms();  // windows of earlier work
  std::vector<torch::Tensor> outputs;
  const int num_passes = settings_.warmup + settings_.repeats;
  for (int pass_idx = 0; pass_idx < num_passes; ++pass_idx) {
    const bool timed = pass_idx >= settings_.warmup;
    std::vector<Pass> passes = forward_chain(chain, input, timed);
    if (pass_idx + 1 == num_passes)
      for (const Pass& pass : passes) outputs.push_back(pass.output.detach());
    backward_chain(chain, passes, timed);
    passes.clear();
    for (models::Layer* layer : layers) zero_gradients(*layer);
    // The split backward gets passes of its own, so that the whole backward above is timed as
    // a stage runs it; its forwards are not timed again.
    passes = forward_chain(chain, input, /*timed=*/false);
    split_backward_chain(chain, passes, timed);
    passes.clear();
    for (models::Layer* layer : layers) zero_gradients(*layer);
  }
  // Inference forwards run back to back, as a served stage runs its micro-batches: between two
  // of a layer's forwards only the chain's other forwards run, not a training pass's backwards,
  // which would leave its weights out of the caches (a slower forward than serving's).
  for (int pass_idx = 0; pass_idx < num_passes; ++pass_idx)
    inference_chain(chain, input, /*timed=*/pass_idx >= settings_.warmup);
  take_kernel_windows(chain);
  return finish_chain(chain, input, outputs);
}

// One pass's forwards, in order, each timed on its own; every graph stays alive for backward.
std::vector<LayerProfiler::Pass> LayerProfiler::forward_chain(Chain& chain,
                                                              const torch::Tensor& input,
                                                              bool timed) {
  std::vector<Pass> passes;
  passes.reserve(chain.layers.size());
  for (size_t layer_idx = 0; layer_idx < chain.layers.size(); ++layer_idx) {
    const torch::Tensor& layer_input = layer_idx == 0 ? input : passes.back().output;
    const bool track =
        (layer_idx > 0 || chain.first_input_requires_grad) && layer_input.is_floating_point();
    if (chain.track_input.size() == layer_idx) chain.track_input.push_back(track);
    // The chain's input is copied (as a received one arrives in a fresh buffer, and layer 0 may
    // not write into the data); later inputs share the previous output's storage, as in a stage.
    Pass pass = make_pass(layer_input, track, /*copy_input=*/layer_idx == 0);
    timer_->start();
    forward(*chain.layers[layer_idx], pass, chain.loss_of(layer_idx));
    chain.record(layer_idx, Phase::kForward, timed, timer_->stop_ms());
    passes.push_back(std::move(pass));
  }
  if (chain.seeds.empty()) make_seeds(chain, passes);
  return passes;
}

// The backward seed of every layer whose output needs a gradient: ones for the loss, else a
// random gradient like the output. Made once, outside the timed windows.
void LayerProfiler::make_seeds(Chain& chain, const std::vector<Pass>& passes) {
  for (size_t layer_idx = 0; layer_idx < passes.size(); ++layer_idx) {
    const Pass& pass = passes[layer_idx];
    torch::Tensor seed;
    if (pass.root.requires_grad())
      seed =
          chain.loss_of(layer_idx) ? torch::ones_like(pass.root) : torch::randn_like(pass.output);
    chain.seeds.push_back(seed);
  }
}

// One pass's backwards in reverse order, each timed on its own from the gradient its successor
// produced (or its seed). A layer's graph and its successor's pass are released once used.
void LayerProfiler::backward_chain(Chain& chain, std::vector<Pass>& passes, bool timed) {
  for (size_t layer_idx = passes.size(); layer_idx-- > 0;) {
    Pass& pass = passes[layer_idx];
    if (!pass.root.requires_grad()) continue;  // nothing here needs a gradient: no backward
    torch::Tensor successor_gradient;
    if (layer_idx + 1 < passes.size()) {
      const std::shared_ptr<InputGradSink>& successor_sink = passes[layer_idx + 1].sink;
      if (successor_sink) successor_gradient = successor_sink->gradient();
      passes[layer_idx + 1] = Pass();
    }
    const torch::Tensor root_grad = chain.root_grad(layer_idx, successor_gradient);
    const torch::autograd::Edge root = torch::autograd::impl::gradient_edge(pass.root);
    timer_->start();
    run_backward(root, root_grad);
    chain.record(layer_idx, Phase::kBackward, timed, timer_->stop_ms());
  }
}

// One pass's backward split as a zero-bubble schedule runs it: first every layer's B in reverse
// order (its input gradient alone, from the one its successor's B produced, keeping the graph),
// then every layer's W in reverse order (its parameter gradients alone, accumulated, from the
// same gradient as its B; the graph is released). B needs an input that takes a gradient (not
// the data, not an integer input) and W parameters: without, no window, and the time is 0.
void LayerProfiler::split_backward_chain(Chain& chain, std::vector<Pass>& passes, bool timed) {
  std::vector<torch::Tensor> root_grads(passes.size());
  torch::Tensor successor_gradient;  // B's output of layer_idx + 1
  for (size_t layer_idx = passes.size(); layer_idx-- > 0;) {
    Pass& pass = passes[layer_idx];
    if (!pass.root.requires_grad()) {
      successor_gradient = torch::Tensor();
      continue;
    }
    root_grads[layer_idx] = chain.root_grad(layer_idx, successor_gradient);
    successor_gradient = torch::Tensor();
    if (!pass.sink) continue;
    timer_->start();
    successor_gradient = torch::autograd::grad({pass.root}, {pass.input}, {root_grads[layer_idx]},
                                               /*retain_graph=*/true, /*create_graph=*/false,
                                               /*allow_unused=*/true)
                             .front();
    chain.record(layer_idx, Phase::kBackwardInput, timed, timer_->stop_ms());
  }
  for (size_t layer_idx = passes.size(); layer_idx-- > 0;) {
    const Pass& pass = passes[layer_idx];
    const std::vector<torch::Tensor> params = trainable_parameters(*chain.layers[layer_idx]);
    if (!pass.root.requires_grad() || params.empty()) continue;
    timer_->start();
    torch::autograd::backward({pass.root}, {root_grads[layer_idx]}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*inputs=*/params);
    chain.record(layer_idx, Phase::kBackwardWeight, timed, timer_->stop_ms());
  }
}

// One pass of inference forwards, in order, each timed on its own: the layers in evaluation mode
// under NoGradGuard, as StageRuntime::infer runs them, each layer's output the next one's input
// (the first gets a copy of the chain's input, made outside the window). No loss: a served
// model's last stage returns its output. The layers are back in training mode afterwards.
void LayerProfiler::inference_chain(Chain& chain, const torch::Tensor& input, bool timed) {
  const EvalScope eval(chain.layers);
  const torch::NoGradGuard no_grad;
  const runtime::AutocastScope autocast(settings_.device, settings_.precision);
  torch::Tensor activation = input.detach().clone();
  for (size_t layer_idx = 0; layer_idx < chain.layers.size(); ++layer_idx) {
    timer_->start();
    activation = chain.layers[layer_idx]->forward(activation);
    chain.record(layer_idx, Phase::kInferenceForward, timed, timer_->stop_ms());
  }
}

// Assigns CUPTI's kernel busy time of every window to its layer and phase (CUDA only).
void LayerProfiler::take_kernel_windows(Chain& chain) {
  const std::optional<std::vector<double>> kernel_ms = timer_->take_kernel_ms();
  if (!kernel_ms) return;
  PIPEPLAN_ASSERT(kernel_ms->size() == chain.windows.size(), kernel_ms->size(),
                  " kernel windows for ", chain.windows.size(), " timer windows");
  for (size_t window_idx = 0; window_idx < chain.windows.size(); ++window_idx) {
    const Chain::Window& window = chain.windows[window_idx];
    if (!window.timed) continue;
    PhaseSamples& samples = chain.samples(window.phase)[window.layer_idx];
    if (!samples.kernel_ms) samples.kernel_ms.emplace();
    samples.kernel_ms->push_back((*kernel_ms)[window_idx]);
  }
}

// Every layer's point from the chain's samples and outputs, and its memory measurement.
std::vector<LayerMeasurement> LayerProfiler::finish_chain(
    const Chain& chain, const torch::Tensor& input,
    const std::vector<torch::Tensor>& outputs) const {
  std::vector<LayerMeasurement> measurements(chain.layers.size());
  for (size_t layer_idx = 0; layer_idx < chain.layers.size(); ++layer_idx) {
    LayerMeasurement& measurement = measurements[layer_idx];
    LayerPoint& point = measurement.point;
    point.batch_size = input.size(0);
    auto phase = [&](Phase p) -> const PhaseSamples& { return chain.samples(p)[layer_idx]; };
    summarise(phase(Phase::kForward), point.fwd_ms, point.fwd_ms_p90, point.fwd_kernel_ms);
    if (!phase(Phase::kBackward).wall_ms.empty())
      summarise(phase(Phase::kBackward), point.bwd_ms, point.bwd_ms_p90, point.bwd_kernel_ms);
    point.bwd_input_ms = median_or_zero(phase(Phase::kBackwardInput));
    point.bwd_weight_ms = median_or_zero(phase(Phase::kBackwardWeight));
    std::optional<double> unused_kernel_ms;  // CUPTI kernel times: the training forward's only
    point.inference_fwd_ms.emplace();
    point.inference_fwd_ms_p90.emplace();
    summarise(phase(Phase::kInferenceForward), *point.inference_fwd_ms,
              *point.inference_fwd_ms_p90, unused_kernel_ms);
    measurement.output = outputs[layer_idx];
    point.output_shape = measurement.output.sizes().vec();
    point.output_bytes = static_cast<int64_t>(measurement.output.nbytes());
    measurement.output_dtype = runtime::dtype_name(measurement.output.scalar_type());
    models::Layer& layer = *chain.layers[layer_idx];
    const torch::Tensor& layer_input = layer_idx == 0 ? input : outputs[layer_idx - 1];
    measure_memory(layer, layer_input, chain.track_input[layer_idx], chain.loss_of(layer_idx),
                   chain.seeds[layer_idx], point);
    zero_gradients(layer);
    point.inference_fwd_peak_bytes = measure_inference_memory(layer, layer_input);
  }
  return measurements;
}

void LayerProfiler::measure_memory(models::Layer& layer, const torch::Tensor& input,
                                   bool track_input, const LossFn& loss,
                                   const torch::Tensor& root_grad, LayerPoint& point) const {
  const c10::Device& device = settings_.device;
  auto tracker = std::make_shared<runtime::MemoryTracker>();
  runtime::MemoryMeter meter(device, tracker);
  runtime::synchronize(device);
  const runtime::MemoryTrackingScope scope(tracker);
  const int64_t base_bytes = meter.current_bytes();
  Pass pass = make_pass(input, track_input, /*copy_input=*/true);  // tracked: visible if saved
  const void* input_base = storage_base(pass.input);
  runtime::synchronize(device);
  meter.reset_peak();
  forward(layer, pass, loss);
  runtime::synchronize(device);
  point.fwd_transient_bytes = std::max<int64_t>(0, meter.peak_bytes() - meter.current_bytes());
  const void* output_base = storage_base(pass.output);
  std::optional<torch::autograd::Edge> root;
  if (pass.root.requires_grad()) root = torch::autograd::impl::gradient_edge(pass.root);
  pass = Pass();  // from here only the graph (through `root`) keeps anything alive
  runtime::synchronize(device);
  point.saved_input_bytes = tracker->live_bytes(input_base);
  point.saved_output_bytes = output_base == input_base ? 0 : tracker->live_bytes(output_base);
  // On CUDA the allocator's counters also see frees of blocks allocated before tracking began;
  // never report less than the saved tensors themselves.
  point.retained_bytes = std::max(meter.current_bytes() - base_bytes,
                                  point.saved_input_bytes + point.saved_output_bytes);
  point.bwd_transient_bytes = 0;
  if (!root) return;
  meter.reset_peak();
  const int64_t before_backward = meter.current_bytes();
  run_backward(*root, root_grad);
  runtime::synchronize(device);
  point.bwd_transient_bytes = std::max<int64_t>(0, meter.peak_bytes() - before_backward);
}

int64_t LayerProfiler::measure_inference_memory(models::Layer& layer,
                                                const torch::Tensor& input) const {
  const c10::Device& device = settings_.device;
  auto tracker = std::make_shared<runtime::MemoryTracker>();
  runtime::MemoryMeter meter(device, tracker);
  const EvalScope eval({&layer});
  const torch::NoGradGuard no_grad;
  const runtime::AutocastScope autocast(device, settings_.precision);
  runtime::synchronize(device);
  const runtime::MemoryTrackingScope scope(tracker);
  const torch::Tensor layer_input = input.detach().clone();  // tracked, as a received input is
  runtime::synchronize(device);
  const int64_t before_bytes = meter.current_bytes();
  meter.reset_peak();
  {
    const torch::Tensor output = layer.forward(layer_input);
    runtime::synchronize(device);
  }
  return std::max<int64_t>(0, meter.peak_bytes() - before_bytes);
}

std::map<std::string, double> LayerProfiler::flat_optimizer_step_ms(int64_t numel) {
  const std::vector<OptimizerKind> kinds = {OptimizerKind::kSgd, OptimizerKind::kAdamw};
  std::map<std::string, double> step_ms;
  if (numel == 0) {
    for (OptimizerKind kind : kinds) step_ms[to_string(kind)] = 0.0;
    return step_ms;
  }
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(settings_.device);
  const int untimed = std::max(1, settings_.warmup);  // the first step touches the fresh state
  for (OptimizerKind kind : kinds) {
    torch::Tensor parameters = torch::randn({numel}, options);
    torch::Tensor gradients = torch::empty({numel}, options);
    runtime::FlatOptimizer optimizer(OptimizerSettings::defaults_for(kind), parameters, gradients);
    std::vector<double> samples;
    for (int step = 0; step < untimed + settings_.repeats; ++step) {
      gradients.normal_();  // a step on zeros is atypical
      const bool timed = step >= untimed;
      if (timed) timer_->start();
      (void)runtime::all_finite(gradients);
      optimizer.step(kLearningRate);  // and zeroes the gradients
      if (timed) samples.push_back(timer_->stop_ms());
    }
    step_ms[to_string(kind)] = quantile(samples, kMedian);
  }
  (void)timer_->take_kernel_ms();
  return step_ms;
}

void describe_layer(models::Layer& layer, LayerProfile& profile) {
  profile.param_count = 0;
  profile.param_bytes = 0;
  profile.buffer_bytes = 0;
  for (const torch::Tensor& param : layer.parameters()) {
    profile.param_count += param.numel();
    profile.param_bytes += static_cast<int64_t>(param.nbytes());
  }
  for (const torch::Tensor& buffer : layer.buffers())
    profile.buffer_bytes += static_cast<int64_t>(buffer.nbytes());
}

}  // namespace pipeplan::profiler
