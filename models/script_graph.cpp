// Splits a TorchScript forward graph into layers: containers opened, segments ending at child
// calls, live sets found by a probe forward, cuts kept where the live set packs into one tensor.
#include "models/script_graph.h"

#include <c10/util/accumulate.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/error.h"
#include "models/torch_error.h"

namespace pipeplan::models {
namespace {

namespace jit = torch::jit;

// Ops that turn a tensor's values into a Python scalar: control flow on their result depends on
// the data, which a split graph cannot follow.
const std::unordered_set<std::string> kTensorToScalarOps = {
    "aten::Bool",        "aten::Int",           "aten::Float",
    "aten::item",        "aten::is_nonzero",    "aten::ScalarImplicit",
    "aten::IntImplicit", "aten::FloatImplicit", "aten::equal",
    "aten::allclose",    "aten::tolist",        "prim::tolist"};

using NodeIndex = std::unordered_map<const jit::Node*, size_t>;

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

bool is_tensor(const jit::Value* value) {
  return value->type()->isSubtypeOf(*c10::TensorType::get());
}

bool is_module_type(const jit::Value* value) {
  const auto type = value->type()->cast<c10::ClassType>();
  return type != nullptr && type->is_module();
}

// "aten::add_ at model.py:12" for errors.
std::string describe_node(const jit::Node* node) {
  std::string text = node->kind().toQualString();
  if (const auto location = node->sourceRange().file_line_col())
    text += " at " + std::get<0>(*location) + ":" + std::to_string(std::get<1>(*location));
  return text;
}

// The node of the graph's top block that `node` is (or is nested in).
const jit::Node* top_level(const jit::Node* node, const jit::Block* top) {
  while (node->owningBlock() != top) node = node->owningBlock()->owningNode();
  return node;
}

// The largest index (by `index_of`, over top-level nodes) of a node that uses `value`, nested
// uses counting as their top-level node's; `past_end` for the graph's return.
size_t last_use(const jit::Value* value, const jit::Graph& graph, const NodeIndex& index_of,
                size_t past_end) {
  size_t last = 0;
  for (const jit::Use& use : value->uses()) {
    const jit::Node* user = top_level(use.user, graph.block());
    last = std::max(last, user == graph.return_node() ? past_end : index_of.at(user));
  }
  return last;
}

// Whether a value probed at two batch sizes is one tensor whose first dimension is the batch
// (the other dimensions the same at both sizes), in a dtype a stage boundary carries.
bool batch_first_tensor(const c10::IValue& small, const c10::IValue& large, int64_t small_rows,
                        int64_t large_rows) {
  if (!small.isTensor() || !large.isTensor()) return false;
  const torch::Tensor x = small.toTensor(), y = large.toTensor();
  const auto dtype = x.scalar_type();
  const bool boundary_dtype = dtype == torch::kFloat32 || dtype == torch::kInt64 ||
                              dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  return boundary_dtype && x.dim() >= 1 && x.dim() == y.dim() && x.size(0) == small_rows &&
         y.size(0) == large_rows && x.sizes().slice(1) == y.sizes().slice(1);
}

// Whether `module`'s forward is a chain through its children with functional ops and its own
// parameters or buffers in between (torchvision's ViT Encoder: add the positional embedding,
// dropout, the blocks, the norm): one tensor in and out, some child's forward called, a
// parameter or buffer held by the module itself, and no tensor feeding two nodes that make
// tensors, so that a residual block (its input feeds its first layer and its sum) stays whole.
bool chains_through_own_state(const jit::Module& module) {
  if (module.parameters(/*recurse=*/false).size() == 0 &&
      module.buffers(/*recurse=*/false).size() == 0)
    return false;
  const c10::optional<jit::Method> forward = module.find_method("forward");
  if (!forward) return false;
  const std::shared_ptr<jit::Graph> graph = forward->graph();
  if (graph->inputs().size() != 2 || !is_tensor(graph->inputs()[1]) ||
      graph->outputs().size() != 1 || !is_tensor(graph->outputs()[0]))
    return false;
  const auto forks = [&](const jit::Value* value) {
    std::unordered_set<const jit::Node*> tensor_users;
    for (const jit::Use& use : value->uses()) {
      const jit::Node* user = top_level(use.user, graph->block());
      if (user == graph->return_node()) continue;
      for (const jit::Value* output : user->outputs())
        if (is_tensor(output)) tensor_users.insert(user);
    }
    return tensor_users.size() > 1;
  };
  if (forks(graph->inputs()[1])) return false;
  int calls = 0;
  for (const jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::prim::CallMethod) {
      if (node->input(0) == graph->inputs()[0] || node->s(c10::attr::name) != "forward")
        return false;
      ++calls;
    }
    for (const jit::Value* output : node->outputs())
      if (is_tensor(output) && forks(output)) return false;
  }
  return calls > 0;
}

// Whether `module`'s forward only chains its children: one tensor in, each child's forward on
// the previous output, the last output returned, nothing else but constants and reading children.
bool chains_children(const jit::Module& module) {
  const c10::optional<jit::Method> forward = module.find_method("forward");
  if (!forward) return false;
  const std::shared_ptr<jit::Graph> graph = forward->graph();
  if (graph->inputs().size() != 2 || !is_tensor(graph->inputs()[1])) return false;
  std::unordered_set<const jit::Value*> modules{graph->inputs()[0]};
  const jit::Value* current = graph->inputs()[1];
  int calls = 0;
  for (const jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::prim::GetAttr) {
      if (!modules.count(node->input()) || !is_module_type(node->output())) return false;
      modules.insert(node->output());
    } else if (node->kind() == c10::prim::CallMethod) {
      if (node->s(c10::attr::name) != "forward" || node->input(0) == graph->inputs()[0] ||
          !modules.count(node->input(0)) || node->inputs().size() != 2 ||
          node->input(1) != current || !is_tensor(node->output()))
        return false;
      current = node->output();
      ++calls;
    } else if (node->kind() != c10::prim::Constant) {
      return false;
    }
  }
  return calls > 0 && graph->outputs().size() == 1 && graph->outputs()[0] == current;
}

