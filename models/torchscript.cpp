// A user's own model from a TorchScript file: loading, the chain check, layers sharing its tensors.
#include "models/torchscript.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <filesystem>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "common/hash.h"
#include "models/torch_error.h"
#include "models/torchscript_settings.h"

namespace pipeplan::models {
namespace {

namespace jit = torch::jit;

// Samples in the forward that checks a new model's settings: more than one, so that a layer
// that mixes up the batch dimension shows.
constexpr int64_t kCheckBatchSize = 2;

// A module reached from the file's top module and its attribute path ("0", "layers.3"; "" for
// the top one). The layers are such children.
struct Child {
  std::string path;
  jit::Module module;
};

std::string child_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// prim::GetAttr of a module: records the child it yields; anything else breaks the chain.
std::string read_child(const jit::Node* node,
                       std::unordered_map<const jit::Value*, Child>* modules) {
  const std::string name = node->s(c10::attr::name);
  const auto owner = modules->find(node->input());
  const auto type = node->output()->type()->cast<c10::ClassType>();
  if (owner == modules->end() || type == nullptr || !type->is_module())
    return "it reads attribute " + quote(name) + ", which is not a child module";
  (*modules)[node->output()] = {child_path(owner->second.path, name),
                                owner->second.module.attr(name).toModule()};
  return "";
}

// prim::CallMethod: must be a child's forward on the value the previous child returned.
std::string call_child(const jit::Node* node, const jit::Value* self,
                       const std::unordered_map<const jit::Value*, Child>& modules,
                       const jit::Value** current, std::vector<Child>* children) {
  const auto callee = modules.find(node->inputs().at(0));
  if (node->s(c10::attr::name) != "forward" || callee == modules.end() || node->input(0) == self)
    return "it calls method " + quote(node->s(c10::attr::name)) + " other than a child's forward";
  if (node->inputs().size() != 2 || node->input(1) != *current)
    return "child " + quote(callee->second.path) +
           " does not take the previous child's output alone";
  if (!node->output()->type()->isSubtypeOf(*c10::TensorType::get()))
    return "child " + quote(callee->second.path) + " does not return one tensor";
  children->push_back(callee->second);
  *current = node->output();
  return "";
}

// Why `module`'s forward is not a chain of its children, or "" when it is (then `children` holds
// them in call order): only constants, GetAttr of child modules, and CallMethod forward of a
// child on the previous child's output; the last output is returned.
std::string chain_of(const jit::Module& module, const std::string& prefix,
                     std::vector<Child>* children) {
  const c10::optional<jit::Method> forward = module.find_method("forward");
  if (!forward) return "it has no forward method";
  const std::shared_ptr<jit::Graph> graph = forward->graph();
  if (graph->inputs().size() != 2 ||
      !graph->inputs()[1]->type()->isSubtypeOf(*c10::TensorType::get()))
    return "its forward does not take exactly one tensor";
  const jit::Value* self = graph->inputs()[0];
  std::unordered_map<const jit::Value*, Child> modules{{self, Child{prefix, module}}};
  const jit::Value* current = graph->inputs()[1];
  for (const jit::Node* node : graph->nodes()) {
    std::string why;
    if (node->kind() == c10::prim::GetAttr) {
      why = read_child(node, &modules);
    } else if (node->kind() == c10::prim::CallMethod) {
      why = call_child(node, self, modules, &current, children);
    } else if (node->kind() != c10::prim::Constant) {  // a used constant shows in its user
      why = std::string("it runs ") + node->kind().toQualString();
    }
    if (!why.empty()) return why;
  }
  if (graph->outputs().size() != 1 || graph->outputs()[0] != current)
    return "it does not return the last child's output";
  return children->empty() ? "it calls no child" : "";
}

// The layers: the chained children, or those of a lone child that is itself such a chain.
std::vector<Child> chained_children(const jit::Module& module, const std::string& path) {
  std::vector<Child> children;
  const std::string why = chain_of(module, "", &children);
  PIPEPLAN_CHECK(why.empty(), "model ", quote(path), ": forward is not a chain of its children (",
                 why,
                 "); save a module whose forward only passes the input through its children "
                 "one after another, such as torch.jit.script(nn.Sequential(...))");
  for (std::vector<Child> inner; children.size() == 1; inner.clear()) {
    if (!chain_of(children[0].module, children[0].path, &inner).empty()) break;
    children = std::move(inner);
  }
  return children;
}

// Each layer needs its own parameters: weights tied across children (also a child used twice,
// which loads as two modules sharing tensors) would be copied onto different stages and trained
// apart.
void check_children(const std::string& path, const std::vector<Child>& children) {
  std::unordered_map<const void*, std::string> owners;
  for (const Child& child : children) {
    for (const auto& item : child.module.named_parameters(/*recurse=*/true)) {
      const std::string name = child.path + "." + item.name;
      PIPEPLAN_CHECK(item.value.scalar_type() == torch::kFloat32, "model ", quote(path),
                     ": parameter ", quote(name), " is ", item.value.scalar_type(),
                     "; pipeplan trains float32 parameters (call .float() before saving)");
      const auto [tied, own] = owners.emplace(item.value.unsafeGetTensorImpl(), child.path);
      PIPEPLAN_CHECK(own || tied->second == child.path, "model ", quote(path), ": parameter ",
                     quote(name), " is tied to one of layer ", quote(tied->second),
                     "; weights shared across layers are not supported");
    }
  }
}

// Registers `source`'s parameters, buffers and children on `target` as the same tensors, so that
// named_parameters() reads as PyTorch's state_dict ("fc.weight") and updates reach the module.
// Every parameter is trained; a tensor reachable twice is registered once.
void mirror(const jit::Module& source, torch::nn::Module& target,
            std::unordered_set<const void*>* seen) {
  for (const auto& item : source.named_parameters(/*recurse=*/false))
    if (seen->insert(item.value.unsafeGetTensorImpl()).second)
      target.register_parameter(item.name, item.value, /*requires_grad=*/true);
  for (const auto& item : source.named_buffers(/*recurse=*/false))
    if (seen->insert(item.value.unsafeGetTensorImpl()).second)
      target.register_buffer(item.name, item.value);
  for (const auto& child : source.named_children()) {
    auto holder = std::make_shared<torch::nn::Module>();
    mirror(child.value, *holder, seen);
    target.register_module(child.name, holder);
  }
}

// One child module as a layer. Its tensors are those of the module: StageRuntime's set_data
// into the flat buffer and to(device) replace their storage in place, which forward then uses.
class TorchScriptLayer : public Layer {
 public:
  TorchScriptLayer(Child child, std::string file)
      : module_(std::move(child.module)), name_(std::move(child.path)), file_(std::move(file)) {
    std::unordered_set<const void*> seen;
    mirror(module_, *this, &seen);
    module_.train(true);
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    // No profiling runs, specialisation or fusion: every run executes the module's own
    // operators with autograd, as PyTorch's eager mode does, so warm-up and timed runs agree.
    jit::GraphOptimizerEnabledGuard unoptimised(/*state=*/false);
    try {
      return module_.forward({input}).toTensor();
    } catch (const std::exception& error) {
      throw Error(ErrorKind::kRuntime, detail::concat("layer ", quote(name_), " of ", quote(file_),
                                                      ": ", error_line(error)));
    }
  }

