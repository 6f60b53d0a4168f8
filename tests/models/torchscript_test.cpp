// Tests for models/torchscript.h: layers from a file, settings, same results as the zoo, refusals.
#include "models/torchscript.h"

#include <gtest/gtest.h>
#include <torch/script.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "common/error.h"
#include "common/hash.h"
#include "common/json.h"
#include "common/units.h"
#include "models/tensor_parallel.h"
#include "models/zoo.h"
#include "runtime/memory_tracker.h"
#include "tests/models/torchscript_files.h"

namespace pipeplan::models {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMlpSeed = 7;

class TorchScriptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::test_models_dir(kMlpSeed, &setup_error_);
    scratch_ = std::string(PIPEPLAN_BINARY_DIR) + "/test_runs/TorchScriptTest/" +
               std::to_string(::getpid());
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
  }

  void SetUp() override {
    if (testing::torch_python().empty()) GTEST_SKIP() << testing::kNoTorchPython;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  /// A file of the shared, read-only test models folder.
  static std::string file(const std::string& name) { return dir_ + "/" + name; }
  /// A path in this process's own folder, for files a test writes.
  static std::string scratch(const std::string& name) { return scratch_ + "/" + name; }

  static Model mlp() { return make_model(file("mlp.pt"), {"input_shape=1x28x28"}); }

  static std::string dir_;
  static std::string scratch_;
  static std::string setup_error_;
};

std::string TorchScriptTest::dir_;
std::string TorchScriptTest::scratch_;
std::string TorchScriptTest::setup_error_;

std::vector<std::string> layer_names(const Model& model) {
  std::vector<std::string> names;
  for (const LayerSpec& layer : model.layers) names.push_back(layer.name);
  return names;
}

// The one-line message of the bad-input Error that `make` throws ("" when it throws none).
template <typename Make>
std::string bad_input_message(Make&& make) {
  try {
    make();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kBadInput) << error.what();
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
    return error.what();
  }
  return "";
}

TEST_F(TorchScriptTest, PathsAreRecognisedBySlashOrSuffix) {
  EXPECT_TRUE(is_torchscript_path("model.pt"));
  EXPECT_TRUE(is_torchscript_path("model.pth"));
  EXPECT_TRUE(is_torchscript_path("./model"));
  EXPECT_TRUE(is_torchscript_path("/abs/model.bin"));
  for (const std::string& name : zoo_model_names()) EXPECT_FALSE(is_torchscript_path(name)) << name;
}

