// ResNet family as torchvision builds it: a stem, one layer per residual block, a pooled head.
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "models/config.h"
#include "models/zoo.h"

namespace pipeplan::models {
namespace {

constexpr int64_t kBottleneckExpansion = 4;
constexpr size_t kMaxStages = 8;
constexpr int64_t kMaxBlocksPerStage = 1000;
constexpr size_t kMaxBlockDigits = 4;

// A configuration whose values have been checked.
struct ResNetShape {
  int64_t in_channels = 0;
  int64_t image_size = 0;
  int64_t num_classes = 0;
  int64_t width = 0;            // planes of stage 0; stage s has width·2^s
  bool imagenet_stem = true;    // 7×7/2 conv and 3×3/2 max-pool; false: 3×3/1 conv (CIFAR)
  bool bottleneck = false;      // Bottleneck (1×1, 3×3, 1×1, expansion 4) or BasicBlock
  std::vector<int64_t> blocks;  // residual blocks per stage
};

// One convolution of a residual block (no bias; always followed by a BatchNorm).
struct ConvShape {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel = 0;
  int64_t stride = 1;
};

int64_t conv_param_count(const ConvShape& conv) {
  return conv.in_channels * conv.out_channels * conv.kernel * conv.kernel;
}
int64_t batch_norm_param_count(int64_t channels) { return 2 * channels; }

// Kaiming-normal (fan_out, ReLU) as torchvision; "same" padding for odd kernels.
torch::nn::Conv2d make_conv(const ConvShape& shape) {
  torch::nn::Conv2d conv(
      torch::nn::Conv2dOptions(shape.in_channels, shape.out_channels, shape.kernel)
          .stride(shape.stride)
          .padding(shape.kernel / 2)
          .bias(false));
  torch::nn::init::kaiming_normal_(conv->weight, /*a=*/0.0, torch::kFanOut, torch::kReLU);
  return conv;
}

// The main path of a block; the stride sits on the 3×3 conv (torchvision's ResNet v1.5).
std::vector<ConvShape> residual_convs(int64_t in_channels, int64_t planes, int64_t stride,
                                      bool bottleneck) {
  if (!bottleneck) return {{in_channels, planes, 3, stride}, {planes, planes, 3, 1}};
  return {{in_channels, planes, 1, 1},
          {planes, planes, 3, stride},
          {planes, planes * kBottleneckExpansion, 1, 1}};
}

int64_t block_out_channels(int64_t planes, bool bottleneck) {
  return bottleneck ? planes * kBottleneckExpansion : planes;
}

class Stem : public Layer {
 public:
  Stem(const ConvShape& conv, bool max_pool)
      : conv_(register_module("conv", make_conv(conv))),
        bn_(register_module("bn", torch::nn::BatchNorm2d(conv.out_channels))),
        max_pool_(max_pool) {}

  torch::Tensor forward(const torch::Tensor& input) override {
    const torch::Tensor out = torch::relu(bn_->forward(conv_->forward(input)));
    return max_pool_ ? torch::max_pool2d(out, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1) : out;
  }

 private:
  torch::nn::Conv2d conv_;
  torch::nn::BatchNorm2d bn_;
  bool max_pool_;
};

// BasicBlock or Bottleneck: conv+bn(+relu) along `convs`, added to the input or to its
// `shortcut` conv+bn (torchvision's downsample), then ReLU.
class ResidualBlock : public Layer {
 public:
  ResidualBlock(const std::vector<ConvShape>& convs, const std::optional<ConvShape>& shortcut) {
    for (size_t conv_idx = 0; conv_idx < convs.size(); ++conv_idx) {
      const std::string suffix = std::to_string(conv_idx + 1);
      convs_.push_back(register_module("conv" + suffix, make_conv(convs[conv_idx])));
      bns_.push_back(
          register_module("bn" + suffix, torch::nn::BatchNorm2d(convs[conv_idx].out_channels)));
    }
    if (!shortcut) return;
    down_conv_ = register_module("downsample_conv", make_conv(*shortcut));
    down_bn_ = register_module("downsample_bn", torch::nn::BatchNorm2d(shortcut->out_channels));
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    torch::Tensor out = input;
    for (size_t conv_idx = 0; conv_idx < convs_.size(); ++conv_idx) {
      out = bns_[conv_idx]->forward(convs_[conv_idx]->forward(out));
      if (conv_idx + 1 < convs_.size()) out = torch::relu(out);
    }
    const torch::Tensor identity =
        down_conv_.is_empty() ? input : down_bn_->forward(down_conv_->forward(input));
    return torch::relu(out + identity);
  }

