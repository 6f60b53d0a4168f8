// ModelRef: JSON and validation.
#include "common/model_ref.h"

namespace pipeplan {

void ModelRef::validate(std::string_view document) const {
  PIPEPLAN_CHECK(!name.empty(), document, ": model.name: empty");
  PIPEPLAN_CHECK(!hash.empty(), document, ": model.hash: empty");
  PIPEPLAN_CHECK(num_layers >= 1, document, ": model.num_layers: ", num_layers,
                 " is out of range; expected >= 1");
  PIPEPLAN_CHECK(config.is_object(), document, ": model.config: expected an object");
  for (int64_t dim : input_shape)
    PIPEPLAN_CHECK(dim >= 1, document, ": model.input_shape: dimension ", dim,
                   " is out of range; expected >= 1");
  PIPEPLAN_CHECK(input_dtype == "float32" || input_dtype == "int64", document,
                 ": model.input_dtype: ", quote(input_dtype), " is not 'float32' or 'int64'");
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
  model.num_layers = static_cast<int>(reader.integer_at_least("num_layers", 1));
  model.input_shape = reader.integers("input_shape");
  model.input_dtype = reader.string("input_dtype");
  model.validate(reader.document());
  return model;
}

}  // namespace pipeplan
