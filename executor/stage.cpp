// One rank's stage: flat parameters, forward, backward (whole or zb-h1's B and W), recompute,
// evaluation.
#include "executor/stage.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
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

namespace {

// Position in a stage's layers of model layer `layer_idx`, or -1 where the stage does not hold it.
int position_of(const std::vector<int>& layer_indices, int layer_idx) {
  const auto it = std::find(layer_indices.begin(), layer_indices.end(), layer_idx);
  return it == layer_indices.end() ? -1 : static_cast<int>(it - layer_indices.begin());
}

}  // namespace

uint64_t micro_batch_seed(uint64_t seed, int64_t step, int64_t global_micro_batch) {
  return mix_seed(mix_seed(seed, static_cast<uint64_t>(step)), static_cast<uint64_t>(global_micro_batch));
}

std::vector<std::vector<int>> tie_stages(const models::Model& model, const Plan& plan) {
  std::vector<std::vector<int>> stages;
  for (const models::TiedParameter& tie : model.ties) {
    std::vector<int> holders;
    for (const models::TiedParameter::User& user : tie.users)
      for (size_t chunk = 0; chunk < plan.stages.size(); ++chunk)
        if (plan.stages[chunk].first <= user.layer && user.layer < plan.stages[chunk].last)
          holders.push_back(static_cast<int>(chunk) % plan.pp);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    stages.push_back(std::move(holders));
  }
  return stages;
}

StageRuntime::StageRuntime(const models::Model& model, const Plan& plan, int stage_idx,
                           const torch::Device& device, uint64_t seed,
                           const models::TensorParallelGroupPtr& tp_group)
    : model_(model),
      stage_idx_(stage_idx),
      split_backward_(plan.schedule == Schedule::kZeroBubbleH1),
      precision_(plan.precision),
      device_(device) {
  const int num_chunks = static_cast<int>(plan.stages.size()) / plan.pp;
  PIPEPLAN_ASSERT(num_chunks == plan.virtual_stages && stage_idx >= 0 && stage_idx < plan.pp,
                  "stage ", stage_idx, " of a plan of ", plan.stages.size(),
                  " chunks over pp=", plan.pp);
  for (int local = 0; local < num_chunks; ++local) {
    const int index = chunk_index(plan.pp, stage_idx, local);
    const StagePlan& range = plan.stages.at(static_cast<size_t>(index));
    Chunk chunk;
    chunk.begin = layers_.size();
    chunk.plan_index = index;
    chunk.first_of_model = index == 0;
    chunk.last_of_model = index + 1 == static_cast<int>(plan.stages.size());
    chunk.checkpoint = range.checkpoint;
    for (int layer_idx : range.recompute_layers)
      chunk.recomputed.push_back(static_cast<size_t>(layer_idx - range.first));
    chunk.output_sample_shape = range.output_sample_shape;
    chunk.output_dtype =
        boundary_dtype(range.output_dtype, "stages[" + std::to_string(index) + "].output_dtype");
    for (models::LayerPtr& layer :
         models::build_layers(model, range.first, range.last, seed, tp_group)) {
      layer->to(device_);
      layers_.push_back(std::move(layer));
    }
    for (int layer_idx = range.first; layer_idx < range.last; ++layer_idx)
      layer_indices_.push_back(layer_idx);
    chunk.end = layers_.size();
    chunks_.push_back(std::move(chunk));
  }
  flatten_parameters();
  find_tied_gradients();
  check_recomputed_ties(plan);
}

// A recomputed layer accumulates its parameters' gradients in its own backward: one it shares
// with another layer of the rank would be accumulated twice in one backward, and the overlapped
// all-reduce, counting accumulations, would start its bucket early.
void StageRuntime::check_recomputed_ties(const Plan& plan) const {
  for (const models::TiedParameter& tie : model_.ties) {
    std::vector<const models::TiedParameter::User*> here;
    for (const models::TiedParameter::User& user : tie.users)
      if (position_of(layer_indices_, user.layer) >= 0) here.push_back(&user);
    if (here.size() < 2) continue;
    for (const StagePlan& range : plan.stages)
      for (int layer_idx : range.recompute_layers)
        for (const models::TiedParameter::User* user : here)
          PIPEPLAN_CHECK(user->layer != layer_idx, "stages[", &range - plan.stages.data(),
                         "].recompute_layers: layer ", layer_idx, " shares its parameter ",
                         quote(user->name), " with layer ",
                         (here.front() == user ? here.back() : here.front())->layer,
                         " of the same stage: expected layers that share no parameter with "
                         "another layer of their stage (its gradient would be accumulated twice "
                         "in one backward)");
  }
}

