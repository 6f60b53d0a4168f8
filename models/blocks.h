// Pieces the transformer families (ViT, GPT) share: a pre-LN block with attention as matmuls.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "models/model.h"
#include "models/tensor_parallel.h"

namespace pipeplan::models {

/// How a transformer block initialises its weights (from the global torch RNG only).
enum class BlockInit {
  kVit,  ///< torchvision's ViT: xavier-uniform in_proj and MLP, MLP biases N(0, 1e-6), LN eps 1e-6
  kGpt,  ///< GPT-2: N(0, 0.02) weights, zero biases, out_proj and fc2 scaled by 1/sqrt(2·depth)
};

/// Shape and flavour of one transformer block.
struct BlockShape {
  int64_t hidden = 0;   ///< model width h; a multiple of `heads`
  int64_t heads = 0;    ///< attention heads
  int64_t mlp_dim = 0;  ///< width of the MLP's inner layer
  int64_t depth = 0;    ///< blocks in the whole model (GPT-2 scales residual projections by it)
  bool causal = false;  ///< true: position t attends only to positions <= t (decoder)
  BlockInit init = BlockInit::kVit;
};

/// Pre-LN transformer block on [B, T, hidden]: x + out_proj(attention(in_proj(ln_1(x)))), then
/// x + fc2(gelu(fc1(ln_2(x)))). Attention is written out as matmuls (LibTorch 1.13 has no
/// scaled_dot_product_attention); in_proj holds q, k and v as torchvision's MultiheadAttention.
///
/// Split over a tensor-parallel group of t ranks (Megatron-LM), rank r holds heads
/// [r·heads/t, (r+1)·heads/t) of q, k and v (in_proj's rows, column-parallel) and the matching
/// columns of out_proj (row-parallel), and rows [r·mlp_dim/t, ...) of fc1 with the matching
/// columns of fc2; the layer norms and the biases of out_proj and fc2 stay whole. Each half of
/// the block runs f (models/tensor_parallel.h) on its normalised input and g on the row-parallel
/// product before the whole bias: two all-reduces in the forward, two in the backward.
class TransformerBlock : public Layer {
 public:
  /// Builds and initialises the block as `shape.init` says; with a `group` of more than one
  /// rank, keeps only that rank's shard of the whole block's initial weights.
  explicit TransformerBlock(const BlockShape& shape, TensorParallelGroupPtr group = {});
  /// [B, T, hidden] -> [B, T, hidden]; T may be any length (no positional state here).
  torch::Tensor forward(const torch::Tensor& input) override;

 private:
  torch::Tensor attention(const torch::Tensor& input);
  torch::Tensor mlp(const torch::Tensor& input);
  // `linear`'s product, summed over the group (when split) before its whole bias.
  torch::Tensor row_parallel(const torch::Tensor& input, torch::nn::Linear& linear);
  void init_weights();
  void keep_shard();

  BlockShape shape_;
  TensorParallelGroupPtr group_;  // null or of size 1: whole
  int64_t local_heads_ = 0;       // heads of this rank's shard
  torch::nn::LayerNorm ln_1_{nullptr};
  torch::nn::Linear in_proj_{nullptr};
  torch::nn::Linear out_proj_{nullptr};
  torch::nn::LayerNorm ln_2_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
};

/// Exact parameter count of a TransformerBlock: two LayerNorms (2h each), in_proj (3h·h + 3h),
/// out_proj (h·h + h), MLP (h·m + m + m·h + h).
int64_t transformer_block_param_count(int64_t hidden, int64_t mlp_dim);

/// The part of the whole block's parameter `name` ("in_proj.weight", ...) that member
/// `tp_rank` of a tensor-parallel group of `tp` holds (a view of `whole`; `whole` itself for
/// the parameters that stay whole). tp must divide shape.heads and shape.mlp_dim.
torch::Tensor block_parameter_shard(const std::string& name, const torch::Tensor& whole,
                                    const BlockShape& shape, int tp_rank, int tp);

/// block_parameter_shard undone: the whole parameter `name` from every rank's shard, in tp-rank
/// order (rank 0's for the parameters that stay whole). Needs no shape: q, k and v are each cut
/// the same way. Undefined when the shards' shapes differ.
torch::Tensor block_parameter_join(const std::string& name,
                                   const std::vector<torch::Tensor>& shards);

/// LayerSpec "block<block_idx>" of kind "block" that builds a TransformerBlock of `shape`, whole
/// or (build_shard) split by heads and MLP width.
LayerSpec transformer_block_spec(int64_t block_idx, const BlockShape& shape);

/// Appends the `layers` transformer blocks of a checked GPT or ViT `config` (hidden, heads,
/// mlp_dim, layers) to `model`, of the family `init`.
void add_transformer_blocks(const Json& config, bool causal, BlockInit init, Model* model);

/// LayerNorm epsilon of the family: 1e-6 for ViT (torchvision), 1e-5 for GPT.
double layer_norm_eps(BlockInit init);

/// Fills `tensor` in place with N(0, std²) truncated to [-2·std, 2·std], by inverse CDF from
/// one uniform draw per element (as torch.nn.init.trunc_normal_ does).
void trunc_normal_(torch::Tensor tensor, double std);

/// Checks `hidden` and `heads` are >= 1 and that heads divides hidden, naming `model`:
/// "model 'gpt': hidden=100 is not divisible by heads=12; expected a multiple of heads".
void check_hidden_heads(const std::string& model, const Json& config);

}  // namespace pipeplan::models
