// Model configuration: typed overrides and checks.
#include "models/config.h"

#include <cctype>
#include <cstdlib>

#include "common/error.h"

namespace pipeplan::models {
namespace {

std::string known_keys(const Json& defaults) {
  std::string keys;
  for (auto it = defaults.begin(); it != defaults.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  return keys;
}

// Parses `text` as the JSON type of `like`; false when it does not parse.
bool parse_typed(const std::string& text, const Json& like, Json* out) {
  if (text.empty()) return like.is_string() && (*out = text, true);
  char* end = nullptr;
  if (like.is_boolean()) {
    if (text == "true" || text == "1") return *out = true, true;
    if (text == "false" || text == "0") return *out = false, true;
    return false;
  }
  if (like.is_number_integer()) {
    const long long value = std::strtoll(text.c_str(), &end, 10);
    return *end == '\0' && (*out = static_cast<int64_t>(value), true);
  }
  if (like.is_number()) {
    const double value = std::strtod(text.c_str(), &end);
    return *end == '\0' && (*out = value, true);
  }
  return like.is_string() && (*out = text, true);
}

std::string type_word(const Json& like) {
  if (like.is_boolean()) return "true or false";
  if (like.is_number_integer()) return "an integer";
  if (like.is_number()) return "a number";
  return "a string";
}

}  // namespace

Json apply_model_args(const std::string& model, Json defaults, const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    PIPEPLAN_CHECK(eq != std::string::npos && eq > 0, "--model-arg ", quote(arg),
                   ": expected KEY=VALUE");
    const std::string key = arg.substr(0, eq);
    const std::string value = arg.substr(eq + 1);
    PIPEPLAN_CHECK(defaults.contains(key), "--model-arg ", quote(arg), ": model ", quote(model),
                   " has no field ", quote(key), " (fields: ", known_keys(defaults), ")");
    Json parsed;
    PIPEPLAN_CHECK(parse_typed(value, defaults[key], &parsed), "--model-arg ", quote(arg), ": ",
                   quote(value), " is not ", type_word(defaults[key]), " (field ", quote(key),
                   " of model ", quote(model), ")");
    defaults[key] = parsed;
  }
  return defaults;
}

Json check_config_keys(const std::string& model, const Json& defaults, const Json& config) {
  PIPEPLAN_CHECK(config.is_object(), "model ", quote(model), ": configuration is not an object");
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    PIPEPLAN_CHECK(config.contains(it.key()), "model ", quote(model), ": configuration lacks ",
                   quote(it.key()));
    const Json& value = config[it.key()];
    const bool same_type = it->is_number_integer() ? value.is_number_integer()
                           : it->is_number()       ? value.is_number()
                                                   : value.type() == it->type();
    PIPEPLAN_CHECK(same_type, "model ", quote(model), ": configuration field ", quote(it.key()),
                   " is ", shorten(value.dump()), ", expected ", type_word(*it));
  }
  for (auto it = config.begin(); it != config.end(); ++it)
    PIPEPLAN_CHECK(defaults.contains(it.key()), "model ", quote(model),
                   ": unknown configuration field ", quote(it.key()));
  return config;
}

int64_t config_int(const Json& config, const char* key) { return config.at(key).get<int64_t>(); }
bool config_bool(const Json& config, const char* key) { return config.at(key).get<bool>(); }
std::string config_string(const Json& config, const char* key) {
  return config.at(key).get<std::string>();
}

void check_config_min(const std::string& model, const Json& config, const char* key,
                      int64_t min_value) {
  const int64_t value = config_int(config, key);
  PIPEPLAN_CHECK(value >= min_value, "model ", quote(model), ": ", key, "=", value,
                 " is out of range; expected an integer >= ", min_value);
}

void check_config_blocks(const std::string& model, const Json& config) {
  const int64_t value = config_int(config, "layers");
  PIPEPLAN_CHECK(value >= 1 && value <= kMaxModelBlocks, "model ", quote(model), ": layers=", value,
                 " is out of range; expected an integer in [1, ", kMaxModelBlocks, "]");
}

}  // namespace pipeplan::models