// Splits one forward graph; the phases run in the order of split_forward's contract.
class Splitter {
 public:
  Splitter(const jit::Module& module, std::string file, std::string output_element = "")
      : module_(module), file_(std::move(file)), output_element_(std::move(output_element)) {
    const c10::optional<jit::Method> forward = module.find_method("forward");
    if (!forward) refuse("it has no forward method");
    graph_ = forward->graph()->copy();
  }

  std::vector<ScriptLayer> split(const ProbeInputs& probe, torch::Tensor* output);
  void check_signature() const;
  size_t num_inputs() const { return graph_->inputs().size() - 1; }

 private:
  struct Segment {
    std::vector<jit::Node*> nodes;
    std::string anchor;  // path of the child call in it; "" when it has none
    const jit::Node* anchor_node = nullptr;
  };
  struct Built {
    std::shared_ptr<jit::Graph> graph;
    std::vector<ScriptAttribute> attributes;
  };
  using Probe = std::unordered_map<const jit::Value*, c10::IValue>;

  // The forward's tensor inputs (the graph's inputs after the module).
  c10::ArrayRef<jit::Value*> inputs() const { return graph_->inputs().slice(1); }
  template <typename... Args>
  [[noreturn]] void refuse(const Args&... args) const {
    throw Error(ErrorKind::kBadInput, detail::concat("model ", quote(file_), ": ", args...));
  }
  void open_containers();
  void select_output();
  void resolve_attributes();
  void check_control_flow(const jit::Block* block) const;
  void make_segments();
  void find_live_sets();
  Built build(size_t first, size_t last, bool every_value = false) const;
  void move_boundaries(const Probe& small, const Probe& large);
  // Whether `values` can cross a cut packed into one [batch, Σ] tensor: each a batch-first
  // tensor (batch_first_tensor), all of one dtype.
  bool packable(const std::vector<const jit::Value*>& values, const Probe& small,
                const Probe& large) const;
  void run_probe(const torch::Tensor& input, const ProbeInputs& probe, Probe* values) const;
  std::vector<bool> kept_cuts(const Probe& small, const Probe& large) const;
  void check_in_place(const std::vector<size_t>& layer_of_segment) const;
  std::vector<LiveTensor> describe_live(const std::vector<const jit::Value*>& values,
                                        const Probe& small) const;
  std::vector<const void*> buffers_of(const jit::Node* node) const;

