// Checkpoints: stage files through torch's archives, manifests as JSON, both checksummed.
#include "executor/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/limits.h"
#include "models/blocks.h"
#include "models/tensor_parallel.h"
#include "models/torch_error.h"
#include "models/torchscript.h"
#include "plans/run.h"

namespace pipeplan::executor {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifestName = "checkpoint.json";
constexpr const char* kStepDirPrefix = "step-";
// Digits a step folder's number may have: more cannot be a step (stoll would overflow).
constexpr size_t kMaxStepDigits = 18;
// What every refusal of a checkpoint tells the user to do: when resuming, when serving it.
constexpr const char* kFix = "; delete that checkpoint folder or start without --resume";
constexpr const char* kServeFix = "; use a complete checkpoint folder of a training run";
// The keys of a stage file's identity ("meta.step"); every other key is a tensor.
constexpr const char* kMetaPrefix = "meta.";

// Calls `visit(name, tensor)` for every parameter ("layerN.NAME") and buffer ("bufferN.NAME").
template <typename Visit>
void for_each_stage_tensor(StageRuntime& stage, Visit&& visit) {
  for (size_t position = 0; position < stage.layers().size(); ++position) {
    const std::string index = std::to_string(stage.layer_index(position));
    const models::LayerPtr& layer = stage.layers()[position];
    for (const auto& item : layer->named_parameters()) visit("layer" + index + "." + item.key(), item.value());
    for (const auto& item : layer->named_buffers()) visit("buffer" + index + "." + item.key(), item.value());
  }
}

// Every tensor a stage file holds, in file order: the stage's, then the optimizer's (none when
// `optimizer` is null: ZeRO-1 keeps it in shard files).
template <typename Visit>
void for_each_checkpoint_tensor(StageRuntime& stage, const runtime::FlatOptimizer* optimizer,
                                Visit&& visit) {
  for_each_stage_tensor(stage, visit);
  if (optimizer == nullptr) return;
  for (const auto& [name, tensor] : optimizer->state()) visit("optimizer." + name, tensor);
}

// The identity a checkpoint file records and is checked against: a stage file has replica -1,
// a shard file the replica whose optimizer shard it holds.
struct FileMeta {
  std::string plan_hash;
  int stage = 0;
  int replica = -1;
  int64_t step = 0;
};

// FNV-1a over each tensor's name and bytes (CPU, contiguous), in the order they are added.
class TensorChecksum {
 public:
  void add(const std::string& name, const torch::Tensor& cpu_tensor) {
    hash_ = fnv1a64(name, hash_);
    const torch::Tensor bytes = cpu_tensor.contiguous();
    hash_ = fnv1a64(std::string_view(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes()), hash_);
  }
  std::string text() const { return format_hash(hash_); }

