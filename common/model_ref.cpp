// ModelRef: JSON and validation.
#include "common/model_ref.h"

#include <cmath>

#include "common/limits.h"
#include "common/units.h"

namespace pipeplan {

namespace {

// Checks that every number of a configuration (nested objects and arrays included) is finite
// and >= 0: sizes, counts and rates of a model are never negative.
void validate_config(const Json& value, const std::string& path, std::string_view document) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it)
      validate_config(it.value(), path + "." + shorten(it.key()), document);
  } else if (value.is_array()) {
    for (size_t idx = 0; idx < value.size(); ++idx)
      validate_config(value[idx], detail::concat(path, "[", idx, "]"), document);
  } else if (value.is_number()) {
    const bool non_negative =
        value.is_number_unsigned() ||
        (value.is_number_integer() ? value.get<int64_t>() >= 0
                                   : std::isfinite(value.get<double>()) && value.get<double>() >= 0);
    PIPEPLAN_CHECK(non_negative, document, ": ", path, ": ", shorten(value.dump()),
                   ": expected a finite number >= 0 (model sizes and counts are not negative)");
  }
}

}  // namespace

void ModelRef::validate(std::string_view document) const {
  PIPEPLAN_CHECK(!name.empty(), document, ": model.name: '': expected a model name or path");
  PIPEPLAN_CHECK(!hash.empty(), document, ": model.hash: '': expected the model's content hash");
  PIPEPLAN_CHECK(num_layers >= 1 && num_layers <= kMaxLayers, document, ": model.num_layers: ",
                 num_layers, ": expected an integer in [1, ", kMaxLayers, "]");
  PIPEPLAN_CHECK(config.is_object(), document, ": model.config: ", shorten(config.dump()),
                 ": expected an object");
  validate_config(config, "model.config", document);
  PIPEPLAN_CHECK(input_dtype == "float32" || input_dtype == "int64", document,
                 ": model.input_dtype: ", quote(input_dtype), ": expected 'float32' or 'int64'");
  PIPEPLAN_CHECK(!input_shape.empty(), document,
                 ": model.input_shape: []: expected the dimensions of one sample");
  double elements = 1;
  for (int64_t dim : input_shape) {
    PIPEPLAN_CHECK(dim >= 1, document, ": model.input_shape: dimension ", dim,
                   ": expected dimensions >= 1");
    elements *= static_cast<double>(dim);
  }
  PIPEPLAN_CHECK(elements <= static_cast<double>(kMaxBytes), document, ": model.input_shape: ",
                 format_shape(input_shape), ": expected at most ", kMaxBytes,
                 " elements per sample");
}

Json to_json(const ModelRef& model) {
  return Json{{"name", model.name},
              {"config", model.config},
              {"hash", model.hash},
              {"num_layers", model.num_layers},
              {"input_shape", model.input_shape},
              {"input_dtype", model.input_dtype}};
}

ModelRef model_ref_from_json(const JsonReader& reader) {
  ModelRef model;
  model.name = reader.string("name");
  model.config = reader.object("config").json();
  model.hash = reader.string("hash");
  model.num_layers = reader.int_in("num_layers", 1, kMaxLayers);
  model.input_shape = reader.integers_in("input_shape", 1, kMaxBytes);
  model.input_dtype = reader.string("input_dtype");
  model.validate(reader.document());
  return model;
}

}  // namespace pipeplan
