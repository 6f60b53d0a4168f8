// `pipeplan models`: the zoo with layer counts, parameter counts and input shapes; with --model,
// one model's layer table with the live set at every cut.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/json.h"
#include "common/units.h"
#include "models/zoo.h"
#include "plans/plan.h"
#include "runtime/device.h"

namespace pipeplan::cli {
namespace {

struct ModelsOptions {
  bool json = false;
  std::string model;  ///< empty: the zoo listing
  std::vector<std::string> model_args;
};

// One row per layer: name, kind, parameters, and the live set after it (the cut to the next
// layer; after the last layer, the model's output) with its bytes per sample.
Json layer_table(const models::Model& model) {
  Json rows = Json::array();
  for (size_t layer_idx = 0; layer_idx < model.layers.size(); ++layer_idx) {
    const models::LayerSpec& layer = model.layers[layer_idx];
    Json live_set = Json::array();
    int64_t bytes_per_sample = 0;
    for (const models::LiveTensor& tensor : layer.live_out) {
      const std::string dtype = runtime::dtype_name(tensor.dtype);
      bytes_per_sample += activation_bytes(tensor.sample_shape, dtype, /*batch=*/1);
      live_set.push_back(Json{{"sample_shape", tensor.sample_shape}, {"dtype", dtype}});
    }
    Json row{{"index", layer_idx},
             {"name", layer.name},
             {"kind", layer.kind},
             {"parameter_count", layer.param_count}};
    if (!layer.live_out.empty()) {
      row["live_out"] = live_set;
      row["live_out_bytes_per_sample"] = bytes_per_sample;
    }
    rows.push_back(row);
  }
  return rows;
}

// One entry per tied parameter: its users (layer and name there) and its parameter count.
Json tie_table(const models::Model& model) {
  Json ties = Json::array();
  for (const models::TiedParameter& tie : model.ties) {
    Json users = Json::array();
    for (const models::TiedParameter::User& user : tie.users)
      users.push_back(Json{{"layer", user.layer}, {"name", user.name}});
    ties.push_back(Json{{"users", users}, {"parameter_count", tie.numel}});
  }
  return ties;
}

int run_model_table(const ModelsOptions& options) {
  const models::Model model = models::make_model(options.model, options.model_args);
  const Json rows = layer_table(model);
  const Json ties = tie_table(model);
  if (options.json) {
    std::printf("%s\n",
                Json{{"model", model.name}, {"layers", rows}, {"ties", ties}}.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu layers, %lld parameters\n", model.name.c_str(), model.layers.size(),
              static_cast<long long>(models::parameter_count(model)));
  std::printf("%5s  %-28s %-16s %12s  %-22s %s\n", "layer", "name", "kind", "parameters",
              "live set after", "bytes/sample");
  for (const Json& row : rows) {
    std::string live = "-", bytes = "-";
    if (row.contains("live_out")) {
      live.clear();
      for (const Json& tensor : row["live_out"])
        live += (live.empty() ? "" : " + ") +
                format_shape(tensor["sample_shape"].get<std::vector<int64_t>>()) + " " +
                tensor["dtype"].get<std::string>();
      bytes = std::to_string(row["live_out_bytes_per_sample"].get<long long>());
    }
    std::printf("%5d  %-28s %-16s %12lld  %-22s %s\n", row["index"].get<int>(),
                row["name"].get<std::string>().c_str(), row["kind"].get<std::string>().c_str(),
                row["parameter_count"].get<long long>(), live.c_str(), bytes.c_str());
  }
  for (const Json& tie : ties) {
    std::string users;
    for (const Json& user : tie["users"])
      users += (users.empty() ? "" : " = ") + user["name"].get<std::string>() + " (layer " +
               std::to_string(user["layer"].get<int>()) + ")";
    std::printf("tied: %s, %lld parameters counted in each layer; stages holding several share "
                "one copy, others sum its gradient\n",
                users.c_str(), tie["parameter_count"].get<long long>());
  }
  return 0;
}

int run_models(const ModelsOptions& options) {
  if (!options.model.empty()) return run_model_table(options);
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
  std::printf("%-14s %7s %14s  %-18s %s\n", "model", "layers", "parameters", "input",
              "description");
  for (const Json& row : listing)
    std::printf(
        "%-14s %7d %14lld  %-18s %s\n", row["name"].get<std::string>().c_str(),
        row["num_layers"].get<int>(), row["parameter_count"].get<long long>(),
        (format_dims(row["input_shape"]) + " " + row["input_dtype"].get<std::string>()).c_str(),
        row["description"].get<std::string>().c_str());
  return 0;
}

}  // namespace

Runner add_models_command(CLI::App& app) {
  auto options = std::make_shared<ModelsOptions>();
  CLI::App* sub = app.add_subcommand(
      "models", "List the model zoo: layers, parameters, input; or one model's layer table.");
  sub->add_flag("--json", options->json, "Print the listing as JSON");
  sub->add_option("--model", options->model,
                  "Print this model's layers instead (a zoo name or a TorchScript file): name, "
                  "kind, parameters, and the live set after each layer (TorchScript files)");
  sub->add_option("--model-arg", options->model_args,
                  "KEY=VALUE configuration override for --model (repeatable)");
  return [options] { return run_models(*options); };
}

}  // namespace pipeplan::cli