 private:
  uint64_t hash_ = fnv1a64("");
};

// The step of a checkpoint folder named "step-00000010"; nullopt for any other name.
std::optional<int64_t> step_of_folder(const std::string& name) {
  if (name.rfind(kStepDirPrefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(std::string(kStepDirPrefix).size());
  if (digits.empty() || digits.size() > kMaxStepDigits ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(digits);
}

// The steps of the checkpoints in `dir` that are complete (those with a manifest), or of those
// that are not, newest first. A manifest that is there but cannot be read (a link that loops or
// leads nowhere) counts as there: reading it then fails, where skipping it would serve or resume
// from an older step without a word.
std::vector<int64_t> steps_in(const std::string& dir, bool complete) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::optional<int64_t> step = step_of_folder(entry.path().filename().string());
    const bool manifest = fs::exists(fs::symlink_status(entry.path() / kManifestName, ec));
    if (step && manifest == complete) steps.push_back(*step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// `tensor`, or a copy of it when it is a view into a larger storage (parameters are views into
// the stage's flat buffer): an archive writes a tensor's whole storage.
torch::Tensor own_storage(const torch::Tensor& tensor) {
  const bool whole = tensor.storage_offset() == 0 && tensor.is_contiguous() &&
                     tensor.storage().nbytes() == tensor.nbytes();
  return whole ? tensor : tensor.clone();
}

// The file's bytes: serialized in memory, so that a failing write is an error we report and not
// one LibTorch's archive writer throws from its destructor (which aborts the process).
// `for_each_tensor(visit)` visits the file's tensors in file order.
template <typename ForEachTensor>
std::string serialize(ForEachTensor&& for_each_tensor, const FileMeta& meta,
                      std::string* checksum) {
  torch::NoGradGuard no_grad;
  torch::serialize::OutputArchive archive;
  TensorChecksum sum;
  for_each_tensor([&](const std::string& name, const torch::Tensor& tensor) {
    const torch::Tensor cpu = own_storage(tensor.detach().to(torch::kCPU));
    sum.add(name, cpu);
    archive.write(name, cpu);
  });
  *checksum = sum.text();
  archive.write("meta.plan_hash", c10::IValue(meta.plan_hash));
  archive.write("meta.stage", c10::IValue(static_cast<int64_t>(meta.stage)));
  if (meta.replica >= 0)
    archive.write("meta.replica", c10::IValue(static_cast<int64_t>(meta.replica)));
  archive.write("meta.step", c10::IValue(meta.step));
  archive.write("meta.checksum", c10::IValue(*checksum));
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

// A "meta.*" value of a stage file as text ("?" when missing or of another type).
std::string meta_text(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) return "?";
  if (value.isString()) return value.toStringRef();
  return value.isInt() ? std::to_string(value.toInt()) : "?";
}

// The file's recorded step and checksum against its manifest's, as resuming and serving check
// them; `fix` ends the error.
void check_step_and_checksum(torch::serialize::InputArchive& archive, const std::string& path,
                             int64_t step, const std::string& expected_checksum, const char* fix) {
  const std::string file_step = meta_text(archive, "meta.step");
  PIPEPLAN_CHECK(file_step == std::to_string(step), "checkpoint ", quote(path), " holds step ",
                 quote(file_step), ", not step ", step,
                 " of its manifest (a stage file of another step)", fix);
  const std::string file_checksum = meta_text(archive, "meta.checksum");
  PIPEPLAN_CHECK(file_checksum == expected_checksum, "checkpoint ", quote(path), " has checksum ",
                 quote(file_checksum), " but its manifest records ", quote(expected_checksum),
                 " (a stage file of another run or step)", fix);
}

// Checks that the file at `path` is the one the manifest of meta.step records.
void check_meta(torch::serialize::InputArchive& archive, const std::string& path,
                const FileMeta& meta, const std::string& expected_checksum) {
  const std::string file_hash = meta_text(archive, "meta.plan_hash");
  PIPEPLAN_CHECK(file_hash == meta.plan_hash, "checkpoint ", quote(path),
                 " was made for another plan (hash ", quote(file_hash), ", this plan ",
                 quote(meta.plan_hash), ")", kFix);
  const std::string file_stage = meta_text(archive, "meta.stage");
  PIPEPLAN_CHECK(file_stage == std::to_string(meta.stage), "checkpoint ", quote(path),
                 " holds stage ", quote(file_stage), ", not stage ", meta.stage, kFix);
  if (meta.replica >= 0) {
    const std::string file_replica = meta_text(archive, "meta.replica");
    PIPEPLAN_CHECK(file_replica == std::to_string(meta.replica), "checkpoint ", quote(path),
                   " holds the optimizer shard of replica ", quote(file_replica),
                   ", not of replica ", meta.replica, kFix);
  }
  check_step_and_checksum(archive, path, meta.step, expected_checksum, kFix);
}

// Writes the file of `meta` at `path` (tmp + rename) and returns its tensors' checksum.
template <typename ForEachTensor>
std::string write_checkpoint_file(const std::string& dir, const std::string& path,
                                  ForEachTensor&& for_each_tensor, const FileMeta& meta) {
  std::string checksum;
  std::string bytes;
  try {
    bytes = serialize(for_each_tensor, meta, &checksum);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, detail::concat("cannot write checkpoint ", quote(path), ": ",
                                                    models::error_line(e)));
  }
  std::error_code ec;
  fs::create_directories(checkpoint_step_dir(dir, meta.step), ec);
  PIPEPLAN_RUNTIME_CHECK(!ec, "cannot write checkpoint ", quote(path), ": ", ec.message());
  write_file_atomic(path, bytes);
  return checksum;
}

// Loads the archive at `path`, a regular file checked before LibTorch opens it (a FIFO would
// block the load); `fix` ends the error.
void load_archive(torch::serialize::InputArchive& archive, const std::string& path,
                  const char* fix) {
  check_input_file(path, kMaxTensorFileBytes);
  try {
    archive.load_from(path);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kBadInput, detail::concat("checkpoint ", quote(path),
                                                     " is unreadable or corrupt: ",
                                                     models::error_line(e), fix));
  }
}

// Refuses a file whose tensors hash to `sum`, not to `expected_checksum` (its manifest's).
void check_tensors_hash(const TensorChecksum& sum, const std::string& path,
                        const std::string& expected_checksum, const char* fix) {
  PIPEPLAN_CHECK(sum.text() == expected_checksum, "checkpoint ", quote(path),
                 ": its tensors hash to ", quote(sum.text()), ", not to the recorded ",
                 quote(expected_checksum), " (the file is corrupt)", fix);
}

// Every tensor is read and checksummed before any is copied into its target: a file that does
// not match its manifest changes nothing.
template <typename ForEachTensor>
void read_checkpoint_file(const std::string& path, ForEachTensor&& for_each_tensor,
                          const FileMeta& meta, const std::string& expected_checksum) {
  torch::serialize::InputArchive archive;
  load_archive(archive, path, kFix);
  check_meta(archive, path, meta, expected_checksum);
  torch::NoGradGuard no_grad;
  TensorChecksum sum;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (target, saved)
  for_each_tensor([&](const std::string& name, const torch::Tensor& target) {
    torch::Tensor saved;
    try {
      archive.read(name, saved);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kBadInput, detail::concat("checkpoint ", quote(path), ": ", quote(name),
                                                       " is missing or corrupt", kFix));
    }
    PIPEPLAN_CHECK(saved.sizes() == target.sizes(), "checkpoint ", quote(path), ": ", quote(name),
                   " has shape ", saved.sizes(), ", this stage needs ", target.sizes(), kFix);
    sum.add(name, saved);
    copies.emplace_back(target, saved);
  });
  check_tensors_hash(sum, path, expected_checksum, kFix);
  for (auto& [target, saved] : copies) target.copy_(saved);
}

// The optimizer state tensors of a shard file.
template <typename Visit>
void for_each_shard_tensor(const runtime::FlatOptimizer& optimizer, Visit&& visit) {
  for (const auto& [name, tensor] : optimizer.state()) visit("optimizer." + name, tensor);
}

// Loads the stage file at `path` of the checkpoint of `step` into `archive` and checks it as
// resuming does, whatever split the reader has: its recorded step and checksum are the
// manifest's, and all its tensors, in file order (the order they were hashed in when written),
// hash to that checksum.
void verify_whole_file(torch::serialize::InputArchive& archive, const std::string& path,
                       int64_t step, const std::string& expected_checksum) {
  load_archive(archive, path, kServeFix);
  check_step_and_checksum(archive, path, step, expected_checksum, kServeFix);
  torch::NoGradGuard no_grad;
  TensorChecksum sum;
  for (const std::string& key : archive.keys()) {
    if (key.rfind(kMetaPrefix, 0) == 0) continue;
    torch::Tensor saved;
    try {
      archive.read(key, saved);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kBadInput, detail::concat("checkpoint ", quote(path), ": ",
                                                       quote(key), " is corrupt", kServeFix));
    }
    sum.add(key, saved);
  }
  check_tensors_hash(sum, path, expected_checksum, kServeFix);
}

}  // namespace

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kStepDirPrefix, static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string checkpoint_stage_path(const std::string& dir, int64_t step, int stage_idx,
                                  int tp_rank) {
  const std::string tp = tp_rank > 0 ? "-tp-" + std::to_string(tp_rank) : "";
  return (fs::path(checkpoint_step_dir(dir, step)) /
          ("stage-" + std::to_string(stage_idx) + tp + ".pt"))
      .string();
}

