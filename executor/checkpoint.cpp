// Checkpoints: stage files through torch's archives, manifests as JSON.
#include "executor/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "common/error.h"
#include "models/torch_error.h"

namespace pipeplan::executor {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifestName = "checkpoint.json";
constexpr const char* kStepDirPrefix = "step-";

// Calls `visit(name, tensor)` for every parameter ("layerN.NAME") and buffer ("bufferN.NAME").
template <typename Visit>
void for_each_stage_tensor(StageRuntime& stage, Visit&& visit) {
  for (size_t position = 0; position < stage.layers().size(); ++position) {
    const std::string index = std::to_string(stage.first_layer() + static_cast<int>(position));
    const models::LayerPtr& layer = stage.layers()[position];
    for (const auto& item : layer->named_parameters()) visit("layer" + index + "." + item.key(), item.value());
    for (const auto& item : layer->named_buffers()) visit("buffer" + index + "." + item.key(), item.value());
  }
}

Json accuracy_json(const std::vector<EpochAccuracy>& accuracy) {
  Json rows = Json::array();
  for (const EpochAccuracy& a : accuracy)
    rows.push_back(Json{{"epoch", a.epoch}, {"step", a.step}, {"test_accuracy", a.test_accuracy}});
  return rows;
}

}  // namespace

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kStepDirPrefix, static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string checkpoint_stage_path(const std::string& dir, int64_t step, int stage_idx) {
  return (fs::path(checkpoint_step_dir(dir, step)) / ("stage-" + std::to_string(stage_idx) + ".pt")).string();
}

void save_stage_checkpoint(const std::string& dir, int64_t step, const std::string& plan_hash,
                           StageRuntime& stage, const runtime::FlatOptimizer& optimizer) {
  const std::string path = checkpoint_stage_path(dir, step, stage.stage());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    torch::NoGradGuard no_grad;
    fs::create_directories(checkpoint_step_dir(dir, step));
    torch::serialize::OutputArchive archive;
    archive.write("meta.plan_hash", c10::IValue(plan_hash));
    archive.write("meta.stage", c10::IValue(static_cast<int64_t>(stage.stage())));
    archive.write("meta.step", c10::IValue(step));
    for_each_stage_tensor(stage, [&](const std::string& name, const torch::Tensor& tensor) {
      archive.write(name, tensor.detach().to(torch::kCPU).clone());
    });
    for (const auto& [name, tensor] : optimizer.state()) archive.write("optimizer." + name, tensor.to(torch::kCPU));
    archive.save_to(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    throw Error(ErrorKind::kRuntime, detail::concat("cannot write checkpoint ", quote(path), ": ",
                                                    models::error_line(e)));
  }
  PIPEPLAN_RUNTIME_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot write checkpoint ",
                         quote(path), ": rename failed");
}

void load_stage_checkpoint(const std::string& dir, int64_t step, const std::string& plan_hash,
                           StageRuntime& stage, runtime::FlatOptimizer& optimizer) {
  const std::string path = checkpoint_stage_path(dir, step, stage.stage());
  const std::string fix = "; delete that checkpoint folder or start without --resume";
  torch::serialize::InputArchive archive;
  c10::IValue value;
  try {
    archive.load_from(path);
    archive.read("meta.plan_hash", value);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kBadInput,
                detail::concat("checkpoint ", quote(path),
                               " is unreadable or corrupt: ", models::error_line(e), fix));
  }
  PIPEPLAN_CHECK(value.isString() && value.toStringRef() == plan_hash, "checkpoint ", quote(path),
                 " was made for another plan (hash ", quote(value.isString() ? value.toStringRef() : "?"),
                 ", this plan ", quote(plan_hash), ")", fix);
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, const torch::Tensor& target) {
    torch::Tensor saved;
    try {
      archive.read(name, saved);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kBadInput, detail::concat("checkpoint ", quote(path), ": ", quote(name),
                                                       " is missing or corrupt", fix));
    }
    PIPEPLAN_CHECK(saved.sizes() == target.sizes(), "checkpoint ", quote(path), ": ", quote(name),
                   " has shape ", saved.sizes(), ", this stage needs ", target.sizes(), fix);
    target.copy_(saved);
  };
  for_each_stage_tensor(stage, load);
  for (const auto& [name, tensor] : optimizer.state()) load("optimizer." + name, tensor);
}

void write_checkpoint_manifest(const std::string& dir, const CheckpointManifest& m, int keep) {
  const Json json{{"schema", kCheckpointSchema},
                  {"plan_hash", m.plan_hash},
                  {"step", m.step},
                  {"total_steps", m.total_steps},
                  {"seed", m.seed},
                  {"data", m.data},
                  {"pp", m.pp},
                  {"optimizer_steps", m.optimizer_steps},
                  {"loss_scale", m.loss_scale},
                  {"loss_scale_clean_steps", m.loss_scale_clean_steps},
                  {"loss", m.loss},
                  {"test_accuracy", accuracy_json(m.test_accuracy)}};
  write_json_file((fs::path(checkpoint_step_dir(dir, m.step)) / kManifestName).string(), json);
  std::vector<int64_t> complete;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kStepDirPrefix, 0) == 0 && fs::exists(entry.path() / kManifestName, ec))
      complete.push_back(std::stoll(name.substr(std::string(kStepDirPrefix).size())));
  }
  std::sort(complete.rbegin(), complete.rend());
  for (size_t idx = static_cast<size_t>(keep); idx < complete.size(); ++idx)
    fs::remove_all(checkpoint_step_dir(dir, complete[idx]), ec);
}

CheckpointManifest read_checkpoint_manifest(const std::string& dir, int64_t step) {
  const std::string path = (fs::path(checkpoint_step_dir(dir, step)) / kManifestName).string();
  const Json json = read_json_file(path);
  check_schema(json, kCheckpointSchema, path);
  const JsonReader r(json, path);
  CheckpointManifest m;
  m.plan_hash = r.string("plan_hash");
  m.step = r.integer_at_least("step", 0);
  m.total_steps = r.integer_at_least("total_steps", 1);
  m.seed = static_cast<uint64_t>(r.integer_at_least("seed", 0));
  m.data = r.string("data");
  m.pp = static_cast<int>(r.integer_at_least("pp", 1));
  m.optimizer_steps = r.integer_at_least("optimizer_steps", 0);
  m.loss_scale = r.non_negative("loss_scale");
  m.loss_scale_clean_steps = r.integer_at_least("loss_scale_clean_steps", 0);
  m.loss = r.number("loss");
  for (const JsonReader& a : r.objects("test_accuracy"))
    m.test_accuracy.push_back({a.integer_at_least("epoch", 1), a.integer_at_least("step", 0),
                               a.non_negative("test_accuracy")});
  return m;
}

int64_t latest_complete_checkpoint(const std::string& dir) {
  int64_t latest = 0;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kStepDirPrefix, 0) != 0 || !fs::exists(entry.path() / kManifestName, ec)) continue;
    const std::string digits = name.substr(std::string(kStepDirPrefix).size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    latest = std::max<int64_t>(latest, std::stoll(digits));
  }
  return latest;
}

std::map<std::string, torch::Tensor> read_checkpoint_parameters(const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  std::map<std::string, torch::Tensor> parameters;
  for (const std::string& key : archive.keys()) {
    if (key.rfind("layer", 0) != 0) continue;
    torch::Tensor tensor;
    archive.read(key, tensor);
    parameters[key] = tensor;
  }
  return parameters;
}

}  // namespace pipeplan::executor
