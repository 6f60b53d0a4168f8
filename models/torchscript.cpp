// A user's own model from a TorchScript file: loading, the split into layers, layers running their
// graphs.
#include "models/torchscript.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/limits.h"
#include "models/script_graph.h"
#include "models/script_tensor_parallel.h"
#include "models/torch_error.h"
#include "models/torchscript_settings.h"

namespace pipeplan::models {
namespace {

namespace jit = torch::jit;

// Batch sizes of the two probe forwards that split a new model: more than one sample, so that a
// layer that mixes up the batch dimension shows, and two sizes, so that the batch dimension of
// each live tensor is told from the others.
constexpr int64_t kCheckBatchSize = 2;
constexpr int64_t kProbeBatchSize = 3;
// The leaf attribute every module has: a layer passes its own mode for it.
constexpr const char* kTrainingAttribute = "training";

// pipeplan trains float32 parameters: the flat buffers and optimizers are float32.
void check_parameters(const std::string& path, const jit::Module& module) {
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    PIPEPLAN_CHECK(item.value.scalar_type() == torch::kFloat32, "model ", quote(path),
                   ": parameter ", quote(item.name), " is ", item.value.scalar_type(),
                   "; pipeplan trains float32 parameters (call .float() before saving)");
}

// The holder of attribute path `path` under `root` ("" is root), made on first use, so that a
// layer's named_parameters() read as PyTorch's state_dict ("layer1.0.conv1.weight").
torch::nn::Module& holder_at(torch::nn::Module& root, const std::string& path) {
  torch::nn::Module* holder = &root;
  for (size_t start = 0; start < path.size();) {
    const size_t end = std::min(path.find('.', start), path.size());
    const std::string name = path.substr(start, end - start);
    const auto children = holder->named_children();
    const auto* found = children.find(name);
    holder = found != nullptr
                 ? found->get()
                 : holder->register_module(name, std::make_shared<torch::nn::Module>()).get();
    start = end + 1;
  }
  return *holder;
}

// Registers `source`'s parameters, buffers and children on `target` as the same tensors, so that
// updates reach the module. Every parameter is trained; a tensor reachable twice is registered
// once.
void mirror(const jit::Module& source, torch::nn::Module& target,
            std::unordered_set<const void*>* seen) {
  for (const auto& item : source.named_parameters(/*recurse=*/false))
    if (seen->insert(item.value.unsafeGetTensorImpl()).second)
      target.register_parameter(item.name, item.value, /*requires_grad=*/true);
  for (const auto& item : source.named_buffers(/*recurse=*/false))
    if (seen->insert(item.value.unsafeGetTensorImpl()).second)
      target.register_buffer(item.name, item.value);
  for (const auto& child : source.named_children())
    mirror(child.value, holder_at(target, child.name), seen);
}

// The live set packed into one tensor, each tensor's samples flattened side by side.
torch::Tensor pack_live(const c10::ivalue::Tuple& values) {
  if (values.elements().size() == 1) return values.elements()[0].toTensor();
  std::vector<torch::Tensor> flat;
  for (const c10::IValue& value : values.elements()) {
    const torch::Tensor tensor = value.toTensor();
    flat.push_back(tensor.reshape({tensor.size(0), -1}));
  }
  return torch::cat(flat, 1);
}

// One layer of the split: runs its graph on the module objects and attributes it reads, which it
// shares with the file's module: StageRuntime's set_data into the flat buffer and to(device)
// replace their storage in place, which the graph then uses. A layer split over a
// tensor-parallel group (split_layer) keeps the group reachable by its graph's collectives.
class TorchScriptLayer : public Layer {
 public:
  TorchScriptLayer(const jit::Module& top, const ScriptLayer& layer, std::string file,
                   std::shared_ptr<const ScriptGroupHandle> group = {})
      : function_(std::make_shared<jit::GraphFunction>("pipeplan_layer", layer.graph, nullptr)),
        live_in_(layer.live_in),
        name_(layer.name),
        file_(std::move(file)),
        group_(std::move(group)) {
    std::unordered_set<const void*> seen;
    for (const ScriptAttribute& attribute : layer.attributes) {
      if (attribute.is_module) {
        const jit::Module child = child_at(top, attribute.path);
        mirror(child, holder_at(*this, attribute.path), &seen);
        modules_.push_back(child);
        arguments_.push_back(child._ivalue());
        continue;
      }
      // "layer1.0.bn.running_mean": held by "layer1.0.bn" as "running_mean".
      const size_t dot = attribute.path.rfind('.');
      const std::string owner_path = dot == std::string::npos ? "" : attribute.path.substr(0, dot);
      const std::string name =
          dot == std::string::npos ? attribute.path : attribute.path.substr(dot + 1);
      if (name == kTrainingAttribute) training_slots_.push_back(arguments_.size());
      const c10::IValue value = attribute_value(top, attribute);
      arguments_.push_back(value);
      if (!value.isTensor() || !seen.insert(value.toTensor().unsafeGetTensorImpl()).second)
        continue;
      torch::nn::Module& holder = holder_at(*this, owner_path);
      if (is_parameter(top, attribute))
        holder.register_parameter(name, value.toTensor(), /*requires_grad=*/true);
      else
        holder.register_buffer(name, value.toTensor());
    }
    train(true);
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    // No profiling runs, specialisation or fusion: every run executes the module's own
    // operators with autograd, as PyTorch's eager mode does, so warm-up and timed runs agree.
    jit::GraphOptimizerEnabledGuard unoptimised(/*state=*/false);
    jit::Stack stack = arguments_;
    for (size_t slot : training_slots_) stack[slot] = c10::IValue(is_training());
    for (torch::Tensor& tensor : unpack_live(input, live_in_)) stack.push_back(std::move(tensor));
    try {
      function_->run(stack);
    } catch (const std::exception& error) {
      throw Error(ErrorKind::kRuntime, detail::concat("layer ", quote(name_), " of ", quote(file_),
                                                      ": ", error_line(error)));
    }
    return pack_live(stack.back().toTupleRef());
  }