std::string checkpoint_shard_path(const std::string& dir, int64_t step, int stage_idx,
                                  int replica) {
  return (fs::path(checkpoint_step_dir(dir, step)) /
          ("stage-" + std::to_string(stage_idx) + "-shard-" + std::to_string(replica) + ".pt"))
      .string();
}

std::string save_stage_checkpoint(const std::string& dir, int64_t step,
                                  const std::string& plan_hash, StageRuntime& stage,
                                  const runtime::FlatOptimizer* optimizer, int tp_rank) {
  return write_checkpoint_file(
      dir, checkpoint_stage_path(dir, step, stage.stage(), tp_rank),
      [&](auto&& visit) { for_each_checkpoint_tensor(stage, optimizer, visit); },
      FileMeta{plan_hash, stage.stage(), /*replica=*/-1, step});
}

void load_stage_checkpoint(const std::string& dir, int64_t step, const std::string& plan_hash,
                           const std::string& expected_checksum, StageRuntime& stage,
                           runtime::FlatOptimizer* optimizer, int tp_rank) {
  read_checkpoint_file(
      checkpoint_stage_path(dir, step, stage.stage(), tp_rank),
      [&](auto&& visit) { for_each_checkpoint_tensor(stage, optimizer, visit); },
      FileMeta{plan_hash, stage.stage(), /*replica=*/-1, step}, expected_checksum);
}

