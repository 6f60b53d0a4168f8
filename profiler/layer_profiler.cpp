// One layer's measurement: timed forward/backward iterations, one tracked memory iteration, and
// the optimizer steps.
#include "profiler/layer_profiler.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/error.h"
#include "profiler/memory_tracker.h"

namespace pipeplan::profiler {
namespace {

constexpr double kMedian = 0.5;
constexpr double kP90 = 0.9;
// Optimizer hyperparameters change nothing about the time of a step; these are common values.
constexpr double kLearningRate = 0.01;
constexpr double kSgdMomentum = 0.9;
constexpr double kSgdWeightDecay = 1e-4;
constexpr double kAdamWWeightDecay = 0.01;

// The grad_fn of the layer's input: receives the input gradient and ends backward there, so that
// backward measures this layer alone and no graph node refers to the input tensor itself (a leaf
// input would be held by its AccumulateGrad node and look "saved").
class InputGradSink : public torch::autograd::Node {
 public:
  std::string name() const override { return "pipeplan::InputGradSink"; }

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

void allocate_gradients(models::Layer& layer) {
  for (torch::Tensor& param : layer.parameters())
    if (param.requires_grad() && !param.grad().defined())
      param.mutable_grad() = torch::zeros_like(param);
}

void zero_gradients(models::Layer& layer) {
  for (const torch::Tensor& param : layer.parameters())
    if (param.grad().defined()) param.grad().zero_();
}

// The base address of the allocation behind `tensor`, as the allocator reported it.
const void* storage_base(const torch::Tensor& tensor) {
  return tensor.defined() ? tensor.storage().data_ptr().get() : nullptr;
}

}  // namespace

// The timed samples of one phase, and the kernel busy time of its windows (CUDA with CUPTI).
struct LayerProfiler::PhaseSamples {
  std::vector<double> wall_ms;
  std::optional<std::vector<double>> kernel_ms;
};

// Median and p90 of the repeats; the median kernel time of the last `repeats` windows.
void LayerProfiler::summarise(const PhaseSamples& samples, double& median_ms, double& p90_ms,
                              std::optional<double>& kernel_ms) {
  median_ms = quantile(samples.wall_ms, kMedian);
  p90_ms = quantile(samples.wall_ms, kP90);
  if (!samples.kernel_ms) return;
  const size_t repeats = samples.wall_ms.size();
  PIPEPLAN_ASSERT(samples.kernel_ms->size() >= repeats, samples.kernel_ms->size(), " windows");
  kernel_ms = quantile(
      std::vector<double>(samples.kernel_ms->end() - repeats, samples.kernel_ms->end()), kMedian);
}

// The tensors of one forward: the input given to the layer, its output and the backward root.
struct LayerProfiler::Pass {
  torch::Tensor input;
  torch::Tensor output;
  torch::Tensor root;  // the output, or the loss for the last layer
};

LayerProfiler::LayerProfiler(LayerSettings settings) : settings_(std::move(settings)) {
  PIPEPLAN_CHECK(settings_.warmup >= 0, "--warmup: ", settings_.warmup,
                 " is negative (use 0 or more)");
  PIPEPLAN_CHECK(settings_.repeats >= 1, "--repeats: ", settings_.repeats, " is below 1");
  check_precision(settings_.device, settings_.precision);
  timer_ = make_device_timer(settings_.device);
}

LayerProfiler::Pass LayerProfiler::make_pass(const torch::Tensor& input, bool track_input) const {
  Pass pass;
  pass.input = input.detach().clone();
  if (track_input) torch::autograd::set_history(pass.input, std::make_shared<InputGradSink>());
  return pass;
}

void LayerProfiler::forward(models::Layer& layer, Pass& pass, const LossFn& loss) const {
  const AutocastScope autocast(settings_.device, settings_.precision);
  pass.output = layer.forward(pass.input);
  pass.root = loss ? loss(pass.output) : pass.output;
}

LayerMeasurement LayerProfiler::measure(models::Layer& layer, const torch::Tensor& input,
                                        bool input_requires_grad, const LossFn& loss) {
  PIPEPLAN_ASSERT(input.dim() >= 1 && !input.requires_grad(), "layer input");
  const bool track_input = input_requires_grad && input.is_floating_point();
  allocate_gradients(layer);
  zero_gradients(layer);
  LayerMeasurement measurement;
  LayerPoint& point = measurement.point;
  point.batch_size = input.size(0);
  const PhaseSamples forward_samples = time_forward(layer, input, track_input, loss, measurement);
  summarise(forward_samples, point.fwd_ms, point.fwd_ms_p90, point.fwd_kernel_ms);
  point.output_shape = measurement.output.sizes().vec();
  point.output_bytes = static_cast<int64_t>(measurement.output.nbytes());
  measurement.output_dtype = dtype_name(measurement.output.scalar_type());
  if (root_grad_.defined()) {  // else nothing requires a gradient: no backward at all
    const PhaseSamples backward_samples = time_backward(layer, input, track_input, loss);
    summarise(backward_samples, point.bwd_ms, point.bwd_ms_p90, point.bwd_kernel_ms);
  }
  measure_memory(layer, input, track_input, loss, point);
  zero_gradients(layer);
  root_grad_ = torch::Tensor();
  return measurement;
}

// Forwards back to back, as a stage runs them (the graph of each is built, then dropped).
LayerProfiler::PhaseSamples LayerProfiler::time_forward(models::Layer& layer,
                                                        const torch::Tensor& input,
                                                        bool track_input, const LossFn& loss,
                                                        LayerMeasurement& measurement) {
  PhaseSamples samples;
  (void)timer_->take_kernel_ms();  // windows of earlier work
  root_grad_ = torch::Tensor();
  const int iterations = settings_.warmup + settings_.repeats;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    Pass pass = make_pass(input, track_input);
    timer_->start();
    forward(layer, pass, loss);
    const double wall_ms = timer_->stop_ms();
    if (iteration >= settings_.warmup) samples.wall_ms.push_back(wall_ms);
    if (iteration + 1 < iterations) continue;
    measurement.output = pass.output.detach();
    // The backward seed: ones for the loss, else a random gradient like the output.
    if (pass.root.requires_grad())
      root_grad_ = loss ? torch::ones_like(pass.root) : torch::randn_like(pass.output);
  }
  samples.kernel_ms = timer_->take_kernel_ms();
  return samples;
}

// Backward of a fresh graph each iteration (forward untimed), parameter gradients zeroed after.
LayerProfiler::PhaseSamples LayerProfiler::time_backward(models::Layer& layer,
                                                         const torch::Tensor& input,
                                                         bool track_input, const LossFn& loss) {
  PhaseSamples samples;
  const int iterations = settings_.warmup + settings_.repeats;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    Pass pass = make_pass(input, track_input);
    forward(layer, pass, loss);
    const torch::autograd::Edge root = torch::autograd::impl::gradient_edge(pass.root);
    timer_->start();
    run_backward(root, root_grad_);
    const double wall_ms = timer_->stop_ms();
    if (iteration >= settings_.warmup) samples.wall_ms.push_back(wall_ms);
    pass = Pass();
    zero_gradients(layer);
  }
  samples.kernel_ms = timer_->take_kernel_ms();
  return samples;
}

