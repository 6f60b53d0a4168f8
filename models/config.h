// Model configuration: defaults per family, KEY=VALUE overrides typed by the default's type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/limits.h"

namespace pipeplan::models {

/// Applies "KEY=VALUE" strings to `defaults` (a JSON object of scalars). A value is parsed as
/// the type of the default it replaces: integer, number, boolean (true/false/1/0) or string.
/// Throws Error(kBadInput) naming the model, key and value for an arg without '=', an unknown
/// key (listing the known ones) or a value of the wrong type.
Json apply_model_args(const std::string& model, Json defaults, const std::vector<std::string>& args);

/// Checks a complete configuration read from a file against the family's defaults: same keys,
/// same types. Returns it unchanged; throws naming the model and the offending key.
Json check_config_keys(const std::string& model, const Json& defaults, const Json& config);

/// Reads an integer field that apply_model_args or check_config_keys already typed.
int64_t config_int(const Json& config, const char* key);
/// Reads a boolean field.
bool config_bool(const Json& config, const char* key);
/// Reads a string field.
std::string config_string(const Json& config, const char* key);

/// Checks an integer field is >= `min_value`: "model 'gpt': hidden=0 is out of range; expected
/// an integer >= 1".
void check_config_min(const std::string& model, const Json& config, const char* key,
                      int64_t min_value);

/// The most blocks a zoo model's `layers` field may ask for: kMaxLayers less the two layers
/// around them (input or embedding, head), so that its profile can be read.
inline constexpr int64_t kMaxModelBlocks = kMaxLayers - 2;

/// Checks that the `layers` field (blocks) is in [1, kMaxModelBlocks]: a larger one built
/// billions of layer descriptions before failing to allocate them.
void check_config_blocks(const std::string& model, const Json& config);

}  // namespace pipeplan::models
