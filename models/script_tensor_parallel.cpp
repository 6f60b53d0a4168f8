// A TorchScript layer's MLPs proven splittable in its graph, their shards, and the two graph
// operators that carry the tensor-parallel collectives.
#include "models/script_tensor_parallel.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/library.h>

#include <atomic>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "common/error.h"

namespace pipeplan::models {
namespace {

namespace jit = torch::jit;

// Nesting depth of calls inlined; deeper ones stay calls, and a graph that keeps a module call
// splits nothing.
constexpr int kMaxInlineDepth = 64;

// The groups graphs reach by id (ScriptGroupHandle). Never destroyed, so that a layer released
// during static destruction still finds them.
std::mutex& registry_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

std::unordered_map<int64_t, TensorParallelGroupPtr>& registry() {
  static auto* groups = new std::unordered_map<int64_t, TensorParallelGroupPtr>;
  return *groups;
}

TensorParallelGroupPtr registered_group(int64_t group_id) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  const auto found = registry().find(group_id);
  PIPEPLAN_ASSERT(found != registry().end(), "tensor-parallel group ", group_id,
                  " is not registered");
  return found->second;
}

torch::Tensor tp_copy(const torch::Tensor& input, int64_t group_id) {
  return copy_to_tensor_parallel(input, registered_group(group_id));
}

torch::Tensor tp_reduce(const torch::Tensor& input, int64_t group_id) {
  return reduce_from_tensor_parallel(input, registered_group(group_id));
}

// Registered as composite kernels: the autograd functions inside record the backward.
TORCH_LIBRARY(pipeplan, library) {
  library.def("tp_copy(Tensor input, int group) -> Tensor", &tp_copy);
  library.def("tp_reduce(Tensor input, int group) -> Tensor", &tp_reduce);
}

// `names` as symbols.
std::unordered_set<c10::Symbol> symbols(std::initializer_list<const char*> names) {
  std::unordered_set<c10::Symbol> set;
  for (const char* name : names) set.insert(c10::Symbol::fromQualString(name));
  return set;
}

// Element-wise activations that may sit between the two linears: one tensor in, the rest
// non-tensor arguments (gelu's approximation).
bool is_activation(const jit::Node* node) {
  static const std::unordered_set<c10::Symbol> kinds =
      symbols({"aten::relu", "aten::relu_", "aten::gelu", "aten::gelu_", "aten::silu",
               "aten::silu_", "aten::tanh", "aten::sigmoid"});
  if (kinds.count(node->kind()) == 0 || node->outputs().size() != 1) return false;
  for (size_t input_idx = 1; input_idx < node->inputs().size(); ++input_idx)
    if (node->input(input_idx)->type()->kind() == c10::TypeKind::TensorType) return false;
  return true;
}

// Nodes after which nothing in the graph is proven: a call Inline could not open (an interface
// method), an attribute written.
bool is_opaque(const jit::Node* node) {
  static const std::unordered_set<c10::Symbol> kinds =
      symbols({"prim::CallMethod", "prim::CallFunction", "prim::SetAttr"});
  return kinds.count(node->kind()) != 0;
}

// Attribute types whose values the finder can account for: modules, tensors (an optional one:
// a bias), and scalars. A list, dict, tuple or interface could hold a parameter out of sight.
bool is_accounted_type(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::ClassType:
    case c10::TypeKind::TensorType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NumberType:
    case c10::TypeKind::DeviceObjType:
      return true;
    case c10::TypeKind::OptionalType:
      return type->expectRef<c10::OptionalType>().getElementType()->kind() ==
             c10::TypeKind::TensorType;
    default:
      return false;
  }
}

std::string joined(const std::string& owner, const std::string& name) {
  return owner.empty() ? name : owner + "." + name;
}

// The attribute value at `path` of `module` (a child module's object for a module path).
c10::IValue value_at(const jit::Module& module, const std::string& path) {
  if (path.empty()) return module._ivalue();
  return attribute_value(module, ScriptAttribute{path, false});
}

