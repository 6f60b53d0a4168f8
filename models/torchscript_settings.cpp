// TorchScript model settings: --model-arg over pipeplan_* attributes over defaults, and checks.
#include "models/torchscript_settings.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/accumulate.h>

#include <cstdlib>
#include <optional>

#include "common/error.h"
#include "common/units.h"
#include "models/config.h"

namespace pipeplan::models {
namespace {

constexpr const char* kFloat32 = "float32";
constexpr const char* kInt64 = "int64";
constexpr const char* kCrossEntropy = "cross_entropy";
constexpr const char* kNextToken = "next_token_cross_entropy";
// Module attributes that carry settings are named this prefix plus the --model-arg key.
constexpr const char* kAttributePrefix = "pipeplan_";
// Seed of the batch the forward check runs.
constexpr uint64_t kCheckInputSeed = 0;
// The most elements one sample of one input may have: 2^26 (256 MiB of float32; a 4096x4096
// RGB image has 2^25.6). The probes run batches of a few samples; a shape of 2^40 elements
// ended in an allocation failure.
constexpr int64_t kMaxSampleElements = int64_t{1} << 26;
// Digits a dimension may have: more is beyond kMaxSampleElements anyway (and stoll's range).
constexpr size_t kMaxDimensionDigits = 9;

// The --model-arg keys; empty or 0 means "not given".
Json arg_defaults() {
  return Json{{"input_shape", ""}, {"input_dtype", ""}, {"loss", ""},
              {"num_classes", 0},  {"token_range", 0},  {"output", ""}};
}

Json config_defaults() {
  Json defaults = arg_defaults();
  defaults["file_hash"] = "";
  return defaults;
}

// "2x4,3" for the shapes of two inputs.
std::string shapes_text(const std::vector<std::vector<int64_t>>& shapes) {
  std::string text;
  for (const std::vector<int64_t>& shape : shapes)
    text += (text.empty() ? "" : ",") + format_dims(shape);
  return text;
}

// "3x32x32" -> {{3, 32, 32}}, "2x4,3" -> {{2, 4}, {3}}: inputs joined by ',', each of positive
// decimal dimensions joined by 'x', each input of at most kMaxSampleElements.
std::vector<std::vector<int64_t>> parse_shapes(const std::string& path, const std::string& text) {
  std::vector<std::vector<int64_t>> shapes(1);
  int64_t elements = 1;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find_first_of("x,", start), text.size());
    const std::string dim = text.substr(start, end - start);
    const bool digits = !dim.empty() && dim.size() <= kMaxDimensionDigits &&
                        dim.find_first_not_of("0123456789") == std::string::npos;
    const int64_t value = digits ? std::stoll(dim) : 0;
    PIPEPLAN_CHECK(value >= 1, "model ", quote(path), ": input_shape=", quote(text),
                   " is not positive dimensions joined by 'x' (such as 3x32x32), one shape per "
                   "input joined by ',' (such as 2x4,3)");
    elements *= value;  // below 2^63: each factor of at most kMaxSampleElements is checked
    PIPEPLAN_CHECK(elements <= kMaxSampleElements, "model ", quote(path), ": input_shape=",
                   quote(text), " has more than ", kMaxSampleElements,
                   " elements in one sample of an input; expected a smaller shape");
    shapes.back().push_back(value);
    if (end < text.size() && text[end] == ',') {
      shapes.emplace_back();
      elements = 1;
    }
    start = end + 1;
  }
  return shapes;
}

std::optional<c10::IValue> attribute(const torch::jit::Module& module, const std::string& key) {
  const std::string name = kAttributePrefix + key;
  if (!module.hasattr(name)) return std::nullopt;
  return module.attr(name);
}

std::string attribute_error(const std::string& path, const std::string& key,
                            const c10::IValue& value, const char* expected) {
  return detail::concat("model ", quote(path), ": attribute ", kAttributePrefix, key, " is ",
                        value.type()->str(), ", expected ", expected);
}

// pipeplan_input_shape: List[int] for one input, List[List[int]] for several.
std::vector<std::vector<int64_t>> attribute_shapes(const std::string& path,
                                                   const c10::IValue& value) {
  if (value.isIntList()) return parse_shapes(path, format_dims(value.toIntVector()));
  const bool list_of_lists =
      value.isList() && value.type()->containedType(0)->kind() == c10::TypeKind::ListType;
  PIPEPLAN_CHECK(list_of_lists,
                 attribute_error(path, "input_shape", value, "List[int] or List[List[int]]"));
  std::vector<std::vector<int64_t>> shapes;
  for (const c10::IValue& shape : value.toListRef())
    shapes.push_back(shape.toIntVector());
  return parse_shapes(path, shapes_text(shapes));
}