TEST_F(TorchScriptTest, SequentialChildrenAreTheLayers) {
  const Model model = mlp();
  const Model zoo_model = make_model("mlp_tiny");
  EXPECT_EQ(layer_names(model), (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  ASSERT_EQ(model.layers.size(), zoo_model.layers.size());
  for (size_t layer_idx = 0; layer_idx < model.layers.size(); ++layer_idx) {
    EXPECT_EQ(model.layers[layer_idx].kind, "Dense");
    EXPECT_EQ(model.layers[layer_idx].param_count, zoo_model.layers[layer_idx].param_count);
  }
  EXPECT_EQ(model.input.sample_shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(model.input.dtype, torch::kFloat32);
  EXPECT_EQ(model.target.num_classes, 10);  // from the last layer's output
  EXPECT_EQ(model.target.loss, LossKind::kCrossEntropy);
  EXPECT_EQ(model.config.at("input_shape"), "1x28x28");
  EXPECT_EQ(model.config.at("file_hash"), file_hash(file("mlp.pt")));
  EXPECT_EQ(model_ref(model).num_layers, 5);
}

TEST_F(TorchScriptTest, SameWeightsGiveTheZooModelsOutputsWhateverTheSeed) {
  const Model model = mlp();
  const Model zoo_model = make_model("mlp_tiny");
  const int num_layers = static_cast<int>(model.layers.size());
  const auto zoo_layers = build_layers(zoo_model, 0, num_layers, kMlpSeed);
  const auto file_layers = build_layers(model, 0, num_layers, /*seed=*/123);
  for (int layer_idx = 0; layer_idx < num_layers; ++layer_idx) {
    const auto zoo_parameters = zoo_layers[layer_idx]->named_parameters();
    const auto file_parameters = file_layers[layer_idx]->named_parameters();
    ASSERT_EQ(zoo_parameters.size(), file_parameters.size());
    for (const auto& item : zoo_parameters) {
      // Named by their attribute path in the file, as PyTorch's state_dict names them.
      const std::string file_name = std::to_string(layer_idx) + "." + item.key();
      ASSERT_TRUE(file_parameters.contains(file_name)) << file_name;
      EXPECT_TRUE(torch::equal(item.value(), file_parameters[file_name])) << file_name;
    }
  }
  const torch::Tensor input = random_batch(model, /*batch_size=*/3, /*seed=*/1).first;
  EXPECT_TRUE(torch::allclose(forward_layers(file_layers, input), forward_layers(zoo_layers, input),
                              /*rtol=*/1e-6, /*atol=*/1e-7));
}

// Containers are opened; a child without parameters or buffers (ReLU) joins a neighbour.
TEST_F(TorchScriptTest, LayersContainerChildrenAreTheLayers) {
  for (const char* name : {"layers_list.pt", "layers_sequential.pt"}) {
    const Model model = make_model(file(name), {"input_shape=8"});
    EXPECT_EQ(layer_names(model), (std::vector<std::string>{"layers.0", "layers.2"})) << name;
    EXPECT_EQ(parameter_count(model), 8 * 16 + 16 + 16 * 4 + 4) << name;
    EXPECT_EQ(model.target.num_classes, 4) << name;
    const auto layers = build_layers(model, 1, 2, /*seed=*/0);
    const torch::Tensor input = torch::randn({2, 16}) - 0.5;
    EXPECT_TRUE(
        torch::allclose(forward_layers(layers, input),
                        torch::linear(input, layers[0]->named_parameters()["layers.2.weight"],
                                      layers[0]->named_parameters()["layers.2.bias"])));
  }
}

TEST_F(TorchScriptTest, SettingsComeFromAttributesAndModelArgs) {
  const Model cnn = make_model(file("cnn.pt"));
  EXPECT_EQ(cnn.input.sample_shape, (std::vector<int64_t>{3, 16, 16}));
  EXPECT_EQ(cnn.target.num_classes, 10);
  EXPECT_EQ(layer_names(cnn),
            (std::vector<std::string>{"0.0", "0.1", "1.0", "1.1", "2.0", "2.1", "3.2"}));
  EXPECT_EQ(make_model(file("cnn.pt"), {"input_shape=3x24x24"}).input.sample_shape,
            (std::vector<int64_t>{3, 24, 24}));

  const Model tokens = make_model(file("tokens.pt"));
  EXPECT_EQ(tokens.input.dtype, torch::kInt64);
  EXPECT_EQ(tokens.input.token_range, 50);
  EXPECT_EQ(tokens.target.num_classes, 50);
  EXPECT_EQ(tokens.target.loss, LossKind::kNextTokenCrossEntropy);
  EXPECT_EQ(tokens.target.sample_shape, (std::vector<int64_t>{12}));
  auto [input, target] = random_batch(tokens, /*batch_size=*/2, /*seed=*/0);
  const auto layers = build_layers(tokens, 0, 2, /*seed=*/0);
  EXPECT_TRUE(
      std::isfinite(compute_loss(tokens, forward_layers(layers, input), target).item<double>()));
  EXPECT_EQ(make_model(file("tokens.pt"), {"token_range=20"}).input.token_range, 20);
}

TEST_F(TorchScriptTest, MissingOrContradictedSettingsSayWhatToGive) {
  EXPECT_NE(bad_input_message([&] { make_model(file("mlp.pt")); }).find("--model-arg input_shape="),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] {
              make_model(file("mlp.pt"), {"input_shape=3x32x32"});
            }).find("layer '0' fails on 2 samples of 3x32x32 float32 (RuntimeError: mat1 and mat2"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] {
              make_model(file("cnn.pt"), {"num_classes=12"});
            }).find("has 10 classes, not num_classes=12"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] {
              make_model(file("mlp.pt"), {"input_shape=1x28x28", "loss=mse"});
            }).find("loss='mse'"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] {
              make_model(file("mlp.pt"), {"input_shape=1x2y"});
            }).find("input_shape='1x2y'"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] {
              make_model(file("tokens.pt"), {"token_range=51"});
            }).find("12 int64 in [0, 51) (RuntimeError: index out of range"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] {
              make_model(file("tokens.pt"), {"token_range=20", "num_classes=10"});
            }).find("has 50 classes, not num_classes=10"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] { make_model(file("mlp.pt"), {"hidden=3"}); }).find("'hidden'"),
            std::string::npos);
}

