// One rank's stage: flat parameters, forward, backward (whole or zb-h1's B and W), recompute,
// evaluation.
#include "executor/stage.h"

#include <torch/csrc/autograd/autograd.h>

#include <unordered_set>

#include "common/error.h"
#include "common/hash.h"
#include "common/units.h"
#include "runtime/device.h"

namespace pipeplan::executor {

torch::Dtype boundary_dtype(const std::string& word, const std::string& field) {
  if (word == "float32") return torch::kFloat32;
  if (word == "int64") return torch::kInt64;
  if (word == "bfloat16") return torch::kBFloat16;
  if (word == "float16") return torch::kFloat16;
  throw Error(ErrorKind::kBadInput,
              detail::concat(field, ": ", quote(word),
                             " is not one of float32, int64, bfloat16, float16"));
}

uint64_t micro_batch_seed(uint64_t seed, int64_t step, int64_t global_micro_batch) {
  return mix_seed(mix_seed(seed, static_cast<uint64_t>(step)), static_cast<uint64_t>(global_micro_batch));
}

std::vector<std::vector<int>> tie_stages(const models::Model& model, const Plan& plan) {
  std::vector<std::vector<int>> stages;
  for (const models::TiedParameter& tie : model.ties) {
    stages.emplace_back();
    for (const models::TiedParameter::User& user : tie.users)
      for (int stage = 0; stage < plan.pp; ++stage)
        if (plan.stages[stage].first <= user.layer && user.layer < plan.stages[stage].last &&
            (stages.back().empty() || stages.back().back() != stage))
          stages.back().push_back(stage);
  }
  return stages;
}

StageRuntime::StageRuntime(const models::Model& model, const Plan& plan, int stage_idx,
                           const torch::Device& device, uint64_t seed)
    : model_(model),
      stage_idx_(stage_idx),
      pp_(plan.pp),
      first_(plan.stages.at(stage_idx).first),
      checkpoint_(plan.stages.at(stage_idx).checkpoint),
      split_backward_(plan.schedule == Schedule::kZeroBubbleH1),
      precision_(plan.precision),
      device_(device),
      output_sample_shape_(plan.stages.at(stage_idx).output_sample_shape),
      output_dtype_(boundary_dtype(plan.stages.at(stage_idx).output_dtype,
                                   "stages[" + std::to_string(stage_idx) + "].output_dtype")) {
  const StagePlan& stage = plan.stages.at(stage_idx);
  layers_ = models::build_layers(model, stage.first, stage.last, seed);
  for (const models::LayerPtr& layer : layers_) layer->to(device_);
  flatten_parameters();
  for (const models::TiedParameter& tie : model.ties) {
    tied_gradients_.emplace_back();
    for (const models::TiedParameter::User& user : tie.users)
      if (stage.first <= user.layer && user.layer < stage.last) {
        const auto parameters = layers_[user.layer - stage.first]->named_parameters();
        const torch::Tensor* parameter = parameters.find(user.name);
        PIPEPLAN_ASSERT(parameter != nullptr, "layer ", user.layer, " has no parameter ",
                        quote(user.name));
        tied_gradients_.back() = parameter->grad();
        break;
      }
  }
}

// Moves every parameter into one flat buffer (and its gradient into another) as views, so the
// optimizer, the gradient all-reduce and zeroing each touch one tensor.
void StageRuntime::flatten_parameters() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parameters;
  std::unordered_set<const void*> seen;  // a parameter tied across layers is moved once
  int64_t total = 0;
  for (const models::LayerPtr& layer : layers_)
    for (const torch::Tensor& parameter : layer->parameters()) {
      if (!seen.insert(parameter.unsafeGetTensorImpl()).second) continue;
      PIPEPLAN_ASSERT(parameter.scalar_type() == torch::kFloat32, "parameters must be float32");
      parameters.push_back(parameter);
      if (parameter.requires_grad()) trainable_parameters_.push_back(parameter);
      total += parameter.numel();
    }
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  flat_parameters_ = torch::empty({total}, options);
  flat_gradients_ = torch::zeros({total}, options);
  int64_t offset = 0;
  for (torch::Tensor& parameter : parameters) {
    const int64_t count = parameter.numel();
    torch::Tensor values = flat_parameters_.narrow(0, offset, count);
    values.copy_(parameter.reshape({-1}));
    parameter.set_data(values.view(parameter.sizes()));
    parameter.mutable_grad() = flat_gradients_.narrow(0, offset, count).view(parameter.sizes());
    offset += count;
  }
}