std::string save_optimizer_shard(const std::string& dir, int64_t step, const std::string& plan_hash,
                                 int stage_idx, int replica,
                                 const runtime::FlatOptimizer& optimizer) {
  return write_checkpoint_file(
      dir, checkpoint_shard_path(dir, step, stage_idx, replica),
      [&](auto&& visit) { for_each_shard_tensor(optimizer, visit); },
      FileMeta{plan_hash, stage_idx, replica, step});
}

void load_optimizer_shard(const std::string& dir, int64_t step, const std::string& plan_hash,
                          int stage_idx, int replica, const std::string& expected_checksum,
                          runtime::FlatOptimizer& optimizer) {
  read_checkpoint_file(
      checkpoint_shard_path(dir, step, stage_idx, replica),
      [&](auto&& visit) { for_each_shard_tensor(optimizer, visit); },
      FileMeta{plan_hash, stage_idx, replica, step}, expected_checksum);
}

void write_checkpoint_manifest(const std::string& dir, const CheckpointManifest& m, int keep) {
  Json json{{"schema", kCheckpointSchema},
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
            {"test_accuracy", to_json(m.test_accuracy)},
            {"stage_checksums", m.stage_checksums}};
  if (m.dp > 0) {
    json["dp"] = m.dp;
    json["zero"] = m.zero;
  }
  if (m.zero == 1) json["shard_checksums"] = m.shard_checksums;
  if (m.tp > 1) {
    json["tp"] = m.tp;
    json["tp_checksums"] = m.tp_checksums;
  }
  if (!m.model_hash.empty()) {
    json["model_name"] = m.model_name;
    json["model_hash"] = m.model_hash;
  }
  // Over the compact text of every other field: reading and dumping again gives the same text.
  json["checksum"] = content_hash(json.dump());
  write_json_file((fs::path(checkpoint_step_dir(dir, m.step)) / kManifestName).string(), json);
  const std::vector<int64_t> complete = steps_in(dir, /*complete=*/true);
  std::error_code ec;
  for (size_t idx = static_cast<size_t>(keep); idx < complete.size(); ++idx)
    fs::remove_all(checkpoint_step_dir(dir, complete[idx]), ec);
  // The folders a killed run or a full disk left without a manifest: no rank writes to any now
  // (every rank wrote this step's files before this manifest, and none can finish a later step
  // before rank 0, which writes it, has taken part in it).
  for (const int64_t incomplete : steps_in(dir, /*complete=*/false))
    fs::remove_all(checkpoint_step_dir(dir, incomplete), ec);
}