// One inlined layer graph read against its module: which attribute each value is, how often
// each tensor is read, and the MLPs that split.
class MlpFinder {
 public:
  MlpFinder(const jit::Module& module, const ScriptLayer& layer, jit::Graph& graph,
            const std::unordered_set<const void*>& shared)
      : module_(module), graph_(graph), shared_(shared) {
    for (size_t input_idx = 0; input_idx < layer.attributes.size(); ++input_idx)
      paths_[graph.inputs()[input_idx]] = layer.attributes[input_idx].path;
    read_block(graph.block());
  }

  struct Match {
    jit::Node* first = nullptr;
    jit::Node* second = nullptr;
    ScriptMlp mlp;
    std::string first_bias;   // "" without one
    std::string second_bias;  // "" without one
  };

  std::vector<Match> matches() const {
    std::vector<Match> found;
    if (opaque_) return found;
    std::unordered_set<const jit::Node*> taken;
    for (jit::Node* node : graph_.nodes()) {
      if (node->kind() != c10::aten::linear || taken.count(node) != 0) continue;
      std::optional<Match> match = match_from(node);
      if (!match) continue;
      taken.insert(match->second);
      found.push_back(std::move(*match));
    }
    return found;
  }

 private:
  // Paths of attribute reads, tensors' read counts, and whether a module object escapes.
  void read_block(jit::Block* block) {
    for (jit::Node* node : block->nodes()) {
      opaque_ = opaque_ || is_opaque(node);
      if (node->kind() == c10::prim::GetAttr && paths_.count(node->input()) != 0)
        paths_[node->output()] = joined(paths_.at(node->input()), node->s(c10::attr::name));
      for (jit::Block* inner : node->blocks()) read_block(inner);
    }
    if (block != graph_.block()) return;
    for (const auto& [value, path] : paths_) {
      opaque_ = opaque_ || !is_accounted_type(value->type());
      if (const auto type = value->type()->cast<c10::ClassType>()) {
        for (const jit::Use& use : value->uses())
          opaque_ = opaque_ || use.user->kind() != c10::prim::GetAttr;
        continue;
      }
      const c10::IValue held = value_at(module_, path);
      if (held.isTensor()) reads_[held.toTensor().unsafeGetTensorImpl()] += value->uses().size();
    }
  }

  // The float32 parameter `value` reads, used only here and by no other layer; undefined else.
  torch::Tensor parameter(const jit::Value* value, std::string* path) const {
    const auto found = paths_.find(value);
    if (found == paths_.end()) return {};
    const c10::IValue held = value_at(module_, found->second);
    if (!held.isTensor()) return {};
    const torch::Tensor tensor = held.toTensor();
    const void* impl = tensor.unsafeGetTensorImpl();
    if (tensor.scalar_type() != torch::kFloat32 || shared_.count(impl) != 0 ||
        reads_.at(impl) != 1 || !is_parameter(module_, ScriptAttribute{found->second, false}))
      return {};
    *path = found->second;
    return tensor;
  }

  // A dropout whose rate is 0, a constant or an attribute (nn.Dropout's p; attributes are not
  // written: is_opaque): the identity. At any other rate each rank would draw one mask over its
  // own slice of the hidden features, which one process does not do.
  bool is_identity_dropout(const jit::Node* node) const {
    static const std::unordered_set<c10::Symbol> kinds =
        symbols({"aten::dropout", "aten::dropout_"});
    if (kinds.count(node->kind()) == 0 || node->inputs().size() != 3) return false;
    const jit::Value* rate = node->input(1);
    std::optional<c10::IValue> value;
    if (const c10::optional<c10::IValue> constant = jit::toIValue(rate)) value = *constant;
    const auto found = paths_.find(rate);
    if (!value && found != paths_.end()) value = value_at(module_, found->second);
    return value && value->isDouble() && value->toDouble() == 0.0;
  }

  // Whether a linear's bias is absent (a None constant or a None attribute).
  bool no_bias(const jit::Value* value) const {
    if (value->type()->kind() == c10::TypeKind::NoneType) return true;
    const auto found = paths_.find(value);
    return found != paths_.end() && value_at(module_, found->second).isNone();
  }