std::string string_setting(const std::string& path, const Json& given,
                           const torch::jit::Module& module, const std::string& key,
                           const std::string& fallback) {
  const std::string text = config_string(given, key.c_str());
  if (!text.empty()) return text;
  const std::optional<c10::IValue> value = attribute(module, key);
  if (!value) return fallback;
  PIPEPLAN_CHECK(value->isString(), attribute_error(path, key, *value, "str"));
  return value->toStringRef();
}

int64_t int_setting(const std::string& path, const Json& given, const torch::jit::Module& module,
                    const std::string& key) {
  const int64_t number = config_int(given, key.c_str());
  if (number != 0) return number;
  const std::optional<c10::IValue> value = attribute(module, key);
  if (!value) return 0;
  PIPEPLAN_CHECK(value->isInt(), attribute_error(path, key, *value, "int"));
  return value->toInt();
}

// Checks what is known; num_classes and token_range may still be 0 (unknown).
void check_settings(const std::string& path, const TorchScriptSettings& settings) {
  const std::string where = detail::concat("model ", quote(path), ": ");
  PIPEPLAN_CHECK(settings.input_dtype == kFloat32 || settings.input_dtype == kInt64, where,
                 "input_dtype=", quote(settings.input_dtype), " is not 'float32' or 'int64'");
  PIPEPLAN_CHECK(settings.loss == kCrossEntropy || settings.loss == kNextToken, where,
                 "loss=", quote(settings.loss),
                 " is not 'cross_entropy' or 'next_token_cross_entropy'");
  const bool tokens = settings.input_dtype == kInt64;
  PIPEPLAN_CHECK(
      tokens == (settings.loss == kNextToken), where, "loss=", settings.loss,
      " does not go with input_dtype=", settings.input_dtype,
      "; use float32 inputs with cross_entropy, int64 tokens with next_token_cross_entropy");
  for (const std::vector<int64_t>& shape : settings.input_shapes)
    PIPEPLAN_CHECK(!tokens || shape.size() == 1, where, "input_shape=",
                   shapes_text(settings.input_shapes),
                   " has several dimensions; int64 tokens take one (the sequence length)");
  PIPEPLAN_CHECK(settings.num_classes >= 0, where, "num_classes=", settings.num_classes,
                 " is out of range; expected an integer >= 1");
  PIPEPLAN_CHECK(settings.token_range >= 0, where, "token_range=", settings.token_range,
                 " is out of range; expected an integer >= 1");
  PIPEPLAN_CHECK(tokens || settings.token_range == 0, where, "token_range=", settings.token_range,
                 " applies to int64 inputs only (input_dtype=float32)");
}

// Checks settings that a configuration must hold complete.
void check_complete(const std::string& path, const TorchScriptSettings& settings) {
  check_settings(path, settings);
  PIPEPLAN_CHECK(settings.num_classes >= 1, "model ", quote(path),
                 ": num_classes=", settings.num_classes,
                 " is out of range; expected an integer >= 1");
  const bool tokens = settings.input_dtype == kInt64;
  PIPEPLAN_CHECK(
      !tokens || (settings.token_range >= 1 && settings.token_range <= settings.num_classes),
      "model ", quote(path), ": token_range=", settings.token_range,
      " is out of range; expected 1 to num_classes=", settings.num_classes,
      " (next tokens are classes)");
}

}  // namespace

TorchScriptSettings settings_from_args(const std::string& path, const torch::jit::Module& module,
                                       const std::vector<std::string>& model_args) {
  const Json given = apply_model_args(path, arg_defaults(), model_args);
  TorchScriptSettings settings;
  const std::string shape = config_string(given, "input_shape");
  if (!shape.empty()) {
    settings.input_shapes = parse_shapes(path, shape);
  } else if (const std::optional<c10::IValue> value = attribute(module, "input_shape")) {
    settings.input_shapes = attribute_shapes(path, *value);
  }
  PIPEPLAN_CHECK(!settings.input_shapes.empty(), "model ", quote(path),
                 ": input shape unknown; give --model-arg input_shape=3x32x32 (one sample, "
                 "without the batch) or save the module with a pipeplan_input_shape attribute");
  settings.input_dtype = string_setting(path, given, module, "input_dtype", kFloat32);
  settings.loss = string_setting(path, given, module, "loss",
                                 settings.input_dtype == kInt64 ? kNextToken : kCrossEntropy);
  settings.num_classes = int_setting(path, given, module, "num_classes");
  settings.token_range = int_setting(path, given, module, "token_range");
  settings.output = string_setting(path, given, module, "output", "");
  check_settings(path, settings);
  return settings;
}