namespace {

// The checksums of the array `value` (of the manifest's `key`): strings as format_hash writes.
std::vector<std::string> checksums(const JsonReader& r, std::string_view key, const Json& value) {
  if (!value.is_array()) r.reject(key, value, "expected an array of checksums");
  std::vector<std::string> out;
  for (const Json& checksum : value) {
    const bool hash = checksum.is_string() &&
                      checksum.get<std::string>().size() == format_hash(0).size() &&
                      checksum.get<std::string>().rfind("fnv1a64:", 0) == 0;
    if (!hash) r.reject(key, checksum, "expected checksums such as " + quote(format_hash(0)));
    out.push_back(checksum.get<std::string>());
  }
  return out;
}

// The manifest's own checksum, first: a manifest that is corrupt or was edited says so, whatever
// the field the change broke.
void check_manifest_checksum(const Json& json, const JsonReader& r) {
  const std::string recorded = r.string("checksum");
  Json content = json;
  content.erase("checksum");
  if (content_hash(content.dump()) != recorded)
    r.fail("checksum", detail::concat(quote(recorded), " does not match the content (",
                                      quote(content_hash(content.dump())),
                                      "); the manifest is corrupt or was edited", kFix));
}

// The manifest's step against its folder's and one checksum per stage (and shard).
void check_manifest(const JsonReader& r, int64_t step, const CheckpointManifest& m) {
  if (m.step != step)
    r.fail("step", detail::concat(m.step, " is not the step of its folder (", step, ")", kFix));
  if (static_cast<int>(m.stage_checksums.size()) != m.pp)
    r.fail("stage_checksums", detail::concat(m.stage_checksums.size(), " checksums for pp=", m.pp, kFix));
  const size_t shard_rows = m.zero == 1 ? static_cast<size_t>(m.pp) : 0;
  bool shards_complete = m.shard_checksums.size() == shard_rows;
  for (const std::vector<std::string>& row : m.shard_checksums)
    shards_complete = shards_complete && static_cast<int>(row.size()) == m.dp;
  if (!shards_complete)
    r.fail("shard_checksums", detail::concat("expected ", shard_rows, " rows of dp=", m.dp,
                                             " checksums for zero=", m.zero, kFix));
  const size_t tp_rows = m.tp > 1 ? static_cast<size_t>(m.pp) : 0;
  bool tp_complete = m.tp_checksums.size() == tp_rows;
  for (size_t stage_idx = 0; stage_idx < m.tp_checksums.size() && tp_complete; ++stage_idx)
    tp_complete = static_cast<int>(m.tp_checksums[stage_idx].size()) == m.tp &&
                  m.tp_checksums[stage_idx][0] == m.stage_checksums[stage_idx];
  if (!tp_complete)
    r.fail("tp_checksums", detail::concat("expected ", tp_rows, " rows of tp=", m.tp,
                                          " checksums, each row's first the stage's", kFix));
}

}  // namespace

CheckpointManifest read_checkpoint_manifest(const std::string& dir, int64_t step) {
  const std::string path = (fs::path(checkpoint_step_dir(dir, step)) / kManifestName).string();
  const Json json = read_json_file(path);
  check_schema(json, kCheckpointSchema, path);
  const JsonReader r(json, path);
  check_manifest_checksum(json, r);
  CheckpointManifest m;
  m.plan_hash = r.string("plan_hash");
  m.total_steps = r.integer_in("total_steps", 1, kMaxSteps);
  m.step = r.integer_in("step", 0, m.total_steps);
  m.seed = static_cast<uint64_t>(r.integer_at_least("seed", 0));
  m.data = r.string("data");
  if (!is_data_kind(m.data))
    r.reject("data", r.at("data"), std::string("expected ") + kDataKinds);
  m.pp = r.int_in("pp", 1, kMaxDevices);
  // fp16 steps that overflowed were skipped: at most one optimizer step per step.
  m.optimizer_steps = r.integer_in("optimizer_steps", 0, m.step);
  m.loss_scale = r.number("loss_scale");
  int exponent = 0;  // the scale starts at 1 or 2^16 and is only ever halved or doubled
  if (m.loss_scale <= 0 || std::frexp(m.loss_scale, &exponent) != 0.5)
    r.reject("loss_scale", r.at("loss_scale"), "expected a power of two (1 without amp-fp16)");
  m.loss_scale_clean_steps = r.integer_in("loss_scale_clean_steps", 0, m.step);
  m.loss = r.non_negative("loss");
  for (const JsonReader& a : r.objects("test_accuracy"))
    m.test_accuracy.push_back({a.integer_in("epoch", 1, m.step), a.integer_in("step", 1, m.step),
                               a.number_in("test_accuracy", 0, 1)});
  m.stage_checksums = checksums(r, "stage_checksums", r.at("stage_checksums"));
  // Optional (manifests from before ZeRO-1 lack them): dp 0 says "not recorded".
  if (r.has("dp")) m.dp = r.int_in("dp", 1, kMaxDevices);
  if (r.has("zero")) m.zero = r.int_in("zero", 0, 1);
  if (r.has("shard_checksums")) {
    if (!r.at("shard_checksums").is_array())
      r.reject("shard_checksums", r.at("shard_checksums"), "expected an array of arrays");
    for (const Json& row : r.at("shard_checksums"))
      m.shard_checksums.push_back(checksums(r, "shard_checksums", row));
  }
  if (r.has("tp")) {  // optional: 1 when absent
    m.tp = r.int_in("tp", 2, kMaxDevices);
    if (!r.at("tp_checksums").is_array())
      r.reject("tp_checksums", r.at("tp_checksums"), "expected an array of arrays");
    for (const Json& row : r.at("tp_checksums"))
      m.tp_checksums.push_back(checksums(r, "tp_checksums", row));
  }
  if (r.has("model_hash")) {
    m.model_name = r.string("model_name");
    m.model_hash = r.string("model_hash");
  }
  check_manifest(r, step, m);
  return m;
}