// A parameter tied between layers of one chunk is one tensor (build_layers shares it); between
// two chunks, each chunk's build made its own copy (the same values): the later copies are
// returned with the first copy, which they are to alias.
std::vector<std::pair<torch::Tensor, torch::Tensor>> StageRuntime::tied_copies() const {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (const models::TiedParameter& tie : model_.ties) {
    torch::Tensor first_copy;
    for (const models::TiedParameter::User& user : tie.users) {
      const int position = position_of(layer_indices_, user.layer);
      if (position < 0) continue;
      const auto parameters = layers_[static_cast<size_t>(position)]->named_parameters();
      const torch::Tensor* parameter = parameters.find(user.name);
      PIPEPLAN_ASSERT(parameter != nullptr, "layer ", user.layer, " has no parameter ",
                      quote(user.name));
      if (!first_copy.defined())
        first_copy = *parameter;
      else if (!parameter->is_same(first_copy))
        copies.emplace_back(*parameter, first_copy);
    }
  }
  return copies;
}

// Moves every parameter into one flat buffer (and its gradient into another) as views, so the
// optimizer, the gradient all-reduce and zeroing each touch one tensor.
void StageRuntime::flatten_parameters() {
  torch::NoGradGuard no_grad;
  const auto copies = tied_copies();
  std::vector<torch::Tensor> parameters;
  std::unordered_set<const void*> seen;  // a parameter tied across layers is moved once
  for (const auto& copy : copies) seen.insert(copy.first.unsafeGetTensorImpl());
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
  // Both copies of a parameter tied across chunks read the first's values and add into its
  // gradient, so that the rank sums both uses as one process does.
  for (auto [copy, first_copy] : copies) {
    copy.set_data(first_copy.detach());
    copy.mutable_grad() = first_copy.grad();
  }
}

void StageRuntime::find_tied_gradients() {
  for (const models::TiedParameter& tie : model_.ties) {
    tied_gradients_.emplace_back();
    for (const models::TiedParameter::User& user : tie.users) {
      const int position = position_of(layer_indices_, user.layer);
      if (position < 0) continue;
      const auto parameters = layers_[static_cast<size_t>(position)]->named_parameters();
      tied_gradients_.back() = parameters.find(user.name)->grad();
      break;
    }
  }
}

void StageRuntime::begin_iteration(int num_micro_batches) {
  num_micro_batches_ = num_micro_batches;
  in_flight_.resize(chunks_.size() * static_cast<size_t>(num_micro_batches));
  for (InFlight& entry : in_flight_) entry = InFlight();
}

StageRuntime::InFlight& StageRuntime::in_flight(int chunk, int micro_batch) {
  PIPEPLAN_ASSERT(
      chunk >= 0 && chunk < num_chunks() && micro_batch >= 0 && micro_batch < num_micro_batches_,
      "micro-batch ", micro_batch, " of chunk ", chunk, " outside the iteration");
  return in_flight_[static_cast<size_t>(chunk * num_micro_batches_ + micro_batch)];
}

// The chunk's layers one after another; each layer's random numbers come from its own seed (its
// model index, so the same whatever the split). With `layer_graphs`, each layer starts from a
// leaf cut off the previous layer's graph, so that B can stop at every layer boundary and W can
// skip the input gradients.
torch::Tensor StageRuntime::run_layers(
    const Chunk& chunk, torch::Tensor input, uint64_t rng_seed, InFlight* layer_graphs,
    std::vector<c10::intrusive_ptr<RecomputedLayer>>* recomputed) {
  const runtime::AutocastScope autocast(device_, precision_);
  if (layer_graphs != nullptr) {
    layer_graphs->layer_inputs.clear();
    layer_graphs->layer_outputs.clear();
    layer_graphs->output_gradients.clear();
  }
  if (recomputed != nullptr) recomputed->clear();
  auto next_recomputed = chunk.recomputed.begin();
  for (size_t position = chunk.begin; position < chunk.end; ++position) {
    torch::manual_seed(mix_seed(rng_seed, static_cast<uint64_t>(layer_indices_[position])));
    if (layer_graphs != nullptr) {
      // Integer inputs (tokens) and inputs that need no gradient pass as they are.
      if (input.requires_grad()) input = input.detach().requires_grad_(true);
      layer_graphs->layer_inputs.push_back(input);
    }
    if (recomputed != nullptr && next_recomputed != chunk.recomputed.end() &&
        *next_recomputed == position - chunk.begin) {
      ++next_recomputed;
      auto slot = c10::make_intrusive<RecomputedLayer>();
      slot->position = position;
      recomputed->push_back(slot);
      input = forward_keeping_input(*layers_[position], input, slot);
      continue;
    }
    input = layers_[position]->forward(input);
    if (layer_graphs != nullptr) layer_graphs->layer_outputs.push_back(input);
  }
  return input;
}