 private:
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::BatchNorm2d> bns_;
  torch::nn::Conv2d down_conv_{nullptr};
  torch::nn::BatchNorm2d down_bn_{nullptr};
};

class Head : public Layer {
 public:
  Head(int64_t in_features, int64_t num_classes)
      : fc_(register_module("fc", torch::nn::Linear(in_features, num_classes))) {}

  torch::Tensor forward(const torch::Tensor& input) override {
    return fc_->forward(torch::adaptive_avg_pool2d(input, {1, 1}).flatten(1));
  }

 private:
  torch::nn::Linear fc_;
};

LayerSpec stem_spec(const ResNetShape& shape) {
  const ConvShape conv{shape.in_channels, shape.width, shape.imagenet_stem ? 7 : 3,
                       shape.imagenet_stem ? 2 : 1};
  const bool max_pool = shape.imagenet_stem;
  LayerSpec spec{"stem", "stem", conv_param_count(conv) + batch_norm_param_count(shape.width), {}};
  spec.build = [conv, max_pool] { return std::make_shared<Stem>(conv, max_pool); };
  return spec;
}

LayerSpec residual_spec(std::string name, int64_t in_channels, int64_t planes, int64_t stride,
                        bool bottleneck) {
  const std::vector<ConvShape> convs = residual_convs(in_channels, planes, stride, bottleneck);
  const int64_t out_channels = block_out_channels(planes, bottleneck);
  std::optional<ConvShape> shortcut;
  if (stride != 1 || in_channels != out_channels)
    shortcut = ConvShape{in_channels, out_channels, 1, stride};
  int64_t count = 0;
  for (const ConvShape& conv : convs)
    count += conv_param_count(conv) + batch_norm_param_count(conv.out_channels);
  if (shortcut) count += conv_param_count(*shortcut) + batch_norm_param_count(out_channels);
  LayerSpec spec{std::move(name), "block", count, {}};
  spec.build = [convs, shortcut] { return std::make_shared<ResidualBlock>(convs, shortcut); };
  return spec;
}

LayerSpec head_spec(int64_t in_features, int64_t num_classes) {
  LayerSpec spec{"head", "head", in_features * num_classes + num_classes, {}};
  spec.build = [=] { return std::make_shared<Head>(in_features, num_classes); };
  return spec;
}

// "3,4,6,3" -> {3, 4, 6, 3}; 1 to kMaxStages counts, each in [1, kMaxBlocksPerStage].
std::vector<int64_t> parse_blocks(const std::string& model, const std::string& text) {
  std::vector<int64_t> blocks;
  bool valid = !text.empty();
  for (size_t start = 0; valid && start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    valid = !item.empty() && item.size() <= kMaxBlockDigits &&
            std::all_of(item.begin(), item.end(), [](char c) { return std::isdigit(c) != 0; });
    if (valid) blocks.push_back(std::stoll(item));
    valid = valid && blocks.back() >= 1 && blocks.back() <= kMaxBlocksPerStage;
    start = comma + 1;
  }
  PIPEPLAN_CHECK(valid && blocks.size() <= kMaxStages, "model ", quote(model),
                 ": blocks=", quote(text), " is not a list of 1 to ", kMaxStages,
                 " block counts per stage; expected comma-separated integers in [1, ",
                 kMaxBlocksPerStage, "] such as '2,2,2,2'");
  return blocks;
}

ResNetShape resnet_shape(const std::string& model, const Json& config) {
  for (const char* key : {"in_channels", "image_size", "num_classes", "width"})
    check_config_min(model, config, key, 1);
  const std::string stem = config_string(config, "stem");
  PIPEPLAN_CHECK(stem == "imagenet" || stem == "cifar", "model ", quote(model),
                 ": stem=", quote(stem), " is unknown; expected 'imagenet' or 'cifar'");
  ResNetShape shape;
  shape.in_channels = config_int(config, "in_channels");
  shape.image_size = config_int(config, "image_size");
  shape.num_classes = config_int(config, "num_classes");
  shape.width = config_int(config, "width");
  shape.imagenet_stem = stem == "imagenet";
  shape.bottleneck = config_bool(config, "bottleneck");
  shape.blocks = parse_blocks(model, config_string(config, "blocks"));
  // Every stride-2 step should see at least 2 pixels; below this, padding alone fills the map.
  const int64_t downsampling = (shape.imagenet_stem ? 4 : 1) << (shape.blocks.size() - 1);
  PIPEPLAN_CHECK(shape.image_size >= downsampling, "model ", quote(model),
                 ": image_size=", shape.image_size, " is too small for the ", downsampling,
                 "x downsampling of the ", stem, " stem and ", shape.blocks.size(),
                 " stages; expected image_size >= ", downsampling);
  return shape;
}

Model build_resnet(const std::string& name, const Json& config) {
  const ResNetShape shape = resnet_shape(name, config);
  Model model;
  model.name = name;
  model.config = config;
  model.input.sample_shape = {shape.in_channels, shape.image_size, shape.image_size};
  model.target.num_classes = shape.num_classes;
  model.layers.push_back(stem_spec(shape));
  int64_t in_channels = shape.width;
  for (size_t stage_idx = 0; stage_idx < shape.blocks.size(); ++stage_idx) {
    const int64_t planes = shape.width << stage_idx;
    for (int64_t block_idx = 0; block_idx < shape.blocks[stage_idx]; ++block_idx) {
      const int64_t stride = stage_idx > 0 && block_idx == 0 ? 2 : 1;
      model.layers.push_back(
          residual_spec("layer" + std::to_string(stage_idx + 1) + "." + std::to_string(block_idx),
                        in_channels, planes, stride, shape.bottleneck));
      in_channels = block_out_channels(planes, shape.bottleneck);
    }
  }
  model.layers.push_back(head_spec(in_channels, shape.num_classes));
  return model;
}

// torchvision's ImageNet configuration: 3×224×224 input, 1000 classes, base width 64.
Json imagenet_defaults(const char* blocks, bool bottleneck) {
  return Json{{"in_channels", 3},        {"image_size", 224}, {"num_classes", 1000},
              {"stem", "imagenet"},      {"width", 64},       {"blocks", blocks},
              {"bottleneck", bottleneck}};
}

}  // namespace

std::vector<ZooEntry> resnet_entries() {
  return {
      {"resnet18", "ResNet-18 (torchvision), 8 basic blocks", imagenet_defaults("2,2,2,2", false),
       build_resnet},
      {"resnet34", "ResNet-34 (torchvision), 16 basic blocks", imagenet_defaults("3,4,6,3", false),
       build_resnet},
      {"resnet50", "ResNet-50 (torchvision), 16 bottleneck blocks",
       imagenet_defaults("3,4,6,3", true), build_resnet},
      {"resnet101", "ResNet-101 (torchvision), 33 bottleneck blocks",
       imagenet_defaults("3,4,23,3", true), build_resnet},
      {"resnet152", "ResNet-152 (torchvision), 50 bottleneck blocks",
       imagenet_defaults("3,8,36,3", true), build_resnet},
      {"resnet_tiny", "ResNet, CIFAR stem, width 16, one basic block per stage (Fashion-MNIST)",
       Json{{"in_channels", 1},
            {"image_size", 28},
            {"num_classes", 10},
            {"stem", "cifar"},
            {"width", 16},
            {"blocks", "1,1,1,1"},
            {"bottleneck", false}},
       build_resnet},
  };
}

}  // namespace pipeplan::models