void StageRuntime::begin_iteration(int num_micro_batches) {
  in_flight_.resize(static_cast<size_t>(num_micro_batches));
  for (InFlight& entry : in_flight_) entry = InFlight();
}

// The stage's layers one after another; each layer's random numbers come from its own seed.
// With `layer_graphs`, each layer starts from a leaf cut off the previous layer's graph, so that
// B can stop at every layer boundary and W can skip the input gradients.
torch::Tensor StageRuntime::run_layers(torch::Tensor input, uint64_t rng_seed,
                                       InFlight* layer_graphs) {
  const runtime::AutocastScope autocast(device_, precision_);
  if (layer_graphs != nullptr) {
    layer_graphs->layer_inputs.clear();
    layer_graphs->layer_outputs.clear();
    layer_graphs->output_gradients.clear();
  }
  for (size_t position = 0; position < layers_.size(); ++position) {
    torch::manual_seed(mix_seed(rng_seed, static_cast<uint64_t>(first_ + position)));
    if (layer_graphs != nullptr) {
      // Integer inputs (tokens) and inputs that need no gradient pass as they are.
      if (input.requires_grad()) input = input.detach().requires_grad_(true);
      layer_graphs->layer_inputs.push_back(input);
    }
    input = layers_[position]->forward(input);
    if (layer_graphs != nullptr) layer_graphs->layer_outputs.push_back(input);
  }
  return input;
}

void StageRuntime::check_output(const torch::Tensor& output) const {
  const bool same_shape = output.dim() == static_cast<int64_t>(output_sample_shape_.size()) + 1 &&
                          output.sizes().slice(1).equals(output_sample_shape_);
  PIPEPLAN_CHECK(same_shape && output.scalar_type() == output_dtype_, "stage ", stage_idx_,
                 " produces ", format_shape(output.sizes().slice(1).vec()), " ",
                 output.scalar_type(), " per sample but the plan says stages[", stage_idx_,
                 "].output_sample_shape=", format_shape(output_sample_shape_), " ", output_dtype_,
                 "; re-create the plan for this model");
}

// Keeps the graph's end (unless checkpointed) and returns what leaves the stage.
torch::Tensor StageRuntime::finish_forward(InFlight& entry, torch::Tensor output,
                                           const torch::Tensor& target) {
  if (is_last()) {
    torch::Tensor loss = models::compute_loss(model_, output, target);
    if (!checkpoint_) entry.output = loss;
    return loss.detach();
  }
  check_output(output);
  if (!checkpoint_) entry.output = output;
  return output.detach();
}

torch::Tensor StageRuntime::forward(int micro_batch, const torch::Tensor& input,
                                    const torch::Tensor& target, uint64_t rng_seed) {
  InFlight& entry = in_flight_.at(static_cast<size_t>(micro_batch));
  entry.rng_seed = rng_seed;
  entry.input = input;
  if (is_last() && checkpoint_) entry.target = target;
  if (checkpoint_) {
    torch::NoGradGuard no_grad;
    return finish_forward(entry, run_layers(input, rng_seed), target);
  }
  if (!is_first() && input.is_floating_point()) entry.input.requires_grad_(true);
  return finish_forward(entry, run_layers(entry.input, rng_seed, split_backward_ ? &entry : nullptr),
                        target);
}

void StageRuntime::recompute(int micro_batch) {
  PIPEPLAN_ASSERT(checkpoint_, "recompute on a stage without checkpointing");
  InFlight& entry = in_flight_.at(static_cast<size_t>(micro_batch));
  if (!is_first() && entry.input.is_floating_point()) entry.input.requires_grad_(true);
  torch::Tensor output = run_layers(entry.input, entry.rng_seed, split_backward_ ? &entry : nullptr);
  entry.output = is_last() ? models::compute_loss(model_, output, entry.target) : output;
}

torch::Tensor StageRuntime::stage_output_gradient(const InFlight& entry,
                                                  const torch::Tensor& output_gradient,
                                                  double loss_factor) const {
  // The loss's gradient is the factor itself: what (loss · factor).backward() starts from.
  if (is_last()) return torch::full_like(entry.output, loss_factor);
  PIPEPLAN_CHECK(output_gradient.sizes() == entry.output.sizes(), "stage ", stage_idx_,
                 " received a gradient of shape ", format_shape(output_gradient.sizes().vec()),
                 " for an activation of shape ", format_shape(entry.output.sizes().vec()));
  return output_gradient;
}