  const jit::Module& module_;
  std::string file_;
  std::string output_element_;  // settings' output: "" (one tensor), an index or a field
  std::shared_ptr<jit::Graph> graph_;
  std::unordered_map<const jit::Value*, ScriptAttribute> attributes_;  // top-level GetAttr outputs
  std::vector<Segment> segments_;
  NodeIndex segment_of_;    // top-level nodes
  int64_t small_rows_ = 0;  // the probe batches' sizes
  int64_t large_rows_ = 0;
  // live_[k]: the values made before segment k and used from it on; live_[n] the outputs.
  std::vector<std::vector<const jit::Value*>> live_;
};

void Splitter::check_signature() const {
  if (inputs().empty()) refuse("forward takes no input; pipeplan feeds it a batch");
  for (const jit::Value* input : inputs())
    if (!is_tensor(input))
      refuse("forward's input ", quote(input->debugNameBase()), " is ", input->type()->repr_str(),
             "; pipeplan splits a forward whose inputs are tensors");
  // A tuple passes here: select_output picks its element once the settings are known.
  if (graph_->outputs().size() != 1 ||
      (!is_tensor(graph_->outputs()[0]) && !graph_->outputs()[0]->type()->cast<c10::TupleType>()))
    refuse(
        "forward returns ",
        graph_->outputs().size() == 1 ? graph_->outputs()[0]->type()->repr_str() : "several values",
        "; pipeplan trains a forward that returns one tensor (the logits), or a tuple with "
        "--model-arg output=INDEX");
}

// A forward that returns a tuple or named tuple (torchvision's GoogLeNetOutputs) trains on the
// element output_element_ names, by index or field: it becomes the graph's output, and what
// only the other elements needed is dropped. Refuses a tuple without one, and an element that
// is not there or not a tensor.
void Splitter::select_output() {
  jit::Value* output = graph_->outputs()[0];
  const auto tuple = output->type()->cast<c10::TupleType>();
  const std::string returns = output->type()->repr_str();
  std::vector<std::string> fields;
  if (tuple && tuple->schema())
    for (const c10::Argument& argument : tuple->schema()->arguments())
      fields.push_back(argument.name());
  std::string choices;
  for (const std::string& field : fields) choices += (choices.empty() ? "" : ", ") + field;
  if (output_element_.empty()) {
    if (tuple)
      refuse("forward returns ", returns, "; give --model-arg output=INDEX",
             fields.empty() ? "" : " or output=FIELD",
             " to train on the element that holds the logits");
    return;
  }
  if (!tuple)
    refuse("output=", output_element_, " picks an element of a tuple, but forward returns ",
           returns, "; leave output out");
  const auto field = std::find(fields.begin(), fields.end(), output_element_);
  size_t index = static_cast<size_t>(field - fields.begin());
  const bool digits = output_element_.size() <= 4 &&
                      output_element_.find_first_not_of("0123456789") == std::string::npos;
  if (field == fields.end())
    index = digits ? std::stoul(output_element_) : tuple->elements().size();
  if (index >= tuple->elements().size())
    refuse("output=", output_element_, " is not an element of ", returns, "; give an index 0 to ",
           tuple->elements().size() - 1, fields.empty() ? "" : " or a field: " + choices);
  const c10::TypePtr& element = tuple->elements()[index];
  if (!element->isSubtypeOf(*c10::TensorType::get()))
    refuse("output=", output_element_, " is ", element->repr_str(), " in ", returns,
           ", not a tensor; pick the element that holds the logits");
  jit::Node* made_by = output->node();
  jit::Value* picked = nullptr;
  if (made_by->kind() == c10::prim::TupleConstruct) {
    picked = made_by->input(index);
  } else {
    jit::Value* position = graph_->insertConstant(static_cast<int64_t>(index));
    picked = graph_->insertNode(graph_->createTupleIndex(output, position, element))->output();
  }
  graph_->eraseOutput(0);
  graph_->registerOutput(picked);
  // Dead code elimination keeps method calls (they may have side effects); a child's forward
  // whose result nothing uses any more served only the dropped elements.
  for (bool dropped = true; dropped;) {
    jit::EliminateDeadCode(graph_);
    dropped = false;
    for (jit::Node* node : graph_->nodes())
      if (node->kind() == c10::prim::CallMethod && !node->hasUses()) {
        node->destroy();
        dropped = true;
        break;
      }
  }
}

