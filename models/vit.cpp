// Vision Transformer family as torchvision builds it: patch embedding, encoder blocks, head.
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "models/blocks.h"
#include "models/config.h"
#include "models/zoo.h"

namespace pipeplan::models {
namespace {

constexpr double kPositionStd = 0.02;  // torchvision's pos_embedding
constexpr double kHeadStd = 0.02;      // torchvision zeroes the head; see VitHead

// A configuration whose values have been checked.
struct VitShape {
  int64_t image_size = 0;
  int64_t patch_size = 0;
  int64_t in_channels = 0;
  int64_t num_classes = 0;
  int64_t hidden = 0;

  int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
};

// [B, C, H, W] -> [B, 1 + patches, hidden]: patch conv, class token first, plus positions.
class PatchEmbedding : public Layer {
 public:
  explicit PatchEmbedding(const VitShape& shape)
      : conv_proj_(register_module(
            "conv_proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(shape.in_channels, shape.hidden,
                                                                    shape.patch_size)
                                               .stride(shape.patch_size)))),
        class_token_(register_parameter("class_token", torch::zeros({1, 1, shape.hidden}))),
        position_(register_parameter("pos_embedding",
                                     torch::empty({1, shape.num_patches() + 1, shape.hidden}))) {
    torch::NoGradGuard no_grad;
    const int64_t fan_in = shape.in_channels * shape.patch_size * shape.patch_size;
    trunc_normal_(conv_proj_->weight, std::sqrt(1.0 / static_cast<double>(fan_in)));
    torch::nn::init::zeros_(conv_proj_->bias);
    torch::nn::init::normal_(position_, 0.0, kPositionStd);
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    const torch::Tensor patches = conv_proj_->forward(input).flatten(2).transpose(1, 2);
    const torch::Tensor class_tokens = class_token_.expand({input.size(0), -1, -1});
    return torch::cat({class_tokens, patches}, /*dim=*/1) + position_;
  }

 private:
  torch::nn::Conv2d conv_proj_;
  torch::Tensor class_token_;
  torch::Tensor position_;
};

// [B, T, hidden] -> [B, classes]: final LayerNorm, the class token, Linear. torchvision starts
// the head at zero; a small normal keeps the outputs (and first gradients) of the layers
// before it from vanishing, which split-equality tests rely on.
class VitHead : public Layer {
 public:
  VitHead(int64_t hidden, int64_t num_classes)
      : ln_(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(
                                      layer_norm_eps(BlockInit::kVit))))),
        fc_(register_module("fc", torch::nn::Linear(hidden, num_classes))) {
    torch::NoGradGuard no_grad;
    trunc_normal_(fc_->weight, kHeadStd);
    torch::nn::init::zeros_(fc_->bias);
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    return fc_->forward(ln_->forward(input).select(/*dim=*/1, /*index=*/0));
  }

 private:
  torch::nn::LayerNorm ln_;
  torch::nn::Linear fc_;
};

VitShape vit_shape(const std::string& model, const Json& config) {
  for (const char* key :
       {"image_size", "patch_size", "in_channels", "num_classes", "layers", "mlp_dim"})
    check_config_min(model, config, key, 1);
  check_config_blocks(model, config);
  check_hidden_heads(model, config);
  VitShape shape;
  shape.image_size = config_int(config, "image_size");
  shape.patch_size = config_int(config, "patch_size");
  shape.in_channels = config_int(config, "in_channels");
  shape.num_classes = config_int(config, "num_classes");
  shape.hidden = config_int(config, "hidden");
  PIPEPLAN_CHECK(shape.image_size % shape.patch_size == 0, "model ", quote(model),
                 ": image_size=", shape.image_size,
                 " is not divisible by patch_size=", shape.patch_size,
                 "; expected a multiple of patch_size");
  return shape;
}

LayerSpec embedding_spec(const VitShape& shape) {
  const int64_t conv =
      shape.in_channels * shape.hidden * shape.patch_size * shape.patch_size + shape.hidden;
  const int64_t tokens = (shape.num_patches() + 1) * shape.hidden + shape.hidden;
  LayerSpec spec{"embedding", "embedding", conv + tokens, {}};
  spec.build = [shape] { return std::make_shared<PatchEmbedding>(shape); };
  return spec;
}

LayerSpec head_spec(const VitShape& shape) {
  const int64_t hidden = shape.hidden;
  const int64_t num_classes = shape.num_classes;
  LayerSpec spec{"head", "head", 2 * hidden + hidden * num_classes + num_classes, {}};
  spec.build = [=] { return std::make_shared<VitHead>(hidden, num_classes); };
  return spec;
}

Model build_vit(const std::string& name, const Json& config) {
  const VitShape shape = vit_shape(name, config);
  Model model;
  model.name = name;
  model.config = config;
  model.input.sample_shape = {shape.in_channels, shape.image_size, shape.image_size};
  model.target.num_classes = shape.num_classes;
  model.layers.push_back(embedding_spec(shape));
  add_transformer_blocks(config, /*causal=*/false, BlockInit::kVit, &model);
  model.layers.push_back(head_spec(shape));
  return model;
}

// torchvision's configuration: 3×224×224 input, 1000 classes.
Json imagenet_defaults(int64_t patch_size, int64_t hidden, int64_t layers, int64_t heads,
                       int64_t mlp_dim) {
  return Json{{"image_size", 224},   {"patch_size", patch_size}, {"in_channels", 3},
              {"num_classes", 1000}, {"hidden", hidden},         {"layers", layers},
              {"heads", heads},      {"mlp_dim", mlp_dim}};
}

}  // namespace

std::vector<ZooEntry> vit_entries() {
  return {
      {"vit_b16", "ViT-B/16 (torchvision), 12 encoder blocks of width 768",
       imagenet_defaults(/*patch_size=*/16, /*hidden=*/768, /*layers=*/12, /*heads=*/12,
                         /*mlp_dim=*/3072),
       build_vit},
      {"vit_l16", "ViT-L/16 (torchvision), 24 encoder blocks of width 1024",
       imagenet_defaults(/*patch_size=*/16, /*hidden=*/1024, /*layers=*/24, /*heads=*/16,
                         /*mlp_dim=*/4096),
       build_vit},
      {"vit_h14", "ViT-H/14 (torchvision, 224x224), 32 encoder blocks of width 1280",
       imagenet_defaults(/*patch_size=*/14, /*hidden=*/1280, /*layers=*/32, /*heads=*/16,
                         /*mlp_dim=*/5120),
       build_vit},
      {"vit_tiny", "ViT, 4 blocks of width 64, 7x7 patches (Fashion-MNIST)",
       Json{{"image_size", 28},
            {"patch_size", 7},
            {"in_channels", 1},
            {"num_classes", 10},
            {"hidden", 64},
            {"layers", 4},
            {"heads", 4},
            {"mlp_dim", 128}},
       build_vit},
  };
}

}  // namespace pipeplan::models