torch::Tensor StageRuntime::backward(int micro_batch, const torch::Tensor& output_gradient,
                                     double loss_factor) {
  if (split_backward_) {
    torch::Tensor input_gradient = backward_input(micro_batch, output_gradient, loss_factor);
    backward_weight(micro_batch);
    return input_gradient;
  }
  InFlight& entry = in_flight_.at(static_cast<size_t>(micro_batch));
  PIPEPLAN_ASSERT(entry.output.defined(), "backward of micro-batch ", micro_batch,
                  " before its forward");
  if (is_last())
    (entry.output * loss_factor).backward();
  else
    entry.output.backward(stage_output_gradient(entry, output_gradient, loss_factor));
  torch::Tensor input_gradient = is_first() ? torch::Tensor() : entry.input.grad();
  entry = InFlight();
  return input_gradient;
}

const torch::Tensor& StageRuntime::layer_root(const InFlight& entry, size_t position) const {
  return is_last() && position + 1 == entry.layer_outputs.size() ? entry.output
                                                                  : entry.layer_outputs[position];
}

// Layer by layer from the last: each layer's graph gives the gradient of its input, which is
// the previous layer's output gradient. The graphs are kept for W.
torch::Tensor StageRuntime::backward_input(int micro_batch, const torch::Tensor& output_gradient,
                                           double loss_factor) {
  PIPEPLAN_ASSERT(split_backward_, "backward_input on a stage whose schedule is not zb-h1");
  InFlight& entry = in_flight_.at(static_cast<size_t>(micro_batch));
  PIPEPLAN_ASSERT(entry.output.defined() && entry.layer_outputs.size() == layers_.size(),
                  "backward_input of micro-batch ", micro_batch, " before its forward");
  PIPEPLAN_ASSERT(entry.output_gradients.empty(), "second backward_input of micro-batch ",
                  micro_batch);
  torch::Tensor gradient = stage_output_gradient(entry, output_gradient, loss_factor);
  entry.output_gradients.assign(layers_.size(), torch::Tensor());
  for (size_t position = layers_.size(); position-- > 0;) {
    entry.output_gradients[position] = gradient;
    const torch::Tensor& root = layer_root(entry, position);
    const torch::Tensor& input = entry.layer_inputs[position];
    if (!gradient.defined() || !root.requires_grad() || !input.requires_grad()) {
      gradient = torch::Tensor();  // nothing flows further back (tokens, or the data)
      break;
    }
    gradient = torch::autograd::grad({root}, {input}, {gradient}, /*retain_graph=*/true,
                                     /*create_graph=*/false, /*allow_unused=*/true)[0];
  }
  return is_first() ? torch::Tensor() : gradient;
}

void StageRuntime::backward_weight(int micro_batch) {
  PIPEPLAN_ASSERT(split_backward_, "backward_weight on a stage whose schedule is not zb-h1");
  InFlight& entry = in_flight_.at(static_cast<size_t>(micro_batch));
  PIPEPLAN_ASSERT(entry.output_gradients.size() == layers_.size(), "backward_weight of micro-batch ",
                  micro_batch, " before its backward_input");
  std::vector<torch::Tensor> roots;
  std::vector<torch::Tensor> gradients;
  for (size_t position = 0; position < layers_.size(); ++position) {
    const torch::Tensor& root = layer_root(entry, position);
    if (!entry.output_gradients[position].defined() || !root.requires_grad()) continue;
    roots.push_back(root);
    gradients.push_back(entry.output_gradients[position]);
  }
  // One engine pass over all layers: a parameter used by two of them sums both uses' gradients
  // into its flat gradient view (AccumulateGrad adds in place), as one whole backward does.
  if (!roots.empty() && !trainable_parameters_.empty())
    torch::autograd::backward(roots, gradients, /*retain_graph=*/false, /*create_graph=*/false,
                              /*inputs=*/trainable_parameters_);
  entry = InFlight();
}

torch::Tensor StageRuntime::evaluate(const torch::Tensor& input, const torch::Tensor& target,
                                     int64_t* correct, int64_t* total) {
  torch::NoGradGuard no_grad;
  torch::Tensor output = run_layers(input, /*rng_seed=*/0);
  if (!is_last()) return output;
  const torch::Tensor predicted = output.argmax(-1);
  *correct += predicted.eq(target.to(predicted.device())).sum().item<int64_t>();
  *total += target.numel();
  return torch::Tensor();
}

void StageRuntime::set_training(bool training) {
  for (const models::LayerPtr& layer : layers_) layer->train(training);
}

}  // namespace pipeplan::executor