void StageRuntime::check_output(const Chunk& chunk, const torch::Tensor& output) const {
  const std::vector<int64_t>& shape = chunk.output_sample_shape;
  const bool same_shape = output.dim() == static_cast<int64_t>(shape.size()) + 1 &&
                          output.sizes().slice(1).equals(shape);
  PIPEPLAN_CHECK(same_shape && output.scalar_type() == chunk.output_dtype, "stage ",
                 chunk.plan_index, " produces ", format_shape(output.sizes().slice(1).vec()), " ",
                 output.scalar_type(), " per sample but the plan says stages[", chunk.plan_index,
                 "].output_sample_shape=", format_shape(shape), " ", chunk.output_dtype,
                 "; re-create the plan for this model");
}

// Keeps the graph's end (unless checkpointed) and returns what leaves the chunk.
torch::Tensor StageRuntime::finish_forward(const Chunk& chunk, InFlight& entry,
                                           torch::Tensor output, const torch::Tensor& target) {
  if (chunk.last_of_model) {
    torch::Tensor loss = models::compute_loss(model_, output, target);
    if (!chunk.checkpoint) entry.output = loss;
    return loss.detach();
  }
  check_output(chunk, output);
  if (!chunk.checkpoint) entry.output = output;
  return output.detach();
}

torch::Tensor StageRuntime::forward(int chunk_idx, int micro_batch, const torch::Tensor& input,
                                    const torch::Tensor& target, uint64_t rng_seed) {
  const Chunk& chunk = chunks_.at(chunk_idx);
  InFlight& entry = in_flight(chunk_idx, micro_batch);
  entry.rng_seed = rng_seed;
  entry.input = input;
  if (chunk.last_of_model && chunk.checkpoint) entry.target = target;
  if (chunk.checkpoint) {
    torch::NoGradGuard no_grad;
    return finish_forward(chunk, entry, run_layers(chunk, input, rng_seed), target);
  }
  if (!chunk.first_of_model && input.is_floating_point()) entry.input.requires_grad_(true);
  return finish_forward(chunk, entry,
                        run_layers(chunk, entry.input, rng_seed, split_backward_ ? &entry : nullptr,
                                   &entry.recomputed_layers),
                        target);
}

namespace {

// The buffers of some layers as they are now, to be put back after their recompute: a forward
// in training mode updates batch-norm running statistics (and their batch count), which the
// recompute of a forward that already updated them must not do a second time. Put back below
// autograd's version counting: the recomputed graph saved the statistics (its backward in
// training mode does not read them) and would refuse them as modified in place.
class BufferSnapshot {
 public:
  void add(torch::nn::Module& layer) {
    for (torch::Tensor& buffer : layer.buffers()) saved_.emplace_back(buffer, buffer.clone());
  }
  ~BufferSnapshot() {
    const at::AutoDispatchBelowADInplaceOrView below_version_counting;
    for (auto& [buffer, value] : saved_) buffer.copy_(value);
  }

 private:
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved_;
};

}  // namespace

void StageRuntime::recompute(int chunk_idx, int micro_batch) {
  const Chunk& chunk = chunks_.at(chunk_idx);
  PIPEPLAN_ASSERT(recomputes(chunk_idx), "recompute of a chunk without checkpointing");
  InFlight& entry = in_flight(chunk_idx, micro_batch);
  BufferSnapshot buffers;
  if (!chunk.checkpoint) {  // some layers: each from its kept input, seeded as its forward was
    const runtime::AutocastScope autocast(device_, precision_);
    PIPEPLAN_ASSERT(entry.recomputed_layers.size() == chunk.recomputed.size(),
                    "recompute of micro-batch ", micro_batch, " before its forward");
    for (const c10::intrusive_ptr<RecomputedLayer>& slot : entry.recomputed_layers) {
      torch::manual_seed(
          mix_seed(entry.rng_seed, static_cast<uint64_t>(layer_indices_[slot->position])));
      buffers.add(*layers_[slot->position]);
      recompute_layer(*layers_[slot->position], *slot);
    }
    return;
  }
  for (size_t position = chunk.begin; position < chunk.end; ++position)
    buffers.add(*layers_[position]);
  if (!chunk.first_of_model && entry.input.is_floating_point()) entry.input.requires_grad_(true);
  torch::Tensor output =
      run_layers(chunk, entry.input, entry.rng_seed, split_backward_ ? &entry : nullptr);
  entry.output = chunk.last_of_model ? models::compute_loss(model_, output, entry.target) : output;
}

