// `pipeplan models`: the zoo with layer counts, parameter counts and input shapes.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/json.h"
#include "models/zoo.h"

namespace pipeplan::cli {
namespace {

struct ModelsOptions {
  bool json = false;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t dim : shape) text += (text.empty() ? "" : "x") + std::to_string(dim);
  return text;
}

int run_models(const ModelsOptions& options) {
  Json listing = Json::array();
  for (const models::ZooEntry& entry : models::zoo()) {
    const models::Model model = models::make_model(entry.name);
    const ModelRef ref = models::model_ref(model);
    listing.push_back(Json{{"name", entry.name},
                           {"description", entry.description},
                           {"num_layers", ref.num_layers},
                           {"parameter_count", models::parameter_count(model)},
                           {"input_shape", ref.input_shape},
                           {"input_dtype", ref.input_dtype}});
  }
  if (options.json) {
    std::printf("%s\n", listing.dump(2).c_str());
    return 0;
  }
  std::printf("%-14s %7s %14s  %-18s %s\n", "model", "layers", "parameters", "input", "description");
  for (const Json& row : listing)
    std::printf("%-14s %7d %14lld  %-18s %s\n", row["name"].get<std::string>().c_str(),
                row["num_layers"].get<int>(), row["parameter_count"].get<long long>(),
                (shape_text(row["input_shape"]) + " " + row["input_dtype"].get<std::string>()).c_str(),
                row["description"].get<std::string>().c_str());
  return 0;
}

}  // namespace

Runner add_models_command(CLI::App& app) {
  auto options = std::make_shared<ModelsOptions>();
  CLI::App* sub = app.add_subcommand("models", "List the model zoo: layers, parameters, input.");
  sub->add_flag("--json", options->json, "Print the listing as JSON");
  return [options] { return run_models(*options); };
}

}  // namespace pipeplan::cli