TEST_F(TorchScriptTest, RefusesWhatCannotBeSplitNamingTheNode) {
  const std::string corrupt = scratch("corrupt.pt");
  std::ofstream(corrupt) << "not a zip archive\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {scratch("missing.pt"), "does not exist"},
      {corrupt, "is not a TorchScript file"},
      {file("state_dict.pt"), "is not a TorchScript file"},
      {file("float64.pt"), "parameter '0.weight' is Double"},
      {file("two_inputs.pt"), "forward takes 2 inputs"},
      {file("returns_dict.pt"), "forward returns Dict[str, Tensor]"},
      {file("data_dependent.pt"),
       "control flow whose condition depends on tensor values (prim::If at"},
      {file("in_place.pt"),
       "changes in place a tensor that crosses a cut between layers "
       "(aten::relu_ at"},
  };
  for (const auto& [path, expected] : cases) {
    const std::string message = bad_input_message([&] { make_model(path, {"input_shape=8"}); });
    EXPECT_NE(message.find(expected), std::string::npos) << path << ": " << message;
  }
}

TEST_F(TorchScriptTest, ConfigRebuildsTheModelAndRefusesAChangedFile) {
  const std::string path = scratch("changing.pt");
  fs::copy_file(file("mlp.pt"), path, fs::copy_options::overwrite_existing);
  const Model model = make_model(path, {"input_shape=1x28x28"});
  const Model again = make_model_from_config(path, model_ref(model).config);
  EXPECT_EQ(again.hash, model.hash);
  EXPECT_EQ(layer_names(again), layer_names(model));
  EXPECT_NE(model.hash, make_model(path, {"input_shape=784"}).hash);

  fs::copy_file(file("cnn.pt"), path, fs::copy_options::overwrite_existing);
  const std::string expected = "'" + path + "' changed since the plan was made";
  EXPECT_EQ(
      bad_input_message([&] { make_model_from_config(path, model.config); }).rfind(expected, 0),
      0u);
  EXPECT_EQ(bad_input_message([&] { build_layers(model, 0, 1, /*seed=*/0); }).rfind(expected, 0),
            0u);
  Json bad = model.config;
  bad["num_classes"] = "ten";
  EXPECT_NE(bad_input_message([&] { make_model_from_config(path, bad); }).find("num_classes"),
            std::string::npos);
}

// What StageRuntime does: parameters become views into a new buffer (set_data), then the
// optimizer updates that buffer in place; the module's forward must see both.
TEST_F(TorchScriptTest, ParameterUpdatesReachTheModulesForward) {
  const LayerPtr head = build_layers(mlp(), 4, 5, /*seed=*/0).front();
  const torch::Tensor input = torch::randn({3, 128});
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::zeros({128 * 10 + 10});
  int64_t offset = 0;
  for (torch::Tensor& parameter : head->parameters()) {
    parameter.set_data(flat.narrow(0, offset, parameter.numel()).view(parameter.sizes()));
    offset += parameter.numel();
  }
  EXPECT_TRUE(torch::equal(head->forward(input), torch::zeros({3, 10})));
  flat.narrow(0, 128 * 10, 10).fill_(1.5);  // the bias, updated in place
  EXPECT_TRUE(torch::equal(head->forward(input), torch::full({3, 10}, 1.5)));
}

TEST_F(TorchScriptTest, TrainAndEvalModesReachBatchNorm) {
  const LayerPtr layer = build_layers(make_model(file("cnn.pt")), 1, 2, /*seed=*/0).front();
  const torch::Tensor running_mean = layer->named_buffers()["0.1.running_mean"];
  const torch::Tensor input = torch::randn({4, 8, 16, 16}) + 2.0;
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(layer->is_training());
  const torch::Tensor before = running_mean.clone();
  const torch::Tensor train_output = layer->forward(input);
  EXPECT_FALSE(torch::equal(running_mean, before));  // batch statistics were folded in
  layer->eval();
  const torch::Tensor after_train = running_mean.clone();
  const torch::Tensor eval_output = layer->forward(input);
  EXPECT_TRUE(torch::equal(running_mean, after_train));
  EXPECT_FALSE(torch::allclose(eval_output, train_output));
  layer->train();
  layer->forward(input);
  EXPECT_FALSE(torch::equal(running_mean, after_train));
}