// Inlines calls of the top module's own methods, of children that only chain their children and
// of children that chain through them with their own parameters in between, until none is left,
// so that segments end at blocks rather than at containers.
void Splitter::open_containers() {
  for (bool inlined = true; inlined;) {
    inlined = false;
    resolve_attributes();
    for (jit::Node* node : graph_->nodes()) {
      if (node->kind() != c10::prim::CallMethod) continue;
      const auto callee = attributes_.find(node->input(0));
      const bool on_self = node->input(0) == graph_->inputs()[0];
      if (!on_self && (callee == attributes_.end() || !callee->second.is_module)) continue;
      const jit::Module target = on_self ? module_ : child_at(module_, callee->second.path);
      if (!on_self && (node->s(c10::attr::name) != "forward" ||
                       !(chains_children(target) || chains_through_own_state(target))))
        continue;
      jit::GraphFunction& function =
          jit::toGraphFunction(target.type()->getMethod(node->s(c10::attr::name)));
      jit::inlineCallTo(node, &function, function.graph().get());
      inlined = true;
      break;
    }
  }
  resolve_attributes();
}

// Attribute paths of the top block's GetAttr outputs: module objects and leaf values.
void Splitter::resolve_attributes() {
  attributes_.clear();
  attributes_[graph_->inputs()[0]] = ScriptAttribute{"", true};
  for (const jit::Node* node : graph_->nodes()) {
    if (node->kind() != c10::prim::GetAttr) continue;
    const auto owner = attributes_.find(node->input());
    const std::string name = node->s(c10::attr::name);
    if (owner == attributes_.end() || !owner->second.is_module)
      refuse("forward reads attribute ", quote(name), " of a value that is not a module (",
             describe_node(node), ")");
    attributes_[node->output()] =
        ScriptAttribute{join_path(owner->second.path, name), is_module_type(node->output())};
  }
}

// Refuses control flow whose condition is computed from tensor values.
void Splitter::check_control_flow(const jit::Block* block) const {
  for (const jit::Node* node : block->nodes()) {
    for (const jit::Block* inner : node->blocks()) check_control_flow(inner);
    std::vector<const jit::Value*> conditions;
    if (node->kind() == c10::prim::If) conditions = {node->input(0)};
    if (node->kind() == c10::prim::Loop)
      conditions = {node->input(0), node->input(1), node->blocks()[0]->outputs()[0]};
    std::unordered_set<const jit::Node*> seen;
    while (!conditions.empty()) {
      const jit::Node* producer = conditions.back()->node();
      conditions.pop_back();
      if (!seen.insert(producer).second) continue;
      const bool from_tensor = std::any_of(producer->inputs().begin(), producer->inputs().end(),
                                           [](const jit::Value* v) { return is_tensor(v); });
      if (from_tensor && kTensorToScalarOps.count(producer->kind().toQualString()))
        refuse("forward has control flow whose condition depends on tensor values (",
               describe_node(node), " on ", describe_node(producer),
               "); pipeplan splits graphs whose control flow depends only on sizes and constants");
      for (const jit::Value* input : producer->inputs()) conditions.push_back(input);
    }
  }
}

// Segments of the top block, each ending at the call of a child with parameters or buffers.
void Splitter::make_segments() {
  segments_.assign(1, Segment());
  for (jit::Node* node : graph_->nodes()) {
    if (node->kind() == c10::prim::Constant || node->kind() == c10::prim::GetAttr) continue;
    segments_.back().nodes.push_back(node);
    if (node->kind() != c10::prim::CallMethod) continue;
    const auto callee = attributes_.find(node->input(0));
    if (callee == attributes_.end() || !callee->second.is_module || callee->second.path.empty())
      continue;
    const jit::Module child = child_at(module_, callee->second.path);
    const bool has_state =
        child.parameters(/*recurse=*/true).size() > 0 || child.buffers(/*recurse=*/true).size() > 0;
    if (!has_state) continue;
    segments_.back().anchor = callee->second.path;
    segments_.back().anchor_node = node;
    segments_.emplace_back();
  }
  // Ops after the last child call join its segment.
  if (segments_.size() > 1) {
    Segment tail = std::move(segments_.back());
    segments_.pop_back();
    for (jit::Node* node : tail.nodes) segments_.back().nodes.push_back(node);
  }
}

