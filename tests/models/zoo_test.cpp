// Tests for models/zoo.h and models/model.h: overrides, determinism, layer chaining.
#include "models/zoo.h"

#include <gtest/gtest.h>

#include "common/blas_env.h"
#include "common/error.h"

namespace pipeplan::models {
namespace {

TEST(ZooTest, LayerParameterCountsMatchBuiltModules) {
  for (const std::string& name : {std::string("mlp_tiny")}) {
    const Model model = make_model(name);
    const auto layers = build_layers(model, 0, static_cast<int>(model.layers.size()), /*seed=*/1);
    for (size_t layer_idx = 0; layer_idx < layers.size(); ++layer_idx) {
      int64_t built = 0;
      for (const auto& param : layers[layer_idx]->parameters()) built += param.numel();
      EXPECT_EQ(built, model.layers[layer_idx].param_count) << name << " layer " << layer_idx;
    }
  }
}

TEST(ZooTest, LayerWeightsDoNotDependOnBuildRange) {
  const Model model = make_model("mlp_tiny");
  const int num_layers = static_cast<int>(model.layers.size());
  const auto whole = build_layers(model, 0, num_layers, /*seed=*/7);
  for (int layer_idx = 0; layer_idx < num_layers; ++layer_idx) {
    const auto alone = build_layers(model, layer_idx, layer_idx + 1, /*seed=*/7);
    const auto a = whole[layer_idx]->parameters();
    const auto b = alone[0]->parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t p = 0; p < a.size(); ++p) EXPECT_TRUE(torch::equal(a[p], b[p])) << layer_idx;
  }
  const auto other_seed = build_layers(model, 0, 1, /*seed=*/8);
  EXPECT_FALSE(torch::equal(whole[0]->parameters()[0], other_seed[0]->parameters()[0]));
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
  EXPECT_NE(make_model("mlp_tiny").hash, model.hash);
}

TEST(ZooTest, ConfigRoundTripsThroughModelRef) {
  const Model model = make_model("mlp_tiny", {"hidden=48"});
  const Model again = make_model_from_config(model.name, model_ref(model).config);
  EXPECT_EQ(again.hash, model.hash);
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
