// Test helper: writes mlp_tiny's weights, then runs the Python script that saves the test models.
#include "tests/models/torchscript_files.h"

#include <unistd.h>

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/hash.h"
#include "models/model.h"

namespace pipeplan::testing {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path, std::ios::binary).rdbuf();
  return text.str();
}

// {"LAYER.NAME": tensor} of every parameter of mlp_tiny, as nn.Sequential's state_dict names them.
std::string mlp_weights(uint64_t seed) {
  const models::Model model = models::make_model("mlp_tiny");
  const auto layers = models::build_layers(model, 0, static_cast<int>(model.layers.size()), seed);
  c10::Dict<std::string, torch::Tensor> weights;
  for (size_t layer_idx = 0; layer_idx < layers.size(); ++layer_idx)
    for (const auto& item : layers[layer_idx]->named_parameters())
      weights.insert(std::to_string(layer_idx) + "." + item.key(), item.value().detach().clone());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(weights));
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

std::string torch_python() { return PIPEPLAN_TORCH_PYTHON; }

std::string test_models_dir(uint64_t mlp_seed, std::string* error) {
  if (torch_python().empty()) {
    *error = kNoTorchPython;
    return "";
  }
  const std::string script =
      std::string(PIPEPLAN_SOURCE_DIR) + "/tests/models/make_torchscript_models.py";
  const std::string weights = mlp_weights(mlp_seed);
  const fs::path base = fs::path(PIPEPLAN_BINARY_DIR) / "test_runs" / "torchscript_models";
  std::string key = content_hash(read_bytes(script) + weights);
  const fs::path dir = base / key.substr(key.find(':') + 1);
  if (fs::exists(dir / "done")) return dir.string();
  // Written aside and renamed, so that test processes running at once never see half a folder.
  const fs::path scratch = base / ("tmp-" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  std::ofstream(scratch / "mlp_weights.pt", std::ios::binary) << weights;
  const std::string log = (scratch / "python.log").string();
  const std::string command = torch_python() + " " + script + " " + scratch.string() +
                              " --mlp-weights " + (scratch / "mlp_weights.pt").string() + " > " +
                              log + " 2>&1";
  if (std::system(command.c_str()) != 0) {
    *error = "`" + command + "` failed:\n" + read_bytes(log);
    return "";
  }
  std::ofstream(scratch / "done") << "";
  std::error_code ec;
  fs::rename(scratch, dir, ec);
  if (ec) fs::remove_all(scratch);  // another process finished first
  return dir.string();
}

}  // namespace pipeplan::testing
