// GPT-style decoder family: token and position embeddings, pre-LN causal blocks, an untied head.
#include <string>
#include <vector>

#include "models/blocks.h"
#include "models/config.h"
#include "models/zoo.h"

namespace pipeplan::models {
namespace {

constexpr double kEmbeddingStd = 0.02;  // GPT-2
constexpr double kHeadStd = 0.02;

// A configuration whose values have been checked.
struct GptShape {
  int64_t vocab_size = 0;
  int64_t seq_len = 0;
  int64_t hidden = 0;
};

// int64 tokens [B, T] (T <= seq_len) -> [B, T, hidden]: token plus learned position embedding.
class TokenEmbedding : public Layer {
 public:
  explicit TokenEmbedding(const GptShape& shape)
      : token_(register_module("token", torch::nn::Embedding(shape.vocab_size, shape.hidden))),
        position_(register_parameter("position", torch::empty({shape.seq_len, shape.hidden}))) {
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(token_->weight, 0.0, kEmbeddingStd);
    torch::nn::init::normal_(position_, 0.0, kEmbeddingStd);
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    return token_->forward(input) + position_.slice(/*dim=*/0, /*start=*/0, input.size(1));
  }

 private:
  torch::nn::Embedding token_;
  torch::Tensor position_;
};

// [B, T, hidden] -> [B, T, vocab] logits: final LayerNorm and a Linear without bias (GPT-2's
// lm_head), untied from the token embedding because the two may live on different stages.
class LmHead : public Layer {
 public:
  LmHead(int64_t hidden, int64_t vocab_size)
      : ln_(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(
                                      layer_norm_eps(BlockInit::kGpt))))),
        fc_(register_module(
            "fc", torch::nn::Linear(torch::nn::LinearOptions(hidden, vocab_size).bias(false)))) {
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(fc_->weight, 0.0, kHeadStd);
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    return fc_->forward(ln_->forward(input));
  }

 private:
  torch::nn::LayerNorm ln_;
  torch::nn::Linear fc_;
};

GptShape gpt_shape(const std::string& model, const Json& config) {
  for (const char* key : {"vocab_size", "seq_len", "layers", "mlp_dim"})
    check_config_min(model, config, key, 1);
  check_config_blocks(model, config);
  check_hidden_heads(model, config);
  GptShape shape;
  shape.vocab_size = config_int(config, "vocab_size");
  shape.seq_len = config_int(config, "seq_len");
  shape.hidden = config_int(config, "hidden");
  return shape;
}

LayerSpec embedding_spec(const GptShape& shape) {
  LayerSpec spec{"embedding", "embedding", (shape.vocab_size + shape.seq_len) * shape.hidden, {}};
  spec.build = [shape] { return std::make_shared<TokenEmbedding>(shape); };
  return spec;
}

LayerSpec head_spec(const GptShape& shape) {
  const int64_t hidden = shape.hidden;
  const int64_t vocab_size = shape.vocab_size;
  LayerSpec spec{"head", "head", 2 * hidden + hidden * vocab_size, {}};
  spec.build = [=] { return std::make_shared<LmHead>(hidden, vocab_size); };
  return spec;
}

Model build_gpt(const std::string& name, const Json& config) {
  const GptShape shape = gpt_shape(name, config);
  Model model;
  model.name = name;
  model.config = config;
  model.input.sample_shape = {shape.seq_len};
  model.input.dtype = torch::kInt64;
  model.input.token_range = shape.vocab_size;
  model.target.sample_shape = {shape.seq_len};
  model.target.num_classes = shape.vocab_size;
  model.target.loss = LossKind::kNextTokenCrossEntropy;
  model.layers.push_back(embedding_spec(shape));
  add_transformer_blocks(config, /*causal=*/true, BlockInit::kGpt, &model);
  model.layers.push_back(head_spec(shape));
  return model;
}

Json gpt_defaults(int64_t vocab_size, int64_t seq_len, int64_t hidden, int64_t layers,
                  int64_t heads, int64_t mlp_dim) {
  return Json{{"vocab_size", vocab_size}, {"seq_len", seq_len}, {"hidden", hidden},
              {"layers", layers},         {"heads", heads},     {"mlp_dim", mlp_dim}};
}

}  // namespace

std::vector<ZooEntry> gpt_entries() {
  return {
      {"gpt", "GPT-2 small shape (12 causal blocks of width 768), untied head",
       gpt_defaults(/*vocab_size=*/50257, /*seq_len=*/1024, /*hidden=*/768, /*layers=*/12,
                    /*heads=*/12, /*mlp_dim=*/3072),
       build_gpt},
      {"gpt_tiny", "GPT, 4 causal blocks of width 64, byte vocabulary, 32 tokens",
       gpt_defaults(/*vocab_size=*/256, /*seq_len=*/32, /*hidden=*/64, /*layers=*/4,
                    /*heads=*/4, /*mlp_dim=*/256),
       build_gpt},
  };
}

}  // namespace pipeplan::models