  void train(bool on = true) override {
    Layer::train(on);
    module_.train(on);
  }

 private:
  jit::Module module_;
  std::string name_;  // attribute path, for errors
  std::string file_;
};

void check_file(const std::string& path) {
  PIPEPLAN_CHECK(std::filesystem::is_regular_file(path), "model file ", quote(path),
                 " does not exist; give a TorchScript file saved from PyTorch, or a zoo model "
                 "name (pipeplan models)");
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

// Loads the file and keeps children [first, last) only; the rest is freed on return.
std::vector<LayerPtr> load_layers(const std::string& path, const std::string& expected_hash,
                                  int first, int last) {
  check_unchanged(path, expected_hash);
  const std::vector<Child> children = chained_children(load_module(path), path);
  PIPEPLAN_ASSERT(last <= static_cast<int>(children.size()), "layer range [", first, ", ", last,
                  ") of ", children.size(), " children");
  std::vector<LayerPtr> layers;
  for (int layer_idx = first; layer_idx < last; ++layer_idx)
    layers.push_back(std::make_shared<TorchScriptLayer>(children[layer_idx], path));
  return layers;
}

// The class name without its TorchScript prefixes: "Linear", "Sequential", "Block".
std::string class_name(const jit::Module& module) {
  const auto name = module.type()->name();
  return name ? name->name() : "module";
}

int64_t child_parameter_count(const jit::Module& module) {
  std::unordered_set<const void*> seen;
  int64_t count = 0;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (seen.insert(item.value.unsafeGetTensorImpl()).second) count += item.value.numel();
  return count;
}

// One forward of a small batch in eval mode, layer by layer, so that a failure names its layer;
// then the output settles num_classes. The module is discarded afterwards.
void check_forward(const std::string& path, const std::vector<Child>& children,
                   TorchScriptSettings* settings) {
  torch::NoGradGuard no_grad;
  jit::GraphOptimizerEnabledGuard unoptimised(/*state=*/false);
  torch::Tensor activation = settings_input(*settings, kCheckBatchSize);
  for (const Child& child : children) {
    jit::Module module = child.module;
    module.eval();
    try {
      activation = module.forward({activation}).toTensor();
    } catch (const std::exception& error) {
      throw Error(ErrorKind::kBadInput,
                  detail::concat("model ", quote(path), ": layer ", quote(child.path), " fails on ",
                                 kCheckBatchSize, " samples of ", describe_input(*settings), " (",
                                 error_line(error), "); check --model-arg input_shape, input_dtype",
                                 settings->token_range > 0 ? " and token_range" : ""));
    }
  }
  settle_from_output(path, activation, settings);
}

Model assemble(const std::string& path, const std::string& hash,
               const TorchScriptSettings& settings, const std::vector<Child>& children) {
  Model model;
  model.name = path;
  model.config = settings_config(settings, hash);
  apply_settings(settings, &model);
  for (int layer_idx = 0; layer_idx < static_cast<int>(children.size()); ++layer_idx) {
    LayerSpec spec;
    spec.name = children[layer_idx].path;
    spec.kind = class_name(children[layer_idx].module);
    spec.param_count = child_parameter_count(children[layer_idx].module);
    model.layers.push_back(std::move(spec));
  }
  model.build_range = [path, hash](int first, int last) {
    return load_layers(path, hash, first, last);
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
  const std::vector<Child> children = chained_children(module, path);
  check_children(path, children);
  TorchScriptSettings settings = settings_from_args(path, module, model_args);
  check_forward(path, children, &settings);
  return assemble(path, hash, settings, children);
}

Model torchscript_model_from_config(const std::string& path, const Json& config) {
  const TorchScriptSettings settings = settings_from_config(path, config);
  const std::string hash = config_file_hash(config);
  check_unchanged(path, hash);
  const std::vector<Child> children = chained_children(load_module(path), path);
  check_children(path, children);
  return assemble(path, hash, settings, children);
}

}  // namespace pipeplan::models