TorchScriptSettings settings_from_config(const std::string& path, const Json& given) {
  Json config = given;
  if (!config.contains("output")) config["output"] = "";  // optional: written only when given
  check_config_keys(path, config_defaults(), config);
  TorchScriptSettings settings;
  settings.input_shapes = parse_shapes(path, config_string(config, "input_shape"));
  settings.input_dtype = config_string(config, "input_dtype");
  settings.loss = config_string(config, "loss");
  settings.num_classes = config_int(config, "num_classes");
  settings.token_range = config_int(config, "token_range");
  settings.output = config_string(config, "output");
  check_complete(path, settings);
  return settings;
}

Json settings_config(const TorchScriptSettings& settings, const std::string& file_hash) {
  Json config{{"file_hash", file_hash},
              {"input_shape", shapes_text(settings.input_shapes)},
              {"input_dtype", settings.input_dtype},
              {"loss", settings.loss},
              {"num_classes", settings.num_classes},
              {"token_range", settings.token_range}};
  if (!settings.output.empty()) config["output"] = settings.output;
  return config;
}

std::string config_file_hash(const Json& config) { return config_string(config, "file_hash"); }

void settle_from_output(const std::string& path, const torch::Tensor& output,
                        TorchScriptSettings* settings) {
  const std::string where = detail::concat("model ", quote(path), ": the last layer's output ",
                                           output.sizes(), " ", output.scalar_type());
  PIPEPLAN_CHECK(output.is_floating_point(), where, " is not floating-point logits");
  int64_t classes = 0;
  if (settings->loss == kCrossEntropy) {
    PIPEPLAN_CHECK(output.dim() == 2, where, " for ", output.size(0),
                   " samples is not [batch, classes] logits as loss=cross_entropy needs");
    classes = output.size(1);
  } else {
    const int64_t tokens = settings->input_shapes.at(0).at(0);
    PIPEPLAN_CHECK(output.dim() == 3 && output.size(1) == tokens, where, " is not [batch, ", tokens,
                   " tokens, vocabulary] logits as loss=next_token_cross_entropy needs");
    classes = output.size(2);
  }
  PIPEPLAN_CHECK(settings->num_classes == 0 || settings->num_classes == classes, where, " has ",
                 classes, " classes, not num_classes=", settings->num_classes,
                 "; give num_classes=", classes, " or none");
  settings->num_classes = classes;
  if (settings->input_dtype == kInt64 && settings->token_range == 0)
    settings->token_range = classes;
  check_complete(path, *settings);
}

std::vector<LiveTensor> settings_inputs(const TorchScriptSettings& settings) {
  std::vector<LiveTensor> inputs;
  for (const std::vector<int64_t>& shape : settings.input_shapes)
    inputs.push_back(
        LiveTensor{shape, settings.input_dtype == kInt64 ? torch::kInt64 : torch::kFloat32});
  return inputs;
}

// One sample of the model's input: the input's shape, or Σ elements of several packed.
std::vector<int64_t> sample_shape(const TorchScriptSettings& settings) {
  if (settings.input_shapes.size() == 1) return settings.input_shapes[0];
  int64_t elements = 0;
  for (const std::vector<int64_t>& shape : settings.input_shapes)
    elements += c10::multiply_integers(shape);
  return {elements};
}

torch::Tensor settings_input(const TorchScriptSettings& settings, int64_t batch_size) {
  std::vector<int64_t> shape{batch_size};
  const std::vector<int64_t> sample = sample_shape(settings);
  shape.insert(shape.end(), sample.begin(), sample.end());
  auto generator = at::make_generator<at::CPUGeneratorImpl>(kCheckInputSeed);
  if (settings.input_dtype != kInt64) return torch::randn(shape, generator, torch::kFloat32);
  if (settings.token_range == 0) return torch::zeros(shape, torch::kInt64);
  torch::Tensor tokens = torch::randint(settings.token_range, shape, generator, torch::kInt64);
  tokens.view({-1})[0] =
      settings.token_range - 1;  // the largest token, so a short vocabulary shows
  return tokens;
}

std::string describe_input(const TorchScriptSettings& settings) {
  std::string text = shapes_text(settings.input_shapes) + " " + settings.input_dtype;
  if (settings.token_range > 0) text += " in [0, " + std::to_string(settings.token_range) + ")";
  return text;
}

void apply_settings(const TorchScriptSettings& settings, Model* model) {
  const bool tokens = settings.input_dtype == kInt64;
  model->input.sample_shape = sample_shape(settings);
  model->input.dtype = tokens ? torch::kInt64 : torch::kFloat32;
  model->input.token_range = settings.token_range;
  model->target.num_classes = settings.num_classes;
  model->target.loss = tokens ? LossKind::kNextTokenCrossEntropy : LossKind::kCrossEntropy;
  model->target.sample_shape = tokens ? settings.input_shapes[0] : std::vector<int64_t>{};
}

}  // namespace pipeplan::models