// live_[k] for every cut k: graph inputs and top-level node outputs (not constants, not
// attributes) made before segment k and used by segment k or later (the return is past the end).
void Splitter::find_live_sets() {
  segment_of_.clear();
  for (size_t segment_idx = 0; segment_idx < segments_.size(); ++segment_idx)
    for (const jit::Node* node : segments_[segment_idx].nodes) segment_of_[node] = segment_idx;
  const size_t num_segments = segments_.size();
  live_.assign(num_segments + 1, {});
  const auto mark = [&](const jit::Value* value, size_t made_in_segment) {
    const size_t last = last_use(value, *graph_, segment_of_, num_segments);
    for (size_t cut = made_in_segment + 1; cut <= last; ++cut) live_[cut].push_back(value);
  };
  for (const jit::Value* input : inputs()) {
    live_[0].push_back(input);
    mark(input, 0);
  }
  for (size_t segment_idx = 0; segment_idx < num_segments; ++segment_idx)
    for (const jit::Node* node : segments_[segment_idx].nodes)
      for (const jit::Value* output : node->outputs()) mark(output, segment_idx);
  live_[num_segments] = {graph_->outputs()[0]};
}

// The graph of segments [first, last): inputs its attributes then live_[first], output the
// tuple of live_[last] (followed, with `every_value`, by every value its nodes make, for the
// probe). Constants are copied in where used.
Splitter::Built Splitter::build(size_t first, size_t last, bool every_value) const {
  Built built;
  built.graph = std::make_shared<jit::Graph>();
  jit::Graph& graph = *built.graph;
  std::unordered_map<const jit::Value*, jit::Value*> env;
  // Attributes first, in order of first use (nested nodes included).
  std::vector<const jit::Node*> pending;
  for (size_t segment_idx = first; segment_idx < last; ++segment_idx)
    for (const jit::Node* node : segments_[segment_idx].nodes) pending.push_back(node);
  for (size_t idx = 0; idx < pending.size(); ++idx) {
    for (const jit::Block* block : pending[idx]->blocks())
      for (const jit::Node* inner : block->nodes()) pending.push_back(inner);
    for (const jit::Value* input : pending[idx]->inputs()) {
      const auto attribute = attributes_.find(input);
      if (attribute == attributes_.end() || env.count(input)) continue;
      if (attribute->second.path.empty())
        refuse("forward uses the module itself inside control flow or as a value (",
               describe_node(pending[idx]), "); call its children or methods directly");
      env[input] = graph.addInput()->setType(input->type());
      built.attributes.push_back(attribute->second);
    }
  }
  for (const jit::Value* value : live_[first])
    env[value] = graph.addInput()->setType(value->type());
  const auto value_map = [&](jit::Value* value) -> jit::Value* {
    const auto found = env.find(value);
    if (found != env.end()) return found->second;
    PIPEPLAN_ASSERT(value->node()->kind() == c10::prim::Constant, "value %", value->debugName(),
                    " is used by a layer but not made before it");
    jit::Node* constant =
        graph.insertNode(graph.createClone(value->node(), [](jit::Value* v) { return v; }));
    env[value] = constant->output();
    return constant->output();
  };
  for (size_t segment_idx = first; segment_idx < last; ++segment_idx)
    for (jit::Node* node : segments_[segment_idx].nodes) {
      jit::Node* copy = graph.insertNode(graph.createClone(node, value_map));
      for (size_t output_idx = 0; output_idx < node->outputs().size(); ++output_idx)
        env[node->output(output_idx)] = copy->output(output_idx);
    }
  std::vector<jit::Value*> outputs;
  for (const jit::Value* value : live_[last]) outputs.push_back(env.at(value));
  if (every_value)
    for (size_t segment_idx = first; segment_idx < last; ++segment_idx)
      for (const jit::Node* node : segments_[segment_idx].nodes)
        for (const jit::Value* output : node->outputs()) outputs.push_back(env.at(output));
  graph.registerOutput(graph.insertNode(graph.createTuple(outputs))->output());
  return built;
}

