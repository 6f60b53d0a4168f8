// Models as layer sequences with lazy per-layer factories (docs/architecture.md, Folders).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/model_ref.h"
#include "models/tensor_parallel.h"

namespace pipeplan::models {

/// One entry of a model's layer sequence: a module whose forward maps one tensor to one tensor.
/// The first dimension of input and output is the batch.
class Layer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
};
using LayerPtr = std::shared_ptr<Layer>;

/// How the loss is computed from the last layer's output and the target.
enum class LossKind {
  kCrossEntropy,           ///< output [B, C] logits, target [B] class indices
  kNextTokenCrossEntropy,  ///< output [B, T, V] logits, target [B, T] next-token indices
};

/// One sample of the model's input.
struct InputSpec {
  std::vector<int64_t> sample_shape;  ///< without the batch dimension
  torch::Dtype dtype = torch::kFloat32;
  int64_t token_range = 0;  ///< int64 inputs only: values lie in [0, token_range)
};

/// One sample of the target, and the loss.
struct TargetSpec {
  std::vector<int64_t> sample_shape;  ///< {} for one class per sample, {T} for next tokens
  int64_t num_classes = 0;            ///< classes, or vocabulary size
  LossKind loss = LossKind::kCrossEntropy;
};

/// One tensor of the live set at a cut, per sample.
struct LiveTensor {
  std::vector<int64_t> sample_shape;  ///< without the batch dimension
  torch::Dtype dtype = torch::kFloat32;
};

/// One layer of the sequence, not yet built.
struct LayerSpec {
  std::string name;          ///< unique within the model: "stem", "layer2.1", "block7", "head"
  std::string kind;          ///< "stem", "block", "embedding", "head", "linear", ...
  int64_t param_count = 0;   ///< exact parameter count of the built layer (tested)
  /// Constructs and initialises it from the global torch RNG; unset when the model builds
  /// ranges of layers at once (Model::build_range).
  std::function<LayerPtr()> build;
  /// The live set after the layer, when known before building (TorchScript models; checked by
  /// a forward when the model is made); empty for zoo models, whose profile records it.
  std::vector<LiveTensor> live_out = {};
  /// Tensor parallelism: what a group's size must divide for the layer to split ({"heads", 12},
  /// {"mlp_dim", 3072}); empty where the layer runs whole on every rank of its group.
  std::vector<std::pair<std::string, int64_t>> tp_divides = {};
  /// A layer that splits: its all-reduces of its output's size per forward, one per column–row
  /// pair (LayerProfile::tp_all_reduces): 2 for a transformer block (attention and MLP).
  int tp_all_reduces = 2;
  /// Builds the layer's shard for `group`'s rank: initialised whole from the global torch RNG
  /// as `build` does, then sliced, so that the shards together hold one process's weights.
  /// Unset where the layer does not split.
  std::function<LayerPtr(const TensorParallelGroupPtr& group)> build_shard = {};
};

/// A parameter several layers use (tied weights: a GPT's token embedding and its output head).
/// Each user layer registers it, under its own name there. A stage holding several users keeps
/// one copy; stages on different ranks each hold one and sum its gradient before the optimizer
/// step, so that training equals one process.
struct TiedParameter {
  struct User {
    int layer = 0;     ///< index in Model::layers
    std::string name;  ///< its name in that layer's named_parameters()
  };
  std::vector<User> users;  ///< at least two, ascending layers
  int64_t numel = 0;
};

/// A model: name, full configuration, layer sequence, input, target and loss.
struct Model {
  std::string name;              ///< zoo name, or a TorchScript file path
  Json config = Json::object();  ///< every configuration field, after overrides
  std::vector<LayerSpec> layers;
  InputSpec input;
  TargetSpec target;
  std::string hash;  ///< content_hash of name and config (and of the file for TorchScript)
  /// When set, builds layers [first, last) in one go instead of each LayerSpec::build (a
  /// TorchScript file is read once per range); their weights come from it, not from a seed.
  /// A `group` of more than one rank gets the shards of the layers that split.
  std::function<std::vector<LayerPtr>(int first, int last, const TensorParallelGroupPtr& group)>
      build_range;
  /// Parameters used by several layers (TorchScript files only; counted in each user's
  /// param_count).
  std::vector<TiedParameter> ties = {};
};

/// The zoo's model names, in listing order.
std::vector<std::string> zoo_model_names();

/// Builds the model `name` from its default configuration with `model_args` ("KEY=VALUE")
/// applied. Throws Error(kBadInput) for an unknown name, an unknown key, a value of the wrong
/// type, or an inconsistent configuration, naming the key and value. A `name` that is a path
/// (is_torchscript_path: contains '/' or ends in .pt or .pth) loads a TorchScript file instead;
/// see models/torchscript.h for what it must hold and the keys it takes.
Model make_model(const std::string& name, const std::vector<std::string>& model_args = {});

/// Builds the model from a complete configuration as stored in a profile or a plan. For a
/// TorchScript file, refuses one whose content changed since (Error(kBadInput)).
Model make_model_from_config(const std::string& name, const Json& config);

/// What profiles, plans and runs record about the model.
ModelRef model_ref(const Model& model);

/// Total parameter count (sum of the layers' counts, a tied parameter counted once).
int64_t parameter_count(const Model& model);

/// Builds layers [first, last). Layer i's parameters and buffers depend only on (seed, i), not on
/// the range it is built in. Reseeds the global torch RNG before each layer. A TorchScript
/// model's weights come from its file whatever the seed; only [first, last) stay in memory.
/// With a tensor-parallel `group` of more than one rank, each layer that splits is built as its
/// shard (LayerSpec::build_shard), the others whole.
std::vector<LayerPtr> build_layers(const Model& model, int first, int last, uint64_t seed,
                                   const TensorParallelGroupPtr& group = {});

/// Checks that a tensor-parallel group of `tp` ranks can split every layer of `model` that
/// splits (LayerSpec::tp_divides); throws Error(kBadInput) "<field>: <tp>: ..." naming the layer
/// and the count it does not divide.
void check_tensor_parallel(const Model& model, int tp, const std::string& field);

/// Whether a tensor-parallel group of `tp` ranks splits every layer of `model` that splits
/// (check_tensor_parallel would pass).
bool tensor_parallel_fits(const Model& model, int tp);

/// Runs `layers` one after another.
torch::Tensor forward_layers(const std::vector<LayerPtr>& layers, torch::Tensor input);

/// Mean loss over the batch (and tokens) of the last layer's `output` against `target`.
torch::Tensor compute_loss(const Model& model, const torch::Tensor& output,
                           const torch::Tensor& target);

/// A seeded random batch: input as InputSpec describes and a matching target.
std::pair<torch::Tensor, torch::Tensor> random_batch(const Model& model, int64_t batch_size,
                                                      uint64_t seed);

}  // namespace pipeplan::models
