// Input and loss settings of a TorchScript model: from --model-arg, module attributes, or a config.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "models/model.h"

namespace pipeplan::models {

/// How a TorchScript model's input is made and its loss computed (keys: see torchscript.h).
struct TorchScriptSettings {
  /// One sample of each of the forward's inputs, without the batch dimension.
  std::vector<std::vector<int64_t>> input_shapes;
  std::string input_dtype;  ///< of every input: "float32" or "int64"
  std::string loss;                  ///< "cross_entropy" or "next_token_cross_entropy"
  int64_t num_classes = 0;           ///< classes or vocabulary; 0 until the forward check sets it
  int64_t token_range = 0;           ///< int64 inputs: values in [0, token_range); 0 until known
  /// The element of a tuple output that holds the logits: an index ("0") or a named tuple's
  /// field ("logits"); "" for a forward that returns one tensor. Written to a configuration
  /// only when given, so that configurations from before it read (and hash) as they did.
  std::string output;
};

/// Settings from `model_args` ("KEY=VALUE"), else the module's pipeplan_KEY attributes, else the
/// defaults; num_classes and token_range stay 0 when neither gives them. Throws Error(kBadInput)
/// naming `path` and the key for an unknown key, a bad value, or no input shape at all.
TorchScriptSettings settings_from_args(const std::string& path, const torch::jit::Module& module,
                                       const std::vector<std::string>& model_args);

/// Settings stored in a configuration; checks keys, types and values like a new model's.
TorchScriptSettings settings_from_config(const std::string& path, const Json& config);

/// The configuration recorded in profiles and plans: the settings and the file's content hash.
Json settings_config(const TorchScriptSettings& settings, const std::string& file_hash);

/// The content hash a configuration records.
std::string config_file_hash(const Json& config);

/// Checks the last layer's `output` (for a batch of the input) fits the loss, and sets
/// num_classes from it (and token_range of int64 inputs to num_classes when not given).
/// Throws Error(kBadInput) naming `path` when the output's shape or dtype does not fit or
/// contradicts a given num_classes.
void settle_from_output(const std::string& path, const torch::Tensor& output,
                        TorchScriptSettings* settings);

/// A seeded batch of `batch_size` inputs as the settings describe: random floats, or random
/// tokens including the largest, token_range - 1 (all 0 while the range is not known). Several
/// inputs come packed into one [batch, Σ] tensor (unpack_live with settings_inputs).
torch::Tensor settings_input(const TorchScriptSettings& settings, int64_t batch_size);

/// The forward's inputs, per sample.
std::vector<LiveTensor> settings_inputs(const TorchScriptSettings& settings);

/// "1x28x28 float32", "2x4,3 float32" or "12 int64 in [0, 50)", for messages.
std::string describe_input(const TorchScriptSettings& settings);

/// Sets model.input and model.target from complete settings.
void apply_settings(const TorchScriptSettings& settings, Model* model);

}  // namespace pipeplan::models