// Runs every segment on `input` (no gradient, eval mode) and records every value it makes.
void Splitter::run_probe(const torch::Tensor& input, const ProbeInputs& probe,
                         Probe* values) const {
  torch::NoGradGuard no_grad;
  jit::GraphOptimizerEnabledGuard unoptimised(/*state=*/false);
  const std::vector<torch::Tensor> parts = unpack_live(input, probe.inputs);
  for (size_t input_idx = 0; input_idx < parts.size(); ++input_idx)
    (*values)[inputs()[input_idx]] = parts[input_idx];
  for (size_t segment_idx = 0; segment_idx < segments_.size(); ++segment_idx) {
    const Built built = build(segment_idx, segment_idx + 1, /*every_value=*/true);
    jit::Stack stack;
    for (const ScriptAttribute& attribute : built.attributes)
      stack.push_back(attribute_value(module_, attribute));
    for (const jit::Value* value : live_[segment_idx]) stack.push_back(values->at(value));
    jit::GraphFunction function("probe", built.graph, nullptr);
    try {
      function.run(stack);
    } catch (const std::exception& error) {
      const std::string& anchor = segments_[segment_idx].anchor;
      refuse("layer ", quote(anchor.empty() ? "forward" : anchor), " fails on ", input.size(0),
             " samples of ", probe.description, " (", error_line(error), ")", probe.hint);
    }
    const auto& outputs = stack.back().toTupleRef().elements();
    size_t output_idx = 0;
    for (const jit::Value* value : live_[segment_idx + 1]) (*values)[value] = outputs[output_idx++];
    for (const jit::Node* node : segments_[segment_idx].nodes)
      for (const jit::Value* value : node->outputs()) (*values)[value] = outputs[output_idx++];
  }
}

// Where between two child calls the cut falls: functional ops and stateless calls after one
// call and before the next go to either side, so the cut is placed where the fewest bytes cross
// (a packable live set preferred, the latest place on ties: a ReLU or pooling after a block
// stays with it and the pooled tensor crosses).
void Splitter::move_boundaries(const Probe& small, const Probe& large) {
  std::vector<const jit::Node*> order;
  NodeIndex position;
  for (const Segment& segment : segments_)
    for (const jit::Node* node : segment.nodes) {
      position[node] = order.size();
      order.push_back(node);
    }
  std::unordered_map<const jit::Value*, size_t> last;  // every value's last use, by position
  for (const jit::Value* input : inputs())
    last[input] = last_use(input, *graph_, position, order.size());
  for (const jit::Node* node : order)
    for (const jit::Value* value : node->outputs())
      last[value] = last_use(value, *graph_, position, order.size());
  // (not packable, bytes) of what crosses a cut before node `cut`.
  const auto cost = [&](size_t cut) {
    std::vector<const jit::Value*> crossing;
    for (const jit::Value* input : inputs())
      if (last.at(input) >= cut) crossing.push_back(input);
    for (size_t idx = 0; idx < cut; ++idx)
      for (const jit::Value* value : order[idx]->outputs())
        if (last.at(value) >= cut) crossing.push_back(value);
    int64_t bytes = 0;
    for (const jit::Value* value : crossing)
      if (small.at(value).isTensor())
        bytes += static_cast<int64_t>(small.at(value).toTensor().nbytes());
    return std::make_pair(!packable(crossing, small, large), bytes);
  };
  for (size_t segment_idx = 0; segment_idx + 1 < segments_.size(); ++segment_idx) {
    Segment& next = segments_[segment_idx + 1];
    if (next.anchor_node == nullptr) continue;
    const size_t first = position.at(next.nodes.front());
    const size_t anchor = position.at(next.anchor_node);
    size_t best = first;
    auto best_cost = cost(first);
    for (size_t cut = first + 1; cut <= anchor; ++cut) {
      const auto cut_cost = cost(cut);
      if (cut_cost <= best_cost) std::tie(best, best_cost) = std::make_pair(cut, cut_cost);
    }
    const auto moved_end = next.nodes.begin() + static_cast<long>(best - first);
    std::vector<jit::Node*>& previous = segments_[segment_idx].nodes;
    previous.insert(previous.end(), next.nodes.begin(), moved_end);
    next.nodes.erase(next.nodes.begin(), moved_end);
  }
}