void load_stage_weights_by_name(const std::string& dir, int64_t step,
                                const CheckpointManifest& manifest, StageRuntime& stage) {
  // archives[stage][tp rank]: with tp > 1 each rank's file holds its shards of the split layers.
  const size_t stages = manifest.stage_checksums.size();
  const int tp = manifest.tp;
  std::vector<std::vector<torch::serialize::InputArchive>> archives(stages);
  std::vector<std::string> paths;  // tp rank 0's file of each stage
  for (size_t stage_idx = 0; stage_idx < stages; ++stage_idx) {
    archives[stage_idx].resize(static_cast<size_t>(tp));
    for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
      const std::string path =
          checkpoint_stage_path(dir, step, static_cast<int>(stage_idx), tp_rank);
      verify_whole_file(archives[stage_idx][static_cast<size_t>(tp_rank)], path, step,
                        tp > 1 ? manifest.tp_checksums[stage_idx][static_cast<size_t>(tp_rank)]
                               : manifest.stage_checksums[stage_idx]);
      if (tp_rank == 0) paths.push_back(path);
    }
  }
  torch::NoGradGuard no_grad;
  for_each_stage_tensor(stage, [&](const std::string& name, const torch::Tensor& target) {
    torch::Tensor saved;
    size_t found = 0;
    while (found < stages && !archives[found][0].try_read(name, saved)) ++found;
    PIPEPLAN_CHECK(found < stages, "checkpoint ", quote(checkpoint_step_dir(dir, step)),
                   ": no stage file holds ", quote(name),
                   "; serve the model and configuration it was trained with");
    if (tp > 1 && saved.sizes() != target.sizes()) {
      // A split layer's shards, joined.
      std::vector<torch::Tensor> shards{saved};
      for (int tp_rank = 1; tp_rank < tp; ++tp_rank) {
        shards.emplace_back();
        PIPEPLAN_CHECK(archives[found][static_cast<size_t>(tp_rank)].try_read(name, shards.back()),
                       "checkpoint ", quote(checkpoint_step_dir(dir, step)), ": tp rank ", tp_rank,
                       "'s file of stage ", found, " does not hold ", quote(name),
                       "; serve the model and configuration it was trained with");
      }
      // A zoo block's by its parameter names; a TorchScript layer's MLP slices by shape.
      const torch::Tensor joined =
          models::is_torchscript_path(manifest.model_name)
              ? models::join_slices(shards, target.sizes())
              : models::block_parameter_join(name.substr(name.find('.') + 1), shards);
      if (joined.defined()) saved = joined;
    }
    PIPEPLAN_CHECK(saved.sizes() == target.sizes(), "checkpoint ", quote(paths[found]), ": ",
                   quote(name), " has shape ", saved.sizes(),
                   tp > 1 ? " (joined over tp ranks)" : "", ", this stage needs ", target.sizes(),
                   "; serve the model and configuration it was trained with");
    target.copy_(saved);
  });
}

int64_t latest_complete_checkpoint(const std::string& dir) {
  const std::vector<int64_t> complete = steps_in(dir, /*complete=*/true);
  return complete.empty() ? 0 : complete.front();
}

std::map<std::string, torch::Tensor> read_checkpoint_parameters(const std::string& path) {
  torch::serialize::InputArchive archive;
  load_archive(archive, path, kServeFix);
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
