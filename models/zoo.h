// The model zoo's registry: each family contributes named entries with default configurations.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/model.h"

namespace pipeplan::models {

/// One named model: its default configuration and the builder of its layer sequence.
struct ZooEntry {
  std::string name;
  std::string description;  ///< one line for `pipeplan models`
  Json defaults;            ///< every configuration field with its default value
  /// Builds the Model from a configuration whose keys and types already match `defaults`;
  /// checks the values (ranges, consistency) and throws Error(kBadInput) on a bad one.
  std::function<Model(const std::string& name, const Json& config)> build;
};

/// Every zoo entry, in listing order.
const std::vector<ZooEntry>& zoo();

/// Entries of each family (one source file each): the full-size models, then the family's
/// small preset that trains in seconds on one CPU core.
/// ResNet-18/34/50/101/152 (torchvision) and resnet_tiny.
std::vector<ZooEntry> resnet_entries();
/// ViT-B/16, L/16, H/14 (torchvision) and vit_tiny.
std::vector<ZooEntry> vit_entries();
/// gpt (GPT-2 small shape) and gpt_tiny.
std::vector<ZooEntry> gpt_entries();
/// mlp and mlp_tiny.
std::vector<ZooEntry> mlp_entries();

}  // namespace pipeplan::models
