// Transformer pieces shared by ViT and GPT: the pre-LN block, its parameter count, init helpers.
#include "models/blocks.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "models/config.h"

namespace pipeplan::models {
namespace {

constexpr double kVitLayerNormEps = 1e-6;
constexpr double kGptLayerNormEps = 1e-5;
constexpr double kVitMlpBiasStd = 1e-6;  // torchvision's MLPBlock
constexpr double kGptWeightStd = 0.02;   // GPT-2

torch::nn::Linear make_linear(int64_t in_features, int64_t out_features) {
  return torch::nn::Linear(torch::nn::LinearOptions(in_features, out_features));
}

torch::nn::LayerNorm make_layer_norm(int64_t hidden, BlockInit init) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(layer_norm_eps(init)));
}

}  // namespace

TransformerBlock::TransformerBlock(const BlockShape& shape, TensorParallelGroupPtr group)
    : shape_(shape), group_(std::move(group)), local_heads_(shape.heads) {
  PIPEPLAN_ASSERT(shape.heads > 0 && shape.hidden % shape.heads == 0, "hidden ", shape.hidden,
                  " heads ", shape.heads);
  ln_1_ = register_module("ln_1", make_layer_norm(shape.hidden, shape.init));
  in_proj_ = register_module("in_proj", make_linear(shape.hidden, 3 * shape.hidden));
  out_proj_ = register_module("out_proj", make_linear(shape.hidden, shape.hidden));
  ln_2_ = register_module("ln_2", make_layer_norm(shape.hidden, shape.init));
  fc1_ = register_module("fc1", make_linear(shape.hidden, shape.mlp_dim));
  fc2_ = register_module("fc2", make_linear(shape.mlp_dim, shape.hidden));
  init_weights();
  if (group_ && group_->size() > 1) keep_shard();
}

void TransformerBlock::keep_shard() {
  const int tp = group_->size();
  PIPEPLAN_ASSERT(shape_.heads % tp == 0 && shape_.mlp_dim % tp == 0, "heads ", shape_.heads,
                  " mlp_dim ", shape_.mlp_dim, " tp ", tp);
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters())
    item.value().set_data(
        block_parameter_shard(item.key(), item.value(), shape_, group_->rank(), tp).clone());
  local_heads_ = shape_.heads / tp;
}

void TransformerBlock::init_weights() {
  namespace init = torch::nn::init;
  torch::NoGradGuard no_grad;
  if (shape_.init == BlockInit::kVit) {
    // As torchvision: MultiheadAttention's own reset, MLPBlock's xavier + tiny biases;
    // out_proj.weight keeps Linear's default (kaiming-uniform) initialisation.
    init::xavier_uniform_(in_proj_->weight);
    init::zeros_(in_proj_->bias);
    init::zeros_(out_proj_->bias);
    for (const torch::nn::Linear& fc : {fc1_, fc2_}) {
      init::xavier_uniform_(fc->weight);
      init::normal_(fc->bias, 0.0, kVitMlpBiasStd);
    }
    return;
  }
  // GPT-2: projections that write into the residual stream are scaled by the depth.
  const double residual_std = kGptWeightStd / std::sqrt(2.0 * static_cast<double>(shape_.depth));
  init::normal_(in_proj_->weight, 0.0, kGptWeightStd);
  init::normal_(fc1_->weight, 0.0, kGptWeightStd);
  init::normal_(out_proj_->weight, 0.0, residual_std);
  init::normal_(fc2_->weight, 0.0, residual_std);
  for (const torch::nn::Linear& fc : {in_proj_, out_proj_, fc1_, fc2_}) init::zeros_(fc->bias);
}

torch::Tensor TransformerBlock::row_parallel(const torch::Tensor& input,
                                             torch::nn::Linear& linear) {
  if (!group_ || group_->size() == 1) return linear->forward(input);
  return reduce_from_tensor_parallel(torch::linear(input, linear->weight), group_) + linear->bias;
}