bool Splitter::packable(const std::vector<const jit::Value*>& values, const Probe& small,
                        const Probe& large) const {
  if (values.empty()) return false;
  for (const jit::Value* value : values)
    if (!batch_first_tensor(small.at(value), large.at(value), small_rows_, large_rows_) ||
        small.at(value).toTensor().scalar_type() !=
            small.at(values[0]).toTensor().scalar_type())
      return false;
  return true;
}

// The buffers (and non-parameter tensor attributes) a node reaches through the attributes it
// reads. Parameters are left out: one used on both sides of a cut is a tied weight, held by
// both layers (assemble finds them on the built layers).
std::vector<const void*> Splitter::buffers_of(const jit::Node* node) const {
  std::vector<const void*> tensors;
  for (const jit::Value* input : node->inputs()) {
    const auto attribute = attributes_.find(input);
    if (attribute == attributes_.end() || attribute->second.path.empty()) continue;
    if (!attribute->second.is_module) {
      const c10::IValue value = attribute_value(module_, attribute->second);
      if (value.isTensor() && !is_parameter(module_, attribute->second))
        tensors.push_back(value.toTensor().unsafeGetTensorImpl());
      continue;
    }
    const jit::Module child = child_at(module_, attribute->second.path);
    for (const torch::Tensor& tensor : child.buffers(/*recurse=*/true))
      tensors.push_back(tensor.unsafeGetTensorImpl());
  }
  return tensors;
}

// Cut k (between segments k-1 and k) is kept when its live set can cross packed (packable)
// and no buffer is used on both sides: a buffer changes in the forward (batch-norm statistics),
// so two copies would drift apart. A parameter used on both sides is a tied weight.
std::vector<bool> Splitter::kept_cuts(const Probe& small, const Probe& large) const {
  const size_t num_segments = segments_.size();
  std::vector<bool> kept(num_segments, false);
  for (size_t cut = 1; cut < num_segments; ++cut) kept[cut] = packable(live_[cut], small, large);
  std::unordered_map<const void*, size_t> first_user;
  for (size_t segment_idx = 0; segment_idx < num_segments; ++segment_idx)
    for (const jit::Node* node : segments_[segment_idx].nodes)
      for (const void* tensor : buffers_of(node)) {
        const size_t first = first_user.emplace(tensor, segment_idx).first->second;
        for (size_t cut = first + 1; cut <= segment_idx; ++cut) kept[cut] = false;
      }
  return kept;
}

// An in-place op on a tensor made in another layer, or used in a later one, would change what
// crossed (or will cross) a cut.
void Splitter::check_in_place(const std::vector<size_t>& layer_of_segment) const {
  for (const Segment& segment : segments_)
    for (const jit::Node* node : segment.nodes) {
      const std::string kind = node->kind().toQualString();
      if (node->inputs().empty() || kind.rfind("aten::", 0) != 0 || kind.back() != '_') continue;
      const jit::Value* target = node->input(0);
      if (attributes_.count(target) || target->node()->kind() == c10::prim::Constant) continue;
      const size_t layer = layer_of_segment[segment_of_.at(node)];
      const bool made_elsewhere =
          target->node() == graph_->param_node() ||
          layer_of_segment[segment_of_.at(top_level(target->node(), graph_->block()))] != layer;
      const size_t last_segment = last_use(target, *graph_, segment_of_, segments_.size());
      const bool used_later =
          last_segment == segments_.size() || layer_of_segment[last_segment] != layer;
      if ((made_elsewhere && layer > 0) || used_later)
        refuse("forward changes in place a tensor that crosses a cut between layers (",
               describe_node(node), "); use the out-of-place op");
    }
}

// The tensors of a kept cut's live set, per sample.
std::vector<LiveTensor> Splitter::describe_live(const std::vector<const jit::Value*>& values,
                                                const Probe& small) const {
  std::vector<LiveTensor> live;
  for (const jit::Value* value : values) {
    const torch::Tensor tensor = small.at(value).toTensor();
    live.push_back(LiveTensor{tensor.sizes().slice(1).vec(), tensor.scalar_type()});
  }
  return live;
}