TEST_F(TorchScriptTest, AStageKeepsOnlyItsLayers) {
  const Model model = make_model(file("big_first.pt"), {"input_shape=1024"});
  auto tracker = std::make_shared<runtime::MemoryTracker>();
  runtime::MemoryTrackingScope scope(tracker);
  {
    const auto later = build_layers(model, 1, 3, /*seed=*/0);
    EXPECT_GE(tracker->peak_bytes(c10::DeviceType::CPU), 4 * kMiB);  // the whole file, once
    EXPECT_LT(tracker->current_bytes(c10::DeviceType::CPU), kMiB / 8);
  }
  const auto first = build_layers(model, 0, 1, /*seed=*/0);
  EXPECT_GE(tracker->current_bytes(c10::DeviceType::CPU), 4 * kMiB);
}

}  // namespace
}  // namespace pipeplan::models

namespace pipeplan::models {
namespace {

// PyTorch's parameter count of module `path` of `name` (tests/models/make_torchscript_models.py).
int64_t pytorch_count(const std::string& dir, const std::string& name, const std::string& path) {
  std::ifstream in(dir + "/param_counts.json");
  return Json::parse(in).at(name).at(path).get<int64_t>();
}

// The layers run one after another give what the file's own forward gives (eval mode: dropout
// off, batch norm on its running statistics).
void expect_same_forward(const Model& model, const std::string& path, const torch::Tensor& input) {
  torch::jit::Module module = torch::jit::load(path);
  module.eval();
  auto layers = build_layers(model, 0, static_cast<int>(model.layers.size()), /*seed=*/0);
  for (const LayerPtr& layer : layers) layer->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = module.forward({input}).toTensor();
  EXPECT_TRUE(torch::allclose(forward_layers(layers, input), expected, /*rtol=*/1e-5,
                              /*atol=*/1e-6))
      << path;
}

TEST_F(TorchScriptTest, SkipsAndFunctionalOpsGiveLayersWithPackedCuts) {
  // The cut between b and c carries c's input beside the skipped h, packed into one tensor of
  // 32 per sample. The add y + h stays with c, so that one tensor crosses to d. Scripted and
  // traced files split alike.
  for (const char* name : {"skip3.pt", "skip3_traced.pt"}) {
    const Model model = make_model(file(name), {"input_shape=8"});
    EXPECT_EQ(layer_names(model), (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}))
        << name;
    EXPECT_EQ(model.layers[1].kind, "Linear");
    ASSERT_EQ(model.layers[0].live_out.size(), 1u);
    EXPECT_EQ(model.layers[0].live_out[0].sample_shape, (std::vector<int64_t>{16}));
    ASSERT_EQ(model.layers[1].live_out.size(), 2u);
    for (const LiveTensor& tensor : model.layers[1].live_out)
      EXPECT_EQ(tensor.sample_shape, (std::vector<int64_t>{16}));
    EXPECT_EQ(model.layers[2].live_out.size(), 1u);
    EXPECT_EQ(model.layers[5].live_out[0].sample_shape, (std::vector<int64_t>{4}));
    EXPECT_EQ(parameter_count(model), pytorch_count(dir_, "skip3.pt", ""));
    EXPECT_TRUE(model.ties.empty());
    expect_same_forward(model, file(name), torch::randn({3, 8}));
    // The packed cut: what layer b hands on is [batch, 32].
    auto layers = build_layers(model, 0, 2, /*seed=*/0);
    torch::NoGradGuard no_grad;
    EXPECT_EQ(forward_layers(layers, torch::randn({3, 8})).sizes(), (c10::IntArrayRef{3, 32}));
  }
  const Model functional = make_model(file("functional.pt"));
  // softmax, cat and view stay with ln: one tensor of 64 crosses to c.
  EXPECT_EQ(layer_names(functional), (std::vector<std::string>{"a", "b", "ln", "c"}));
  EXPECT_EQ(functional.layers[1].live_out[0].sample_shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(functional.layers[2].live_out[0].sample_shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(parameter_count(functional), pytorch_count(dir_, "functional.pt", ""));
  expect_same_forward(functional, file("functional.pt"), torch::randn({5, 4, 4}));
  // Formerly refused: a top-level residual add (kept with a), and one Linear called twice.
  EXPECT_EQ(layer_names(make_model(file("residual.pt"), {"input_shape=8"})),
            (std::vector<std::string>{"a", "b"}));
  // One Linear called twice: two layers that hold its weight and bias as tied parameters.
  const Model shared = make_model(file("shared.pt"), {"input_shape=8"});
  EXPECT_EQ(layer_names(shared), (std::vector<std::string>{"0", "2"}));
  ASSERT_EQ(shared.ties.size(), 2u);
  EXPECT_EQ(shared.ties[0].users[0].layer, 0);
  EXPECT_EQ(shared.ties[0].users[1].layer, 1);
  EXPECT_EQ(shared.ties[0].users[0].name, "0.weight");
  EXPECT_EQ(shared.ties[0].users[1].name, "2.weight");
  EXPECT_EQ(parameter_count(shared), pytorch_count(dir_, "shared.pt", ""));
  expect_same_forward(shared, file("shared.pt"), torch::randn({3, 8}));
}

TEST_F(TorchScriptTest, GptWithTiedEmbeddingsSplitsIntoBlocksAndTiesItsHead) {
  const Model model = make_model(file("tied_gpt.pt"));
  // The position indices (made before wte, not batched) cross to wpe: wte..wpe is one layer.
  EXPECT_EQ(layer_names(model),
            (std::vector<std::string>{"wte..wpe", "blocks.0", "blocks.1", "blocks.2", "blocks.3",
                                      "ln_f", "head"}));
  EXPECT_EQ(model.target.loss, LossKind::kNextTokenCrossEntropy);
  ASSERT_EQ(model.ties.size(), 1u);
  ASSERT_EQ(model.ties[0].users.size(), 2u);
  EXPECT_EQ(model.ties[0].users[0].layer, 0);
  EXPECT_EQ(model.ties[0].users[0].name, "wte.weight");
  EXPECT_EQ(model.ties[0].users[1].layer, 6);
  EXPECT_EQ(model.ties[0].users[1].name, "head.weight");
  EXPECT_EQ(model.ties[0].numel, pytorch_count(dir_, "tied_gpt.pt", "wte"));
  for (int layer = 1; layer < 7; ++layer)
    EXPECT_EQ(model.layers[layer].param_count,
              pytorch_count(dir_, "tied_gpt.pt", model.layers[layer].name))
        << model.layers[layer].name;
  EXPECT_EQ(parameter_count(model), pytorch_count(dir_, "tied_gpt.pt", ""));
  expect_same_forward(model, file("tied_gpt.pt"), torch::randint(64, {2, 8}));
}

// A forward of two inputs takes them packed side by side in one batch: x (2x4) then y (3).
TEST_F(TorchScriptTest, SeveralInputsArriveAsOnePackedBatch) {
  const Model model = make_model(file("two_inputs.pt"));
  EXPECT_EQ(model.input.sample_shape, (std::vector<int64_t>{11}));
  EXPECT_EQ(model.config.at("input_shape"), "2x4,3");
  EXPECT_EQ(layer_names(model), (std::vector<std::string>{"a", "b", "c"}));
  // y, which c reads, then a's output: live sets list the inputs first, then values in graph order.
  ASSERT_EQ(model.layers[0].live_out.size(), 2u);
  EXPECT_EQ(model.layers[0].live_out[0].sample_shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(model.layers[0].live_out[1].sample_shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(parameter_count(model), pytorch_count(dir_, "two_inputs.pt", ""));
  const Model same = make_model(file("two_inputs.pt"), {"input_shape=2x4,3"});
  EXPECT_EQ(same.hash, model.hash);

  torch::jit::Module module = torch::jit::load(file("two_inputs.pt"));
  const torch::Tensor x = torch::randn({5, 2, 4}), y = torch::randn({5, 3});
  auto layers = build_layers(model, 0, 3, /*seed=*/0);
  torch::NoGradGuard no_grad;
  const torch::Tensor packed = torch::cat({x.reshape({5, -1}), y}, 1);
  EXPECT_TRUE(torch::allclose(forward_layers(layers, packed), module.forward({x, y}).toTensor(),
                              1e-5, 1e-6));
  EXPECT_NE(bad_input_message([&] { make_model(file("two_inputs.pt"), {"input_shape=2x4,3,5"}); })
                .find("forward takes 2 inputs but the input shape gives 3 (2x4,3,5 float32)"),
            std::string::npos);
  EXPECT_NE(bad_input_message([&] { make_model(file("two_inputs.pt"), {"input_shape=2x4,"}); })
                .find("one shape per input joined by ','"),
            std::string::npos);
}

// The layers run one after another (eval mode) give element `element` of the file's own
// forward, which returns a tuple.
void expect_same_tuple_element(const Model& model, const std::string& path, size_t element,
                               const torch::Tensor& input) {
  torch::jit::Module module = torch::jit::load(path);
  module.eval();
  auto layers = build_layers(model, 0, static_cast<int>(model.layers.size()), /*seed=*/0);
  for (const LayerPtr& layer : layers) layer->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor expected =
      module.forward({input}).toTupleRef().elements()[element].toTensor();
  EXPECT_TRUE(torch::allclose(forward_layers(layers, input), expected, /*rtol=*/1e-5,
                              /*atol=*/1e-6))
      << path;
}

// A forward that returns a named tuple or a tuple trains on the element `output` names, by
// field or index (issue "The models users bring"); what only the other elements need (the
// auxiliary head) is dropped, and the choice is part of the configuration.
TEST_F(TorchScriptTest, ATupleOutputTrainsOnTheElementOutputNames) {
  const std::string named = file("named_tuple.pt");
  for (const std::string pick : {"logits", "0"}) {
    const Model model = make_model(named, {"output=" + pick});
    EXPECT_EQ(layer_names(model), (std::vector<std::string>{"a", "b", "head"})) << pick;
    EXPECT_EQ(parameter_count(model), pytorch_count(dir_, "named_tuple.pt", "") -
                                          pytorch_count(dir_, "named_tuple.pt", "aux"));
    EXPECT_EQ(model.target.num_classes, 4);
    EXPECT_EQ(model_ref(model).config.at("output"), pick);
    const Model again = make_model_from_config(named, model_ref(model).config);
    EXPECT_EQ(again.hash, model.hash);
    EXPECT_EQ(layer_names(again), layer_names(model));
    expect_same_tuple_element(model, named, 0, torch::randn({3, 8}));
  }
  const Model plain = make_model(file("tuple.pt"), {"input_shape=8", "output=0"});
  EXPECT_EQ(layer_names(plain), (std::vector<std::string>{"a", "head"}));
  expect_same_tuple_element(plain, file("tuple.pt"), 0, torch::randn({2, 8}));
  // A tuple the forward does not build (a child's result) is indexed instead.
  for (size_t element : {0, 1}) {
    const Model from_child =
        make_model(file("tuple_from_child.pt"), {"output=" + std::to_string(element)});
    EXPECT_EQ(layer_names(from_child), (std::vector<std::string>{"body"}));
    expect_same_tuple_element(from_child, file("tuple_from_child.pt"), element,
                              torch::randn({2, 8}));
  }
  // A one-tensor model's configuration has no output key, as before it existed.
  EXPECT_FALSE(model_ref(mlp()).config.contains("output"));

  const std::vector<std::tuple<std::string, std::string, std::string>> refused = {
      {named, "", "; give --model-arg output=INDEX or output=FIELD to train on the element"},
      {named, "aux", "output=aux is Optional[Tensor] in "},
      {named, "3", "output=3 is not an element of "},
      {named, "3", "; give an index 0 to 2 or a field: logits, hidden, aux"},
      {file("tuple.pt"), "logits", "; give an index 0 to 1"},
      {file("tuple.pt"), "", "; give --model-arg output=INDEX to train on the element"},
      {file("mlp.pt"), "0", "output=0 picks an element of a tuple, but forward returns Tensor"},
  };
  for (const auto& [path, pick, expected] : refused) {
    std::vector<std::string> args = {path == file("mlp.pt") ? "input_shape=1x28x28"
                                                            : "input_shape=8"};
    if (!pick.empty()) args.push_back("output=" + pick);
    const std::string message = bad_input_message([&] { make_model(path, args); });
    EXPECT_NE(message.find(expected), std::string::npos) << path << " " << pick << ": " << message;
  }
}

// Tensor parallelism splits the Linear–activation–Linear MLPs it can prove and nothing else:
// mlp_patterns' block a (SiLU and dropout at 0 between, no second bias) splits by its 48 hidden
// features, block d (F.linear on bare parameters, nn.Dropout(0.0), an Optional bias that is None)
// by its 24; block b (its hidden values also feed a sum), block c (dropout at 0.1 between) and
// the head stay whole. tied_gpt's blocks split their MLPs (attention is not a pattern it
// proves), as do ViT's encoder blocks.
TEST_F(TorchScriptTest, TensorParallelismSplitsOnlyTheMlpsItProves) {
  const Model model = make_model(file("mlp_patterns.pt"));
  ASSERT_EQ(layer_names(model), (std::vector<std::string>{"a", "b", "c", "d", "head"}));
  using Divides = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(model.layers[0].tp_divides, (Divides{{"mlp_dim", 48}}));
  EXPECT_EQ(model.layers[3].tp_divides, (Divides{{"mlp_dim", 24}}));
  for (int layer_idx : {0, 3}) {
    EXPECT_EQ(model.layers[layer_idx].tp_all_reduces, 1) << layer_idx;
    ASSERT_TRUE(model.layers[layer_idx].build_shard) << layer_idx;
  }
  for (int layer_idx : {1, 2, 4}) {
    EXPECT_TRUE(model.layers[layer_idx].tp_divides.empty()) << layer_idx;
    EXPECT_FALSE(model.layers[layer_idx].build_shard) << layer_idx;
  }
  EXPECT_NE(bad_input_message([&] { check_tensor_parallel(model, 5, "--tp"); })
                .find("--tp: 5: does not divide mlp_dim = 48 of layer 'a'"),
            std::string::npos);
  // Each rank's shard keeps the layer's parameter names and holds its slices (the first
  // weight's and bias's rows, the second weight's columns); with a group that sums nothing it
  // gives its part, and the parts together, less the input each adds back, are the whole
  // layer's output.
  const std::map<std::string, int64_t> sliced_dim = {
      {"a.fc1.weight", 0}, {"a.fc1.bias", 0}, {"a.fc2.weight", 1}, {"d.w1", 0}, {"d.w2", 1}};
  for (int layer_idx : {0, 3}) {
    const LayerPtr whole = build_layers(model, layer_idx, layer_idx + 1, /*seed=*/0).front();
    const torch::Tensor input = torch::randn({3, 4, 16});
    const torch::Tensor expected_output = whole->forward(input);
    // d's output is flattened (the head's flatten goes with it).
    torch::Tensor parts = -input.reshape(expected_output.sizes());
    for (int tp_rank : {0, 1}) {
      const auto group = c10::make_intrusive<TensorParallelGroup>(tp_rank, 2);
      group->set_all_reduce([](torch::Tensor&) {});
      const LayerPtr shard = model.layers[layer_idx].build_shard(group);
      const auto shard_parameters = shard->named_parameters();
      for (const auto& item : whole->named_parameters()) {
        ASSERT_NE(shard_parameters.find(item.key()), nullptr) << item.key();
        const auto dim = sliced_dim.find(item.key());
        torch::Tensor expected = item.value();
        if (dim != sliced_dim.end()) {
          const int64_t size = expected.size(dim->second) / 2;
          expected = expected.narrow(dim->second, tp_rank * size, size);
        }
        EXPECT_TRUE(torch::equal(shard_parameters[item.key()], expected))
            << item.key() << " on tp rank " << tp_rank;
      }
      parts = parts + shard->forward(input);
    }
    EXPECT_TRUE(torch::allclose(parts, expected_output, 1e-5, 1e-6)) << layer_idx;
  }
  for (const LayerSpec& layer : make_model(file("tied_gpt.pt")).layers) {
    EXPECT_EQ(!layer.tp_divides.empty(), layer.kind == "GptBlock") << layer.name;
    if (layer.kind == "GptBlock") {
      EXPECT_EQ(layer.tp_all_reduces, 1) << layer.name;
    }
  }
  if (!fs::exists(file("vit.pt"))) return;
  const Model vit = make_model(file("vit.pt"));
  for (int block = 1; block <= 4; ++block)
    EXPECT_EQ(vit.layers[block].tp_divides, (Divides{{"mlp_dim", 64}})) << block;
}

// torchvision's googlenet returns GoogLeNetOutputs when scripted, even without auxiliary heads:
// with output=logits it opens into its inception blocks and counts PyTorch's parameters.
TEST_F(TorchScriptTest, TorchvisionGooglenetTrainsOnItsLogits) {
  if (!fs::exists(file("googlenet.pt"))) GTEST_SKIP() << "torchvision is not installed";
  const Model model = make_model(file("googlenet.pt"), {"output=logits"});
  std::vector<std::string> expected = {"conv1", "conv2", "conv3"};
  for (const char* block : {"3a", "3b", "4a", "4b", "4c", "4d", "4e", "5a", "5b"})
    expected.push_back(std::string("inception") + block);
  expected.push_back("fc");
  EXPECT_EQ(layer_names(model), expected);
  EXPECT_EQ(parameter_count(model), pytorch_count(dir_, "googlenet.pt", ""));
  expect_same_tuple_element(model, file("googlenet.pt"), 0, torch::randn({2, 3, 64, 64}));
}

// torchvision's ViT: the Encoder adds its own positional embedding and applies dropout before
// its blocks, so it is not a pure chain; it is opened all the same (issue "The models users
// bring"), its blocks become layers, and the embedding goes with a neighbouring layer.
TEST_F(TorchScriptTest, TorchvisionVitOpensItsEncoderIntoItsBlocks) {
  if (!fs::exists(file("vit.pt"))) GTEST_SKIP() << "torchvision is not installed";
  const Model model = make_model(file("vit.pt"));
  std::vector<std::string> expected = {"conv_proj"};
  for (int block = 0; block < 4; ++block)
    expected.push_back("encoder.layers.encoder_layer_" + std::to_string(block));
  expected.insert(expected.end(), {"encoder.ln", "heads.head"});
  EXPECT_EQ(layer_names(model), expected);
  EXPECT_EQ(model.layers[1].kind, "EncoderBlock");
  EXPECT_EQ(parameter_count(model), pytorch_count(dir_, "vit.pt", ""));
  for (int block = 1; block < 4; ++block)
    EXPECT_EQ(model.layers[1 + block].param_count,
              pytorch_count(dir_, "vit.pt", "encoder.layers.encoder_layer_" + std::to_string(block)));
  // The cut after conv_proj carries the 4 patches of 32 (fewer bytes than the 5 tokens after the
  // class token joins them), so the class token (32) and the positional embedding (5 x 32) go
  // with the first block.
  EXPECT_EQ(model.layers[0].param_count, pytorch_count(dir_, "vit.pt", "conv_proj"));
  EXPECT_EQ(model.layers[0].live_out[0].sample_shape, (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(model.layers[1].param_count,
            pytorch_count(dir_, "vit.pt", "encoder.layers.encoder_layer_0") + 32 + 5 * 32);
  expect_same_forward(model, file("vit.pt"), torch::randn({2, 3, 32, 32}));
}

TEST_F(TorchScriptTest, TorchvisionResnet18SplitsIntoItsBlocks) {
  if (!fs::exists(file("resnet18.pt"))) GTEST_SKIP() << "torchvision is not installed";
  const Model model = make_model(file("resnet18.pt"));
  std::vector<std::string> expected = {"conv1", "bn1"};
  for (int stage = 1; stage <= 4; ++stage)
    for (int block = 0; block < 2; ++block)
      expected.push_back("layer" + std::to_string(stage) + "." + std::to_string(block));
  expected.push_back("fc");
  EXPECT_EQ(layer_names(model), expected);
  for (const LayerSpec& layer : model.layers)
    EXPECT_EQ(layer.param_count, pytorch_count(dir_, "resnet18.pt", layer.name)) << layer.name;
  EXPECT_EQ(parameter_count(model), pytorch_count(dir_, "resnet18.pt", ""));
  EXPECT_EQ(model.layers[2].kind, "BasicBlock");
  // Pooling and flatten stay with the last block: the cut before fc carries the features.
  EXPECT_EQ(model.layers[9].live_out[0].sample_shape, (std::vector<int64_t>{512}));
  // ReLU and max pooling stay with bn1: the pooled tensor crosses, not the stem's output.
  EXPECT_EQ(model.layers[1].live_out[0].sample_shape, (std::vector<int64_t>{64, 8, 8}));
  expect_same_forward(model, file("resnet18.pt"), torch::randn({2, 3, 32, 32}));
}

}  // namespace
}  // namespace pipeplan::models