torch::Tensor TransformerBlock::attention(const torch::Tensor& normalised) {
  const torch::Tensor input = group_ ? copy_to_tensor_parallel(normalised, group_) : normalised;
  const int64_t batch = input.size(0);
  const int64_t tokens = input.size(1);
  const int64_t head_dim = shape_.hidden / shape_.heads;
  // [B, T, 3h] -> [3, B, heads, T, head_dim]: q, k, v are consecutive h-wide slices of in_proj
  // (of this rank's heads when split).
  const torch::Tensor qkv = in_proj_->forward(input)
                                .view({batch, tokens, 3, local_heads_, head_dim})
                                .permute({2, 0, 3, 1, 4});
  const torch::Tensor query = qkv[0] * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  torch::Tensor scores = torch::matmul(query, qkv[1].transpose(-2, -1));  // [B, heads, T, T]
  if (shape_.causal) {
    const torch::Tensor future =
        torch::ones({tokens, tokens}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  const torch::Tensor mixed = torch::matmul(torch::softmax(scores, -1), qkv[2]);
  return row_parallel(mixed.transpose(1, 2).reshape({batch, tokens, local_heads_ * head_dim}),
                      out_proj_);
}

torch::Tensor TransformerBlock::mlp(const torch::Tensor& normalised) {
  const torch::Tensor input = group_ ? copy_to_tensor_parallel(normalised, group_) : normalised;
  return row_parallel(torch::gelu(fc1_->forward(input)), fc2_);
}

torch::Tensor TransformerBlock::forward(const torch::Tensor& input) {
  const torch::Tensor attended = input + attention(ln_1_->forward(input));
  return attended + mlp(ln_2_->forward(attended));
}

torch::Tensor block_parameter_shard(const std::string& name, const torch::Tensor& whole,
                                    const BlockShape& shape, int tp_rank, int tp) {
  PIPEPLAN_ASSERT(
      tp >= 1 && tp_rank >= 0 && tp_rank < tp && shape.heads % tp == 0 && shape.mlp_dim % tp == 0,
      "shard ", tp_rank, " of ", tp);
  const int64_t heads = shape.heads / tp;
  const int64_t head_dim = shape.hidden / shape.heads;
  const int64_t width = shape.mlp_dim / tp;
  if (name == "in_proj.weight" || name == "in_proj.bias") {
    // Rows [3, heads, head_dim]: this rank's heads of each of q, k and v.
    const torch::Tensor split = whole.view({3, shape.heads, head_dim, -1});
    return split.narrow(1, tp_rank * heads, heads)
        .reshape(whole.dim() == 1 ? std::vector<int64_t>{3 * heads * head_dim}
                                  : std::vector<int64_t>{3 * heads * head_dim, shape.hidden});
  }
  if (name == "out_proj.weight")
    return whole.narrow(1, tp_rank * heads * head_dim, heads * head_dim);
  if (name == "fc1.weight" || name == "fc1.bias") return whole.narrow(0, tp_rank * width, width);
  if (name == "fc2.weight") return whole.narrow(1, tp_rank * width, width);
  return whole;  // layer norms, out_proj.bias, fc2.bias
}

torch::Tensor block_parameter_join(const std::string& name,
                                   const std::vector<torch::Tensor>& shards) {
  PIPEPLAN_ASSERT(!shards.empty());
  for (const torch::Tensor& shard : shards)
    if (shard.sizes() != shards.front().sizes()) return {};
  if (name == "in_proj.weight" || name == "in_proj.bias") {
    // Each shard's rows are [3, its heads · head_dim]: join q, k and v each over the ranks.
    std::vector<torch::Tensor> thirds;
    for (const torch::Tensor& shard : shards) {
      if (shard.size(0) % 3 != 0) return {};
      std::vector<int64_t> split{3, shard.size(0) / 3};
      if (shard.dim() == 2) split.push_back(shard.size(1));
      thirds.push_back(shard.reshape(split));
    }
    const torch::Tensor joined = torch::cat(thirds, 1);
    return shards.front().dim() == 1 ? joined.reshape({-1})
                                     : joined.reshape({-1, shards.front().size(1)});
  }
  if (name == "out_proj.weight" || name == "fc2.weight") return torch::cat(shards, 1);
  if (name == "fc1.weight" || name == "fc1.bias") return torch::cat(shards, 0);
  return shards.front();  // layer norms, out_proj.bias, fc2.bias
}

int64_t transformer_block_param_count(int64_t hidden, int64_t mlp_dim) {
  const int64_t layer_norms = 2 * (2 * hidden);
  const int64_t attention = (3 * hidden * hidden + 3 * hidden) + (hidden * hidden + hidden);
  const int64_t mlp = (hidden * mlp_dim + mlp_dim) + (mlp_dim * hidden + hidden);
  return layer_norms + attention + mlp;
}

LayerSpec transformer_block_spec(int64_t block_idx, const BlockShape& shape) {
  LayerSpec spec;
  spec.name = "block" + std::to_string(block_idx);
  spec.kind = "block";
  spec.param_count = transformer_block_param_count(shape.hidden, shape.mlp_dim);
  spec.build = [shape] { return std::make_shared<TransformerBlock>(shape); };
  spec.tp_divides = {{"heads", shape.heads}, {"mlp_dim", shape.mlp_dim}};
  spec.build_shard = [shape](const TensorParallelGroupPtr& group) {
    return std::make_shared<TransformerBlock>(shape, group);
  };
  return spec;
}

void add_transformer_blocks(const Json& config, bool causal, BlockInit init, Model* model) {
  BlockShape block;
  block.hidden = config_int(config, "hidden");
  block.heads = config_int(config, "heads");
  block.mlp_dim = config_int(config, "mlp_dim");
  block.depth = config_int(config, "layers");
  block.causal = causal;
  block.init = init;
  for (int64_t block_idx = 0; block_idx < block.depth; ++block_idx)
    model->layers.push_back(transformer_block_spec(block_idx, block));
}

double layer_norm_eps(BlockInit init) {
  return init == BlockInit::kVit ? kVitLayerNormEps : kGptLayerNormEps;
}

void trunc_normal_(torch::Tensor tensor, double std) {
  // Inverse CDF of the normal on [-2, 2] standard deviations: u ~ U(2·Φ(-2)-1, 2·Φ(2)-1),
  // x = √2·erfinv(u)·std. The clamp only guards against rounding at the ends.
  torch::NoGradGuard no_grad;
  const double cdf_bound = std::erf(2.0 / std::sqrt(2.0));
  tensor.uniform_(-cdf_bound, cdf_bound);
  tensor.erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-2.0 * std, 2.0 * std);
}

void check_hidden_heads(const std::string& model, const Json& config) {
  check_config_min(model, config, "hidden", 1);
  check_config_min(model, config, "heads", 1);
  const int64_t hidden = config_int(config, "hidden");
  const int64_t heads = config_int(config, "heads");
  PIPEPLAN_CHECK(hidden % heads == 0, "model ", quote(model), ": hidden=", hidden,
                 " is not divisible by heads=", heads, "; expected a multiple of heads");
}

}  // namespace pipeplan::models
