// The model zoo's registry and the family-independent model functions.
#include "models/zoo.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"
#include "common/hash.h"
#include "models/config.h"
#include "models/torchscript.h"

namespace pipeplan::models {
namespace {

const ZooEntry& find_entry(const std::string& name) {
  for (const ZooEntry& entry : zoo())
    if (entry.name == name) return entry;
  std::string names;
  for (const ZooEntry& entry : zoo()) names += (names.empty() ? "" : ", ") + entry.name;
  throw Error(ErrorKind::kBadInput,
              detail::concat("unknown model ", quote(name), " (models: ", names,
                             "; or a TorchScript file: a path with '/' or ending in .pt)"));
}

Model finish(Model model) {
  model.hash = content_hash(model.name + "\n" + model.config.dump());
  return model;
}

}  // namespace

const std::vector<ZooEntry>& zoo() {
  static const std::vector<ZooEntry> entries = [] {
    std::vector<ZooEntry> all;
    for (auto&& family : {resnet_entries(), vit_entries(), gpt_entries(), mlp_entries()})
      for (const ZooEntry& entry : family) all.push_back(entry);
    return all;
  }();
  return entries;
}

std::vector<std::string> zoo_model_names() {
  std::vector<std::string> names;
  for (const ZooEntry& entry : zoo()) names.push_back(entry.name);
  return names;
}

Model make_model(const std::string& name, const std::vector<std::string>& model_args) {
  if (is_torchscript_path(name)) return finish(make_torchscript_model(name, model_args));
  const ZooEntry& entry = find_entry(name);
  return finish(entry.build(name, apply_model_args(name, entry.defaults, model_args)));
}

Model make_model_from_config(const std::string& name, const Json& config) {
  if (is_torchscript_path(name)) return finish(torchscript_model_from_config(name, config));
  const ZooEntry& entry = find_entry(name);
  return finish(entry.build(name, check_config_keys(name, entry.defaults, config)));
}

ModelRef model_ref(const Model& model) {
  ModelRef ref;
  ref.name = model.name;
  ref.config = model.config;
  ref.hash = model.hash;
  ref.num_layers = static_cast<int>(model.layers.size());
  ref.input_shape = model.input.sample_shape;
  ref.input_dtype = model.input.dtype == torch::kInt64 ? "int64" : "float32";
  return ref;
}

int64_t parameter_count(const Model& model) {
  int64_t total = 0;
  for (const LayerSpec& layer : model.layers) total += layer.param_count;
  for (const TiedParameter& tie : model.ties)
    total -= static_cast<int64_t>(tie.users.size() - 1) * tie.numel;
  return total;
}

std::vector<LayerPtr> build_layers(const Model& model, int first, int last, uint64_t seed,
                                   const TensorParallelGroupPtr& group) {
  PIPEPLAN_ASSERT(0 <= first && first <= last && last <= static_cast<int>(model.layers.size()),
                  "layer range [", first, ", ", last, ")");
  if (model.build_range) return model.build_range(first, last, group);
  std::vector<LayerPtr> layers;
  for (int layer_idx = first; layer_idx < last; ++layer_idx) {
    torch::manual_seed(mix_seed(seed, static_cast<uint64_t>(layer_idx)));
    const LayerSpec& spec = model.layers[layer_idx];
    const bool shard = group && group->size() > 1 && spec.build_shard;
    layers.push_back(shard ? spec.build_shard(group) : spec.build());
  }
  return layers;
}

bool tensor_parallel_fits(const Model& model, int tp) {
  for (const LayerSpec& spec : model.layers)
    for (const auto& [what, count] : spec.tp_divides)
      if (count % tp != 0) return false;
  return true;
}

void check_tensor_parallel(const Model& model, int tp, const std::string& field) {
  for (const LayerSpec& spec : model.layers)
    for (const auto& [what, count] : spec.tp_divides)
      PIPEPLAN_CHECK(count % tp == 0, field, ": ", tp, ": does not divide ", what, " = ", count,
                     " of layer ", quote(spec.name), " of model ", quote(model.name),
                     "; expected a divisor of ", count, " (the layer splits by its ", what, ")");
}

torch::Tensor forward_layers(const std::vector<LayerPtr>& layers, torch::Tensor input) {
  for (const LayerPtr& layer : layers) input = layer->forward(input);
  return input;
}

torch::Tensor compute_loss(const Model& model, const torch::Tensor& output,
                           const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  if (model.target.loss == LossKind::kNextTokenCrossEntropy)
    return F::cross_entropy(output.reshape({-1, output.size(-1)}).to(torch::kFloat32),
                            target.reshape({-1}));
  return F::cross_entropy(output.to(torch::kFloat32), target);
}

std::pair<torch::Tensor, torch::Tensor> random_batch(const Model& model, int64_t batch_size,
                                                      uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> input_shape{batch_size};
  input_shape.insert(input_shape.end(), model.input.sample_shape.begin(),
                     model.input.sample_shape.end());
  std::vector<int64_t> target_shape{batch_size};
  target_shape.insert(target_shape.end(), model.target.sample_shape.begin(),
                      model.target.sample_shape.end());
  torch::Tensor input =
      model.input.dtype == torch::kInt64
          ? torch::randint(model.input.token_range, input_shape, generator, torch::kInt64)
          : torch::randn(input_shape, generator, torch::kFloat32);
  torch::Tensor target =
      torch::randint(model.target.num_classes, target_shape, generator, torch::kInt64);
  return {input, target};
}

}  // namespace pipeplan::models