std::vector<ScriptLayer> Splitter::split(const ProbeInputs& probe, torch::Tensor* output) {
  check_signature();
  if (num_inputs() != probe.inputs.size())
    refuse("forward takes ", num_inputs(), " input", num_inputs() == 1 ? "" : "s",
           " but the input shape gives ", probe.inputs.size(), " (", probe.description,
           "); give one shape per input, joined by commas (--model-arg input_shape=8,3x4)");
  open_containers();
  select_output();
  resolve_attributes();  // select_output may have dropped attribute reads
  check_control_flow(graph_->block());
  make_segments();
  find_live_sets();
  Probe small, large;
  small_rows_ = probe.small.size(0);
  large_rows_ = probe.large.size(0);
  run_probe(probe.small, probe, &small);
  run_probe(probe.large, probe, &large);
  move_boundaries(small, large);
  find_live_sets();
  *output = small.at(graph_->outputs()[0]).toTensor();
  const std::vector<bool> kept = kept_cuts(small, large);
  std::vector<size_t> layer_of_segment(segments_.size(), 0);
  for (size_t segment_idx = 1; segment_idx < segments_.size(); ++segment_idx)
    layer_of_segment[segment_idx] = layer_of_segment[segment_idx - 1] + (kept[segment_idx] ? 1 : 0);
  check_in_place(layer_of_segment);
  std::vector<ScriptLayer> layers;
  for (size_t first = 0; first < segments_.size();) {
    size_t last = first + 1;
    while (last < segments_.size() && !kept[last]) ++last;
    Built built = build(first, last);
    ScriptLayer layer;
    const std::string& first_anchor = segments_[first].anchor;
    const std::string& last_anchor = segments_[last - 1].anchor;
    layer.name = first_anchor.empty() ? "forward"
                 : last == first + 1  ? first_anchor
                                      : first_anchor + ".." + last_anchor;
    layer.kind = last == first + 1 && !first_anchor.empty()
                     ? child_at(module_, first_anchor).type()->name()->name()
                     : "group";
    layer.graph = std::move(built.graph);
    layer.attributes = std::move(built.attributes);
    layer.live_in = describe_live(live_[first], small);
    layer.live_out = describe_live(live_[last], small);
    layers.push_back(std::move(layer));
    first = last;
  }
  return layers;
}

}  // namespace

std::vector<ScriptLayer> split_forward(const jit::Module& module, const std::string& file,
                                       const ProbeInputs& probe, const std::string& output_element,
                                       torch::Tensor* output) {
  return Splitter(module, file, output_element).split(probe, output);
}

void check_forward_signature(const jit::Module& module, const std::string& file) {
  Splitter(module, file).check_signature();
}

std::vector<torch::Tensor> unpack_live(const torch::Tensor& packed,
                                       const std::vector<LiveTensor>& live) {
  if (live.size() == 1) return {packed};
  std::vector<torch::Tensor> tensors;
  int64_t offset = 0;
  for (const LiveTensor& tensor : live) {
    std::vector<int64_t> shape{packed.size(0)};
    shape.insert(shape.end(), tensor.sample_shape.begin(), tensor.sample_shape.end());
    const int64_t elements = c10::multiply_integers(tensor.sample_shape);
    tensors.push_back(packed.narrow(1, offset, elements).view(shape));
    offset += elements;
  }
  return tensors;
}

jit::Module child_at(const jit::Module& module, const std::string& path) {
  jit::Module child = module;
  for (size_t start = 0; start < path.size();) {
    const size_t end = std::min(path.find('.', start), path.size());
    child = child.attr(path.substr(start, end - start)).toModule();
    start = end + 1;
  }
  return child;
}

std::pair<jit::Module, std::string> attribute_owner(const jit::Module& module,
                                                    const ScriptAttribute& attribute) {
  const size_t dot = attribute.path.rfind('.');
  if (dot == std::string::npos) return {module, attribute.path};
  return {child_at(module, attribute.path.substr(0, dot)), attribute.path.substr(dot + 1)};
}

c10::IValue attribute_value(const jit::Module& module, const ScriptAttribute& attribute) {
  if (attribute.is_module) return child_at(module, attribute.path)._ivalue();
  const auto [owner, name] = attribute_owner(module, attribute);
  return owner.attr(name);
}

bool is_parameter(const jit::Module& module, const ScriptAttribute& attribute) {
  if (attribute.is_module) return false;
  const auto [owner, name] = attribute_owner(module, attribute);
  const auto slot = owner.type()->findAttributeSlot(name);
  return slot && owner.type()->is_parameter(*slot);
}

}  // namespace pipeplan::models