  void train(bool on = true) override {
    Layer::train(on);
    for (jit::Module& module : modules_) module.train(on);
  }

 private:
  std::shared_ptr<jit::GraphFunction> function_;
  std::vector<jit::Module> modules_;    // the children it calls: their training mode
  std::vector<c10::IValue> arguments_;  // the graph's attribute inputs, in order
  std::vector<size_t> training_slots_;  // arguments that are a module's `training` flag
  std::vector<LiveTensor> live_in_;     // how the input unpacks
  std::string name_;                    // for errors
  std::string file_;
  std::shared_ptr<const ScriptGroupHandle> group_;  // its collectives' group, when split
};

// Before LibTorch opens it: a regular file (a FIFO would block the load) of a bounded size.
void check_file(const std::string& path) {
  std::error_code ec;
  PIPEPLAN_CHECK(std::filesystem::exists(path, ec), "model file ", quote(path), " does not exist",
                 ec ? " (" + ec.message() + ")" : "",
                 "; give a TorchScript file saved from PyTorch, or a zoo model name (pipeplan "
                 "models)");
  check_input_file(path, kMaxTensorFileBytes);
}

jit::Module load_module(const std::string& path) {
  check_file(path);
  try {
    return jit::load(path, torch::Device(torch::kCPU));
  } catch (const std::exception& error) {
    throw Error(ErrorKind::kBadInput,
                detail::concat("model file ", quote(path), " is not a TorchScript file (",
                               error_line(error), "); save it with torch.jit.script(model).save(",
                               quote(path), ")"));
  }
}

void check_unchanged(const std::string& path, const std::string& expected_hash) {
  check_file(path);
  const std::string hash = file_hash(path);
  PIPEPLAN_CHECK(hash == expected_hash, quote(path),
                 " changed since the plan was made: its content hash is ", hash,
                 ", model.config.file_hash is ", expected_hash,
                 "; profile and plan it again, or restore the file");
}

// The module split into layers by two probe forwards (eval mode, then back to training).
std::vector<ScriptLayer> split_module(const std::string& path, jit::Module module,
                                      const TorchScriptSettings& settings, torch::Tensor* output) {
  ProbeInputs probe;
  probe.inputs = settings_inputs(settings);
  probe.small = settings_input(settings, kCheckBatchSize);
  probe.large = settings_input(settings, kProbeBatchSize);
  probe.description = describe_input(settings);
  probe.hint = detail::concat("; check --model-arg input_shape, input_dtype",
                              settings.token_range > 0 ? " and token_range" : "");
  module.eval();
  std::vector<ScriptLayer> layers = split_forward(module, path, probe, settings.output, output);
  module.train(true);
  return layers;
}

// Loads the file and keeps the tensors of layers [first, last) only; the rest is freed on return.
// With a `group` of more than one rank, the layers whose MLPs split hold this rank's shards.
std::vector<LayerPtr> load_layers(const std::string& path, const std::string& expected_hash,
                                  const TorchScriptSettings& settings, int first, int last,
                                  const TensorParallelGroupPtr& group) {
  check_unchanged(path, expected_hash);
  jit::Module module = load_module(path);
  torch::Tensor output;
  const std::vector<ScriptLayer> split = split_module(path, module, settings, &output);
  PIPEPLAN_ASSERT(last <= static_cast<int>(split.size()), "layer range [", first, ", ", last,
                  ") of ", split.size(), " layers");
  const bool splits = group && group->size() > 1;
  const auto handle = splits ? std::make_shared<const ScriptGroupHandle>(group) : nullptr;
  const std::unordered_set<const void*> shared =
      splits ? shared_tensors(module, split) : std::unordered_set<const void*>();
  std::vector<LayerPtr> layers;
  for (int layer_idx = first; layer_idx < last; ++layer_idx) {
    std::optional<ScriptLayer> shard;
    if (splits) shard = split_layer(module, split[layer_idx], shared, group, handle->id());
    layers.push_back(shard ? std::make_shared<TorchScriptLayer>(module, *shard, path, handle)
                           : std::make_shared<TorchScriptLayer>(module, split[layer_idx], path));
  }
  return layers;
}

// The split of `layer`'s MLPs (find_split_mlps) as its spec states it: what tp must divide, how
// many all-reduces it runs, and how its shard is built (layer `layer_idx` loaded alone).
void describe_split(const std::vector<ScriptMlp>& mlps, int layer_idx, const std::string& path,
                    const std::string& hash, const TorchScriptSettings& settings, LayerSpec* spec) {
  if (mlps.empty()) return;
  // "mlp_dim" while the widths agree, else each MLP's by its first linear's weight.
  const bool one_width = std::all_of(mlps.begin(), mlps.end(), [&](const ScriptMlp& mlp) {
    return mlp.width == mlps.front().width;
  });
  if (one_width) spec->tp_divides.emplace_back("mlp_dim", mlps.front().width);
  for (const ScriptMlp& mlp : one_width ? std::vector<ScriptMlp>() : mlps)
    spec->tp_divides.emplace_back("mlp_dim of " + mlp.first, mlp.width);
  spec->tp_all_reduces = static_cast<int>(mlps.size());
  spec->build_shard = [path, hash, settings, layer_idx](const TensorParallelGroupPtr& group) {
    return load_layers(path, hash, settings, layer_idx, layer_idx + 1, group).front();
  };
}

Model assemble(const std::string& path, const std::string& hash,
               const TorchScriptSettings& settings, const jit::Module& module,
               const std::vector<ScriptLayer>& split) {
  Model model;
  model.name = path;
  model.config = settings_config(settings, hash);
  apply_settings(settings, &model);
  // Tensors registered by several layers are tied parameters, by their first user's order.
  std::vector<const void*> first_seen;
  std::unordered_map<const void*, TiedParameter> users;
  const std::unordered_set<const void*> shared = shared_tensors(module, split);
  for (const ScriptLayer& layer : split) {
    LayerSpec spec;
    spec.name = layer.name;
    spec.kind = layer.kind;
    describe_split(find_split_mlps(module, layer, shared), static_cast<int>(model.layers.size()),
                   path, hash, settings, &spec);
    // Counted on the layer as built, so that the count is what a stage trains (a tensor
    // reachable twice in it counted once).
    const TorchScriptLayer built(module, layer, path);
    for (const auto& parameter : built.named_parameters()) {
      spec.param_count += parameter.value().numel();
      const void* impl = parameter.value().unsafeGetTensorImpl();
      TiedParameter& tie = users[impl];
      if (tie.users.empty()) first_seen.push_back(impl);
      tie.users.push_back({static_cast<int>(model.layers.size()), parameter.key()});
      tie.numel = parameter.value().numel();
    }
    spec.live_out = layer.live_out;
    model.layers.push_back(std::move(spec));
  }
  for (const void* impl : first_seen)
    if (users.at(impl).users.size() > 1) model.ties.push_back(std::move(users.at(impl)));
  model.build_range = [path, hash, settings](int first, int last,
                                             const TensorParallelGroupPtr& group) {
    return load_layers(path, hash, settings, first, last, group);
  };
  return model;
}

}  // namespace

bool is_torchscript_path(const std::string& name) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return name.find('/') != std::string::npos || ends_with(".pt") || ends_with(".pth");
}

Model make_torchscript_model(const std::string& path, const std::vector<std::string>& model_args) {
  check_file(path);
  const std::string hash = file_hash(path);
  const jit::Module module = load_module(path);
  check_parameters(path, module);
  check_forward_signature(module, path);
  TorchScriptSettings settings = settings_from_args(path, module, model_args);
  torch::Tensor output;
  const std::vector<ScriptLayer> split = split_module(path, module, settings, &output);
  settle_from_output(path, output, &settings);
  return assemble(path, hash, settings, module, split);
}

Model torchscript_model_from_config(const std::string& path, const Json& config) {
  const TorchScriptSettings settings = settings_from_config(path, config);
  const std::string hash = config_file_hash(config);
  check_unchanged(path, hash);
  const jit::Module module = load_module(path);
  check_parameters(path, module);
  torch::Tensor output;
  const std::vector<ScriptLayer> split = split_module(path, module, settings, &output);
  return assemble(path, hash, settings, module, split);
}

}  // namespace pipeplan::models