  // A bias of `features` elements, or none; false when it is neither.
  bool bias_fits(const jit::Value* value, int64_t features, std::string* path) const {
    if (no_bias(value)) return true;
    const torch::Tensor bias = parameter(value, path);
    return bias.defined() && bias.dim() == 1 && bias.size(0) == features;
  }

  std::optional<Match> match_from(jit::Node* first) const {
    Match match;
    match.first = first;
    const torch::Tensor weight = parameter(first->input(1), &match.mlp.first);
    if (!weight.defined() || weight.dim() != 2) return std::nullopt;
    match.mlp.width = weight.size(0);
    if (!bias_fits(first->input(2), match.mlp.width, &match.first_bias)) return std::nullopt;
    // Through the element-wise ops to the second linear, every value used once.
    jit::Value* value = first->output();
    for (;;) {
      if (value->uses().size() != 1 || value->uses()[0].offset != 0) return std::nullopt;
      jit::Node* user = value->uses()[0].user;
      if (user->owningBlock() != graph_.block()) return std::nullopt;
      if (user->kind() == c10::aten::linear) {
        match.second = user;
        break;
      }
      if (!is_activation(user) && !is_identity_dropout(user)) return std::nullopt;
      value = user->output();
    }
    const torch::Tensor second = parameter(match.second->input(1), &match.mlp.second);
    if (!second.defined() || second.dim() != 2 || second.size(1) != match.mlp.width ||
        !bias_fits(match.second->input(2), second.size(0), &match.second_bias))
      return std::nullopt;
    return match;
  }

  const jit::Module& module_;
  jit::Graph& graph_;
  const std::unordered_set<const void*>& shared_;
  std::unordered_map<const jit::Value*, std::string> paths_;
  std::unordered_map<const void*, size_t> reads_;  // uses of each tensor's values
  bool opaque_ = false;
};

// Whether `block` still calls a function or method that has a graph.
bool has_calls(jit::Block* block) {
  for (jit::Node* node : block->nodes()) {
    if (jit::tryToGraphFunction(node) != nullptr) return true;
    for (jit::Block* inner : node->blocks())
      if (has_calls(inner)) return true;
  }
  return false;
}

// `layer`'s graph with every call inlined and the branches on constants taken (F.silu's and
// F.dropout's `inplace`), so that a functional activation is one node. jit::Inline inlines the
// callee's optimised graph, which while graph optimisation is off (once a layer has run under
// TorchScriptLayer's guard) is its unoptimised graph, calls and all, and does not revisit what
// it inserted; so it runs until no call is left. ConstantPropagationImmutableTypes folds only
// ints, bools, strings and such: no tensor op is run ahead.
std::shared_ptr<jit::Graph> inlined(const ScriptLayer& layer) {
  std::shared_ptr<jit::Graph> graph = layer.graph->copy();
  for (int round = 0; round < kMaxInlineDepth && has_calls(graph->block()); ++round)
    jit::Inline(*graph);
  jit::ConstantPropagationImmutableTypes(graph);
  return graph;
}

// Replaces the parameter at `path` by rank `rank`'s slice of `parts` along `dim`.
void slice_parameter(jit::Module& module, const std::string& path, int64_t dim, int rank,
                     int parts) {
  auto [owner, name] = attribute_owner(module, ScriptAttribute{path, false});
  const torch::Tensor whole = owner.attr(name).toTensor();
  const int64_t size = whole.size(dim) / parts;
  torch::Tensor shard = whole.detach().narrow(dim, rank * size, size).clone();
  shard.set_requires_grad(true);
  owner.register_parameter(name, shard, /*is_buffer=*/false);
}