torch::Tensor StageRuntime::chunk_output_gradient(const Chunk& chunk, const InFlight& entry,
                                                  const torch::Tensor& output_gradient,
                                                  double loss_factor) const {
  // The loss's gradient is the factor itself: what (loss · factor).backward() starts from.
  if (chunk.last_of_model) return torch::full_like(entry.output, loss_factor);
  PIPEPLAN_CHECK(output_gradient.sizes() == entry.output.sizes(), "stage ", chunk.plan_index,
                 " received a gradient of shape ", format_shape(output_gradient.sizes().vec()),
                 " for an activation of shape ", format_shape(entry.output.sizes().vec()));
  return output_gradient;
}

torch::Tensor StageRuntime::backward(int chunk_idx, int micro_batch,
                                     const torch::Tensor& output_gradient, double loss_factor) {
  if (split_backward_) {
    torch::Tensor input_gradient =
        backward_input(chunk_idx, micro_batch, output_gradient, loss_factor);
    backward_weight(chunk_idx, micro_batch);
    return input_gradient;
  }
  const Chunk& chunk = chunks_.at(chunk_idx);
  InFlight& entry = in_flight(chunk_idx, micro_batch);
  PIPEPLAN_ASSERT(entry.output.defined(), "backward of micro-batch ", micro_batch,
                  " before its forward");
  if (chunk.last_of_model)
    (entry.output * loss_factor).backward();
  else
    entry.output.backward(chunk_output_gradient(chunk, entry, output_gradient, loss_factor));
  torch::Tensor input_gradient = chunk.first_of_model ? torch::Tensor() : entry.input.grad();
  entry = InFlight();
  return input_gradient;
}

const torch::Tensor& StageRuntime::layer_root(const Chunk& chunk, const InFlight& entry,
                                              size_t position) const {
  return chunk.last_of_model && position + 1 == entry.layer_outputs.size()
             ? entry.output
             : entry.layer_outputs[position];
}

// Layer by layer from the last: each layer's graph gives the gradient of its input, which is
// the previous layer's output gradient. The graphs are kept for W.
torch::Tensor StageRuntime::backward_input(int chunk_idx, int micro_batch,
                                           const torch::Tensor& output_gradient,
                                           double loss_factor) {
  PIPEPLAN_ASSERT(split_backward_, "backward_input on a stage whose schedule is not zb-h1");
  const Chunk& chunk = chunks_.at(chunk_idx);
  InFlight& entry = in_flight(chunk_idx, micro_batch);
  PIPEPLAN_ASSERT(entry.output.defined() && entry.layer_outputs.size() == chunk.size(),
                  "backward_input of micro-batch ", micro_batch, " before its forward");
  PIPEPLAN_ASSERT(entry.output_gradients.empty(), "second backward_input of micro-batch ",
                  micro_batch);
  torch::Tensor gradient = chunk_output_gradient(chunk, entry, output_gradient, loss_factor);
  entry.output_gradients.assign(chunk.size(), torch::Tensor());
  for (size_t position = chunk.size(); position-- > 0;) {
    entry.output_gradients[position] = gradient;
    const torch::Tensor& root = layer_root(chunk, entry, position);
    const torch::Tensor& input = entry.layer_inputs[position];
    if (!gradient.defined() || !root.requires_grad() || !input.requires_grad()) {
      gradient = torch::Tensor();  // nothing flows further back (tokens, or the data)
      break;
    }
    gradient = torch::autograd::grad({root}, {input}, {gradient}, /*retain_graph=*/true,
                                     /*create_graph=*/false, /*allow_unused=*/true)[0];
  }
  return chunk.first_of_model ? torch::Tensor() : gradient;
}

void StageRuntime::backward_weight(int chunk_idx, int micro_batch) {
  PIPEPLAN_ASSERT(split_backward_, "backward_weight on a stage whose schedule is not zb-h1");
  const Chunk& chunk = chunks_.at(chunk_idx);
  InFlight& entry = in_flight(chunk_idx, micro_batch);
  PIPEPLAN_ASSERT(entry.output_gradients.size() == chunk.size(), "backward_weight of micro-batch ",
                  micro_batch, " before its backward_input");
  std::vector<torch::Tensor> roots;
  std::vector<torch::Tensor> gradients;
  for (size_t position = 0; position < chunk.size(); ++position) {
    const torch::Tensor& root = layer_root(chunk, entry, position);
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

torch::Tensor StageRuntime::infer(int chunk_idx, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  return run_layers(chunks_.at(chunk_idx), input, /*rng_seed=*/0);
}

void StageRuntime::release_gradients() {
  for (const models::LayerPtr& layer : layers_)
    for (torch::Tensor& parameter : layer->parameters()) parameter.mutable_grad() = torch::Tensor();
  tied_gradients_.clear();
  trainable_parameters_.clear();
  flat_gradients_ = torch::Tensor();
}

void StageRuntime::set_training(bool training) {
  for (const models::LayerPtr& layer : layers_) layer->train(training);
}

}  // namespace pipeplan::executor