void LayerProfiler::measure_memory(models::Layer& layer, const torch::Tensor& input,
                                   bool track_input, const LossFn& loss, LayerPoint& point) const {
  const c10::Device& device = settings_.device;
  auto tracker = std::make_shared<MemoryTracker>();
  MemoryMeter meter(device, tracker);
  synchronize(device);
  const MemoryTrackingScope scope(tracker);
  const int64_t base_bytes = meter.current_bytes();
  Pass pass = make_pass(input, track_input);  // allocated while tracking: visible if saved
  const void* input_base = storage_base(pass.input);
  synchronize(device);
  meter.reset_peak();
  forward(layer, pass, loss);
  synchronize(device);
  point.fwd_transient_bytes = std::max<int64_t>(0, meter.peak_bytes() - meter.current_bytes());
  const void* output_base = storage_base(pass.output);
  std::optional<torch::autograd::Edge> root;
  if (pass.root.requires_grad()) root = torch::autograd::impl::gradient_edge(pass.root);
  pass = Pass();  // from here only the graph (through `root`) keeps anything alive
  synchronize(device);
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
  run_backward(*root, root_grad_);
  synchronize(device);
  point.bwd_transient_bytes = std::max<int64_t>(0, meter.peak_bytes() - before_backward);
}

std::map<std::string, double> LayerProfiler::optimizer_step_ms(models::Layer& layer) {
  std::vector<torch::Tensor> params = layer.parameters();
  if (params.empty()) return {{"sgd", 0.0}, {"adamw", 0.0}};
  allocate_gradients(layer);
  for (const torch::Tensor& param : params) param.grad().normal_();  // a step on zeros is atypical
  std::map<std::string, double> step_ms;
  torch::optim::SGD sgd(
      params,
      torch::optim::SGDOptions(kLearningRate).momentum(kSgdMomentum).weight_decay(kSgdWeightDecay));
  step_ms["sgd"] = time_optimizer(sgd);
  torch::optim::AdamW adamw(
      params, torch::optim::AdamWOptions(kLearningRate).weight_decay(kAdamWWeightDecay));
  step_ms["adamw"] = time_optimizer(adamw);
  (void)timer_->take_kernel_ms();
  return step_ms;
}

double LayerProfiler::time_optimizer(torch::optim::Optimizer& optimizer) {
  // The first step creates the optimizer state (momentum, moments): never timed.
  for (int step = 0; step < std::max(1, settings_.warmup); ++step) optimizer.step();
  std::vector<double> samples;
  for (int step = 0; step < settings_.repeats; ++step) {
    timer_->start();
    optimizer.step();
    samples.push_back(timer_->stop_ms());
  }
  return quantile(samples, kMedian);
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

double quantile(std::vector<double> values, double fraction) {
  PIPEPLAN_ASSERT(!values.empty() && fraction >= 0 && fraction <= 1, "quantile ", fraction);
  std::sort(values.begin(), values.end());
  const double position = fraction * static_cast<double>(values.size() - 1);
  const size_t lower = static_cast<size_t>(std::floor(position));
  const size_t upper = std::min(lower + 1, values.size() - 1);
  return values[lower] + (position - static_cast<double>(lower)) * (values[upper] - values[lower]);
}

}  // namespace pipeplan::profiler
