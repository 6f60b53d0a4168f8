// MLP family: flatten, `layers` Linear+ReLU blocks of width `hidden`, a Linear head.
#include <string>

#include "common/error.h"
#include "models/config.h"
#include "models/zoo.h"

namespace pipeplan::models {
namespace {

// Linear layer with optional flatten of its input and optional ReLU after it.
class DenseLayer : public Layer {
 public:
  DenseLayer(int64_t in_features, int64_t out_features, bool flatten, bool relu)
      : fc_(register_module("fc", torch::nn::Linear(in_features, out_features))),
        flatten_(flatten),
        relu_(relu) {}

  torch::Tensor forward(const torch::Tensor& input) override {
    torch::Tensor out = fc_->forward(flatten_ ? input.flatten(1) : input);
    return relu_ ? torch::relu(out) : out;
  }

 private:
  torch::nn::Linear fc_;
  bool flatten_;
  bool relu_;
};

LayerSpec dense_spec(std::string name, std::string kind, int64_t in_features, int64_t out_features,
                     bool flatten, bool relu) {
  LayerSpec spec;
  spec.name = std::move(name);
  spec.kind = std::move(kind);
  spec.param_count = in_features * out_features + out_features;
  spec.build = [=] { return std::make_shared<DenseLayer>(in_features, out_features, flatten, relu); };
  return spec;
}

Model build_mlp(const std::string& name, const Json& config) {
  for (const char* key : {"in_channels", "image_size", "hidden", "layers", "num_classes"})
    check_config_min(name, config, key, 1);
  check_config_blocks(name, config);
  const int64_t channels = config_int(config, "in_channels");
  const int64_t image_size = config_int(config, "image_size");
  const int64_t hidden = config_int(config, "hidden");
  const int64_t num_hidden = config_int(config, "layers");
  const int64_t num_classes = config_int(config, "num_classes");

  Model model;
  model.name = name;
  model.config = config;
  model.input.sample_shape = {channels, image_size, image_size};
  model.target.num_classes = num_classes;
  model.layers.push_back(dense_spec("input", "linear", channels * image_size * image_size, hidden,
                                    /*flatten=*/true, /*relu=*/true));
  for (int64_t layer_idx = 1; layer_idx < num_hidden; ++layer_idx)
    model.layers.push_back(dense_spec("hidden" + std::to_string(layer_idx), "linear", hidden,
                                      hidden, /*flatten=*/false, /*relu=*/true));
  model.layers.push_back(dense_spec("head", "head", hidden, num_classes, /*flatten=*/false,
                                    /*relu=*/false));
  return model;
}

Json mlp_defaults(int64_t hidden, int64_t layers) {
  return Json{{"in_channels", 1}, {"image_size", 28}, {"hidden", hidden}, {"layers", layers},
              {"num_classes", 10}};
}

}  // namespace

std::vector<ZooEntry> mlp_entries() {
  return {
      {"mlp", "MLP, 16 hidden layers of width 4096 (Fashion-MNIST-shaped input)",
       mlp_defaults(/*hidden=*/4096, /*layers=*/16), build_mlp},
      {"mlp_tiny", "MLP, 4 hidden layers of width 128; trains in milliseconds",
       mlp_defaults(/*hidden=*/128, /*layers=*/4), build_mlp},
  };
}

}  // namespace pipeplan::models
