// ModelRef: how profiles, plans and runs name the model they are about.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"

namespace pipeplan {

/// Identifies one model configuration; written into profile.json, plan.json and run.json so
/// that a file made for one model is never applied to another.
struct ModelRef {
  std::string name;                       ///< zoo name ("resnet50") or TorchScript file path
  Json config = Json::object();           ///< every configuration field, after overrides
  std::string hash;                       ///< content_hash of name and config (and file bytes)
  int num_layers = 0;                     ///< length of the layer sequence
  std::vector<int64_t> input_shape;       ///< one sample, without the batch dimension
  std::string input_dtype = "float32";    ///< "float32" (images, features) or "int64" (tokens)

  /// Throws Error(kBadInput) naming `document` on an empty name or hash, num_layers outside
  /// [1, kMaxLayers], a negative number anywhere in config, or an input shape that is empty,
  /// has a dimension < 1 or more than kMaxBytes elements.
  void validate(std::string_view document) const;
};

Json to_json(const ModelRef& model);
/// Reads and validates; errors name the reader's document and path.
ModelRef model_ref_from_json(const JsonReader& reader);

}  // namespace pipeplan