// Wraps `match` in the group's collectives: f before the first linear, the second linear's bias
// moved after g.
void wrap_in_collectives(jit::Graph& graph, const MlpFinder::Match& match, int64_t group_id) {
  static const c10::Symbol kCopy = c10::Symbol::fromQualString("pipeplan::tp_copy");
  static const c10::Symbol kReduce = c10::Symbol::fromQualString("pipeplan::tp_reduce");
  {
    const jit::WithInsertPoint before(match.first);
    jit::Value* id = graph.insertConstant(group_id);
    match.first->replaceInput(0, graph.insert(kCopy, {match.first->input(0), id}));
  }
  jit::Node* second = match.second;
  jit::Value* bias = second->input(2);
  {
    const jit::WithInsertPoint before(second);
    second->replaceInput(2, graph.insertConstant(c10::IValue()));
  }
  const jit::WithInsertPoint after(second->next());
  jit::Value* partial = second->output();
  jit::Value* summed = graph.insert(kReduce, {partial, graph.insertConstant(group_id)});
  if (!match.second_bias.empty()) {
    if (bias->type()->kind() != c10::TypeKind::TensorType)
      bias = graph.insertUncheckedCast(bias, c10::TensorType::get());
    // In the bias's dtype the sum would promote an autocast product back to float32.
    bias = graph.insert(c10::aten::type_as, {bias, summed});
    summed = graph.insert(c10::aten::add, {summed, bias});
  }
  partial->replaceAllUsesAfterNodeWith(summed->node(), summed);
}

}  // namespace

std::unordered_set<const void*> shared_tensors(const jit::Module& module,
                                               const std::vector<ScriptLayer>& split) {
  std::unordered_map<const void*, int> readers;
  for (const ScriptLayer& layer : split) {
    std::unordered_set<const void*> read;
    for (const ScriptAttribute& attribute : layer.attributes) {
      if (!attribute.is_module) {
        const c10::IValue value = attribute_value(module, attribute);
        if (value.isTensor()) read.insert(value.toTensor().unsafeGetTensorImpl());
        continue;
      }
      const jit::Module child = child_at(module, attribute.path);
      for (const torch::Tensor& tensor : child.parameters(/*recurse=*/true))
        read.insert(tensor.unsafeGetTensorImpl());
      for (const torch::Tensor& tensor : child.buffers(/*recurse=*/true))
        read.insert(tensor.unsafeGetTensorImpl());
    }
    for (const void* impl : read) ++readers[impl];
  }
  std::unordered_set<const void*> shared;
  for (const auto& [impl, count] : readers)
    if (count > 1) shared.insert(impl);
  return shared;
}

std::vector<ScriptMlp> find_split_mlps(const jit::Module& module, const ScriptLayer& layer,
                                       const std::unordered_set<const void*>& shared) {
  const std::shared_ptr<jit::Graph> graph = inlined(layer);
  std::vector<ScriptMlp> mlps;
  for (const MlpFinder::Match& match : MlpFinder(module, layer, *graph, shared).matches())
    mlps.push_back(match.mlp);
  return mlps;
}

std::optional<ScriptLayer> split_layer(jit::Module& module, const ScriptLayer& layer,
                                       const std::unordered_set<const void*>& shared,
                                       const TensorParallelGroupPtr& group, int64_t group_id) {
  ScriptLayer shard = layer;
  shard.graph = inlined(layer);
  const std::vector<MlpFinder::Match> matches =
      MlpFinder(module, layer, *shard.graph, shared).matches();
  if (matches.empty()) return std::nullopt;
  const int rank = group->rank();
  const int tp = group->size();
  for (const MlpFinder::Match& match : matches) {
    PIPEPLAN_ASSERT(match.mlp.width % tp == 0, "width ", match.mlp.width, " over ", tp, " ranks");
    slice_parameter(module, match.mlp.first, /*dim=*/0, rank, tp);
    if (!match.first_bias.empty()) slice_parameter(module, match.first_bias, /*dim=*/0, rank, tp);
    slice_parameter(module, match.mlp.second, /*dim=*/1, rank, tp);
    wrap_in_collectives(*shard.graph, match, group_id);
  }
  shard.graph->lint();
  return shard;
}

ScriptGroupHandle::ScriptGroupHandle(TensorParallelGroupPtr group) {
  static std::atomic<int64_t> next_id{0};
  id_ = next_id++;
  const std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[id_] = std::move(group);
}

ScriptGroupHandle::~ScriptGroupHandle() {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(id_);
}

}  // namespace pipeplan::models
