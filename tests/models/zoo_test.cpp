// Tests for models/zoo.h and models/model.h: counts, overrides, determinism, layer chaining.
#include "models/zoo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/blas_env.h"
#include "common/error.h"

namespace pipeplan::models {
namespace {

using ModelArgs = std::vector<std::string>;

// The presets, mlp_tiny, and overrides that reach the other code paths of each family.
std::vector<std::pair<std::string, ModelArgs>> small_models() {
  return {
      {"resnet_tiny", {}},
      {"vit_tiny", {}},
      {"gpt_tiny", {}},
      {"mlp_tiny", {}},
      {"resnet_tiny", {"bottleneck=true", "blocks=2,1,1", "width=8"}},
      {"resnet_tiny", {"stem=imagenet", "in_channels=3", "image_size=32", "num_classes=7"}},
      {"vit_tiny", {"image_size=32", "patch_size=4", "hidden=48", "heads=3", "mlp_dim=96"}},
      {"gpt_tiny", {"vocab_size=100", "seq_len=16", "layers=3", "mlp_dim=100"}},
  };
}

std::string label(const std::pair<std::string, ModelArgs>& entry) {
  std::string text = entry.first;
  for (const std::string& arg : entry.second) text += " " + arg;
  return text;
}

int64_t built_param_count(const LayerPtr& layer) {
  int64_t count = 0;
  for (const auto& param : layer->parameters()) count += param.numel();
  return count;
}

// Every parameter of `layer`, flattened and concatenated.
torch::Tensor flat_parameters(const LayerPtr& layer) {
  std::vector<torch::Tensor> flat;
  for (const auto& param : layer->parameters()) flat.push_back(param.detach().flatten());
  return torch::cat(flat);
}

int num_layers(const Model& model) { return static_cast<int>(model.layers.size()); }

// Splits [0, n) into `pieces` contiguous non-empty ranges and chains them, each built alone.
torch::Tensor forward_in_pieces(const Model& model, int pieces, const torch::Tensor& input,
                                uint64_t seed) {
  torch::Tensor out = input;
  const int n = num_layers(model);
  for (int piece_idx = 0; piece_idx < pieces; ++piece_idx) {
    const int first = n * piece_idx / pieces;
    const int last = n * (piece_idx + 1) / pieces;
    out = forward_layers(build_layers(model, first, last, seed), out);
  }
  return out;
}

TEST(ZooTest, ListsFamiliesInOrderEachWithItsPreset) {
  const std::vector<std::string> expected{
      "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet_tiny", "vit_b16",
      "vit_l16",  "vit_h14",  "vit_tiny", "gpt",       "gpt_tiny",  "mlp",         "mlp_tiny"};
  EXPECT_EQ(zoo_model_names(), expected);
}

TEST(ZooTest, DefaultsHaveTorchvisionParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> expected{
      {"resnet18", 11689512},
      {"resnet34", 21797672},
      {"resnet50", 25557032},
      {"resnet101", 44549160},
      {"resnet152", 60192808},
      {"vit_b16", 86567656},
      {"vit_l16", 304326632},
      {"vit_h14", 632045800},
      // GPT-2 small (124,439,808 with the head tied) plus its own head.
      {"gpt", 124439808 + 50257 * 768}};
  for (const auto& [name, count] : expected)
    EXPECT_EQ(parameter_count(make_model(name)), count) << name;
}

TEST(ZooTest, LayerNamesAndKindsAreCoarse) {
  const Model resnet = make_model("resnet50");
  ASSERT_EQ(num_layers(resnet), 1 + 16 + 1);
  EXPECT_EQ(resnet.layers[0].name, "stem");
  EXPECT_EQ(resnet.layers[1].name, "layer1.0");
  EXPECT_EQ(resnet.layers[4].name, "layer2.0");
  EXPECT_EQ(resnet.layers[16].name, "layer4.2");
  EXPECT_EQ(resnet.layers[16].kind, "block");
  EXPECT_EQ(resnet.layers[17].name, "head");
  for (const char* name : {"vit_b16", "gpt"}) {
    const Model model = make_model(name);
    ASSERT_EQ(num_layers(model), 1 + 12 + 1) << name;
    EXPECT_EQ(model.layers[0].kind, "embedding") << name;
    EXPECT_EQ(model.layers[12].name, "block11") << name;
    EXPECT_EQ(model.layers[13].kind, "head") << name;
  }
  EXPECT_EQ(num_layers(make_model("vit_h14")), 34);
  EXPECT_EQ(num_layers(make_model("resnet_tiny")), 6);
}

TEST(ZooTest, LayerParameterCountsMatchBuiltModules) {
  for (const auto& entry : small_models()) {
    const Model model = make_model(entry.first, entry.second);
    const auto layers = build_layers(model, 0, num_layers(model), /*seed=*/1);
    for (size_t layer_idx = 0; layer_idx < layers.size(); ++layer_idx)
      EXPECT_EQ(built_param_count(layers[layer_idx]), model.layers[layer_idx].param_count)
          << label(entry) << " layer " << model.layers[layer_idx].name;
  }
}

// Builds every layer of every default configuration, one at a time (vit_h14 has 632M).
TEST(ZooTest, SlowTorchvisionCountsOfBuiltModules) {
  for (const std::string& name : zoo_model_names()) {
    const Model model = make_model(name);
    int64_t total = 0;
    for (int layer_idx = 0; layer_idx < num_layers(model); ++layer_idx) {
      const int64_t built = built_param_count(build_layers(model, layer_idx, layer_idx + 1, 1)[0]);
      EXPECT_EQ(built, model.layers[layer_idx].param_count)
          << name << " layer " << model.layers[layer_idx].name;
      total += built;
    }
    EXPECT_EQ(total, parameter_count(model)) << name;
  }
}

TEST(ZooTest, LayerWeightsDoNotDependOnBuildRange) {
  for (const auto& entry : small_models()) {
    const Model model = make_model(entry.first, entry.second);
    const auto whole = build_layers(model, 0, num_layers(model), /*seed=*/7);
    for (int layer_idx = 0; layer_idx < num_layers(model); ++layer_idx) {
      const auto alone = build_layers(model, layer_idx, layer_idx + 1, /*seed=*/7);
      const auto a = whole[layer_idx]->named_parameters();
      const auto b = alone[0]->named_parameters();
      ASSERT_EQ(a.size(), b.size());
      for (size_t p = 0; p < a.size(); ++p)
        EXPECT_TRUE(torch::equal(a[p].value(), b[p].value()))
            << label(entry) << " layer " << layer_idx << " " << a[p].key();
    }
    const auto other_seed = build_layers(model, 0, 1, /*seed=*/8);
    EXPECT_FALSE(torch::equal(flat_parameters(whole[0]), flat_parameters(other_seed[0])))
        << label(entry);
  }
}

TEST(ZooTest, SplitForwardEqualsWholeForward) {
  torch::NoGradGuard no_grad;
  for (const auto& entry : small_models()) {
    const Model model = make_model(entry.first, entry.second);
    const torch::Tensor input = random_batch(model, /*batch_size=*/4, /*seed=*/3).first;
    const torch::Tensor whole = forward_in_pieces(model, /*pieces=*/1, input, /*seed=*/11);
    EXPECT_GT(whole.abs().sum().item<double>(), 0.0) << label(entry);
    for (int pieces : {2, 3})
      EXPECT_TRUE(torch::equal(whole, forward_in_pieces(model, pieces, input, /*seed=*/11)))
          << label(entry) << " in " << pieces << " pieces";
  }
}

TEST(ZooTest, OutputMatchesTargetAndLossBackpropagatesToEveryLayer) {
  for (const auto& entry : small_models()) {
    const Model model = make_model(entry.first, entry.second);
    const auto layers = build_layers(model, 0, num_layers(model), /*seed=*/5);
    const auto [input, target] = random_batch(model, /*batch_size=*/3, /*seed=*/6);
    const torch::Tensor output = forward_layers(layers, input);
    std::vector<int64_t> expected_shape = target.sizes().vec();
    expected_shape.push_back(model.target.num_classes);
    EXPECT_EQ(output.sizes().vec(), expected_shape) << label(entry);
    const torch::Tensor loss = compute_loss(model, output, target);
    ASSERT_EQ(loss.dim(), 0) << label(entry);
    ASSERT_TRUE(std::isfinite(loss.item<double>())) << label(entry);
    loss.backward();
    for (size_t layer_idx = 0; layer_idx < layers.size(); ++layer_idx) {
      double grad_sum = 0.0;
      for (const auto& param : layers[layer_idx]->parameters()) {
        ASSERT_TRUE(param.grad().defined()) << label(entry) << " layer " << layer_idx;
        EXPECT_TRUE(torch::isfinite(param.grad()).all().item<bool>()) << label(entry);
        grad_sum += param.grad().abs().sum().item<double>();
      }
      EXPECT_GT(grad_sum, 0.0) << label(entry) << " layer " << layer_idx;
    }
  }
}

TEST(ZooTest, InputAndTargetDeclarations) {
  for (const char* name : {"resnet_tiny", "vit_tiny", "mlp_tiny"}) {
    const Model model = make_model(name);
    EXPECT_EQ(model.input.sample_shape, (std::vector<int64_t>{1, 28, 28})) << name;
    EXPECT_EQ(model.input.dtype, torch::kFloat32) << name;
    EXPECT_TRUE(model.target.sample_shape.empty()) << name;
    EXPECT_EQ(model.target.num_classes, 10) << name;
    EXPECT_EQ(model.target.loss, LossKind::kCrossEntropy) << name;
  }
  EXPECT_EQ(make_model("resnet50").input.sample_shape, (std::vector<int64_t>{3, 224, 224}));
  const Model gpt = make_model("gpt_tiny");
  EXPECT_EQ(gpt.input.sample_shape, std::vector<int64_t>{32});
  EXPECT_EQ(gpt.input.dtype, torch::kInt64);
  EXPECT_EQ(gpt.input.token_range, 256);
  EXPECT_EQ(gpt.target.sample_shape, std::vector<int64_t>{32});
  EXPECT_EQ(gpt.target.num_classes, 256);
  EXPECT_EQ(gpt.target.loss, LossKind::kNextTokenCrossEntropy);
  const auto [tokens, next] = random_batch(gpt, /*batch_size=*/2, /*seed=*/1);
  EXPECT_GE(tokens.min().item<int64_t>(), 0);
  EXPECT_LT(tokens.max().item<int64_t>(), 256);
}

TEST(ZooTest, OverridesAreTypedAndChecked) {
  const Model model = make_model("mlp_tiny", {"hidden=32", "layers=2"});
  EXPECT_EQ(model.layers.size(), 3u);
  EXPECT_EQ(model.config["hidden"], 32);
  EXPECT_THROW(make_model("mlp_tiny", {"hiden=32"}), Error);
  EXPECT_THROW(make_model("mlp_tiny", {"hidden=abc"}), Error);
  EXPECT_THROW(make_model("mlp_tiny", {"hidden"}), Error);
  EXPECT_THROW(make_model("mlp_tiny", {"hidden=0"}), Error);
  EXPECT_THROW(make_model("no_such_model"), Error);
  EXPECT_THROW(make_model("resnet_tiny", {"bottleneck=maybe"}), Error);
  EXPECT_NE(make_model("mlp_tiny").hash, model.hash);
  EXPECT_EQ(num_layers(make_model("resnet18", {"blocks=1,1"})), 4);
  EXPECT_EQ(num_layers(make_model("vit_tiny", {"layers=6"})), 8);
  EXPECT_EQ(num_layers(make_model("gpt_tiny", {"layers=2"})), 4);
}

// Each message is one line naming the model, the key and the value given.
void expect_bad_config(const std::string& name, const ModelArgs& args,
                       const std::vector<std::string>& needles) {
  const std::string what = name + " " + (args.empty() ? "" : args[0]);
  try {
    make_model(name, args);
    ADD_FAILURE() << what << " was accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.kind(), ErrorKind::kBadInput) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("'" + name + "'"), std::string::npos) << message;
    for (const std::string& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos) << what << ": " << message;
  }
}

TEST(ZooTest, InconsistentConfigurationsAreOneLineErrors) {
  expect_bad_config("resnet18", {"stem=deep"}, {"stem='deep'", "'imagenet' or 'cifar'"});
  for (const char* blocks : {"2,x,2,2", "", "2,,2", "0,2", "-1", "2,2,", "1,1,1,1,1,1,1,1,1"})
    expect_bad_config("resnet18", {std::string("blocks=") + blocks},
                      {"blocks='" + std::string(blocks) + "'", "such as '2,2,2,2'"});
  expect_bad_config("resnet18", {"image_size=31"}, {"image_size=31", ">= 32"});
  expect_bad_config("resnet_tiny", {"image_size=7"}, {"image_size=7", ">= 8"});
  expect_bad_config("resnet_tiny", {"blocks=1,1", "image_size=1"}, {"image_size=1", ">= 2"});
  for (const char* arg : {"width=0", "in_channels=0", "num_classes=-1", "image_size=0"})
    expect_bad_config("resnet50", {arg}, {arg, ">= 1"});
  expect_bad_config("vit_b16", {"image_size=200"},
                    {"image_size=200", "patch_size=16", "multiple of patch_size"});
  expect_bad_config("vit_tiny", {"hidden=66"}, {"hidden=66", "heads=4", "multiple of heads"});
  for (const char* arg : {"heads=0", "patch_size=0", "layers=0", "mlp_dim=-3", "num_classes=0"})
    expect_bad_config("vit_tiny", {arg}, {arg, ">= 1"});
  expect_bad_config("gpt", {"hidden=100"}, {"hidden=100", "heads=12"});
  for (const char* arg : {"vocab_size=0", "seq_len=0", "layers=-2", "heads=0", "hidden=0"})
    expect_bad_config("gpt_tiny", {arg}, {arg, ">= 1"});
  EXPECT_NO_THROW(make_model("resnet_tiny", {"image_size=8"}));
  EXPECT_NO_THROW(make_model("resnet18", {"image_size=32", "stem=cifar", "blocks=1"}));
}

TEST(ZooTest, ConfigRoundTripsThroughModelRef) {
  for (const auto& entry : small_models()) {
    const Model model = make_model(entry.first, entry.second);
    const Model again = make_model_from_config(model.name, model_ref(model).config);
    EXPECT_EQ(again.hash, model.hash) << label(entry);
    EXPECT_EQ(parameter_count(again), parameter_count(model)) << label(entry);
  }
  const Model model = make_model("mlp_tiny", {"hidden=48"});
  Json bad = model.config;
  bad["extra"] = 1;
  EXPECT_THROW(make_model_from_config(model.name, bad), Error);
}

TEST(BlasTest, LibTorchUsesOpenBlas) {
  // LibTorch links the generic libblas.so.3; Debian's alternatives must point it at OpenBLAS.
  (void)torch::mm(torch::ones({8, 8}), torch::ones({8, 8}));
  bool openblas = false;
  for (const std::string& path : loaded_blas_libraries())
    openblas = openblas || path.find("openblas") != std::string::npos;
  EXPECT_TRUE(openblas) << "libblas.so.3 does not resolve to OpenBLAS";
  EXPECT_NE(openblas_core_name(), "");
}

}  // namespace
}  // namespace pipeplan::models
