// Tensor parallelism for a TorchScript model's layers: the Linear–activation–Linear MLPs
// pipeplan can prove in a layer's graph, and the layer rewritten to run their shards.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "models/script_graph.h"
#include "models/tensor_parallel.h"

namespace pipeplan::models {

/// One MLP of a layer that splits as Megatron splits one: its first linear column-parallel (each
/// rank holds `width`/tp of its output features), its second row-parallel (the matching input
/// features; its bias added once, after the sum).
struct ScriptMlp {
  std::string first;   ///< attribute path of the first linear's weight ("blocks.0.mlp.0.weight")
  std::string second;  ///< the second linear's weight
  int64_t width = 0;   ///< the first linear's output features, which tp must divide
};

/// The tensors (parameters and buffers) that more than one layer of `split` reads: a layer that
/// reads one does not split it, since the other layer would need it whole.
std::unordered_set<const void*> shared_tensors(const torch::jit::Module& module,
                                               const std::vector<ScriptLayer>& split);

/// The MLPs of `layer` that split, in graph order, found in its graph with every call inlined:
/// `aten::linear(x, W1, b1)`, then zero or more element-wise ops (relu, gelu, silu, tanh,
/// sigmoid, dropout) each taking the previous value and no other tensor, then
/// `aten::linear(h, W2, b2)` with W2's input features W1's output features; every value between
/// the two linears used once; W1, b1, W2 and b2 float32 parameters of `module` read once in the
/// graph and by no other layer (not in `shared`). A graph that hands a module object to anything
/// but an attribute read splits nothing. Anything else stays whole: nothing is guessed.
std::vector<ScriptMlp> find_split_mlps(const torch::jit::Module& module, const ScriptLayer& layer,
                                       const std::unordered_set<const void*>& shared);

/// Makes `layer` the shard of tp rank `group`->rank() of its MLPs (find_split_mlps with the same
/// `shared`): replaces their weights in `module` by this rank's slices (copies, so that the whole
/// ones can be freed), and returns the layer with its graph inlined and each MLP wrapped in the
/// group's collectives: the input through copy_to_tensor_parallel, the second linear's output
/// (without its bias) through reduce_from_tensor_parallel, then the bias. `group_id` is the id a
/// ScriptGroupHandle gave `group`. Empty, and `module` untouched, where no MLP splits.
std::optional<ScriptLayer> split_layer(torch::jit::Module& module, const ScriptLayer& layer,
                                       const std::unordered_set<const void*>& shared,
                                       const TensorParallelGroupPtr& group, int64_t group_id);

/// Makes `group` reachable from graphs by an integer id (the operators pipeplan::tp_copy and
/// pipeplan::tp_reduce take it) for as long as the handle lives.
class ScriptGroupHandle {
 public:
  explicit ScriptGroupHandle(TensorParallelGroupPtr group);
  ~ScriptGroupHandle();
  ScriptGroupHandle(const ScriptGroupHandle&) = delete;
  ScriptGroupHandle& operator=(const ScriptGroupHandle&) = delete;
  int64_t id() const { return id_; }

 private:
  int64_t id_;
};

}  // namespace pipeplan::models
