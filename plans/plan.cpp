// The Plan: enum words, optimizer defaults, validation, hashing.
#include "plans/plan.h"

#include <set>
#include <utility>

#include "common/error.h"
#include "common/hash.h"

namespace pipeplan {
namespace {

template <typename Enum, size_t N>
Enum parse_word(std::string_view text, std::string_view field,
                const std::pair<const char*, Enum> (&words)[N]) {
  std::string accepted;
  for (const auto& [word, value] : words) {
    if (text == word) return value;
    accepted += (accepted.empty() ? "" : ", ") + std::string(word);
  }
  throw Error(ErrorKind::kBadInput,
              detail::concat(field, ": ", quote(text), " is not one of ", accepted));
}

constexpr std::pair<const char*, Schedule> kScheduleWords[] = {{"gpipe", Schedule::kGpipe},
                                                               {"1f1b", Schedule::kOneFOneB}};
constexpr std::pair<const char*, Precision> kPrecisionWords[] = {
    {"fp32", Precision::kFp32}, {"amp-bf16", Precision::kAmpBf16}, {"amp-fp16", Precision::kAmpFp16}};
constexpr std::pair<const char*, OptimizerKind> kOptimizerWords[] = {{"sgd", OptimizerKind::kSgd},
                                                                     {"adamw", OptimizerKind::kAdamw}};

template <typename Enum, size_t N>
std::string word_of(Enum value, const std::pair<const char*, Enum> (&words)[N]) {
  for (const auto& [word, candidate] : words)
    if (candidate == value) return word;
  PIPEPLAN_ASSERT(false, "enum value without a word");
}

constexpr std::pair<const char*, int64_t> kDtypeBytes[] = {
    {"float32", 4}, {"int64", 8}, {"bfloat16", 2}, {"float16", 2}};

void validate_stages(const Plan& plan, std::string_view document) {
  PIPEPLAN_CHECK(static_cast<int>(plan.stages.size()) == plan.pp, document, ": stages: ",
                 plan.stages.size(), " stages for pp=", plan.pp);
  int expected_first = 0;
  for (size_t stage_idx = 0; stage_idx < plan.stages.size(); ++stage_idx) {
    const StagePlan& stage = plan.stages[stage_idx];
    PIPEPLAN_CHECK(stage.first == expected_first, document, ": stages[", stage_idx, "].first: ",
                   stage.first, " (expected ", expected_first, ": stages must be contiguous)");
    PIPEPLAN_CHECK(stage.last > stage.first, document, ": stages[", stage_idx, "].last: ",
                   stage.last, " must be greater than first=", stage.first);
    const std::string where = detail::concat(document, ": stages[", stage_idx, "].");
    dtype_bytes(stage.input_dtype, where + "input_dtype");
    dtype_bytes(stage.output_dtype, where + "output_dtype");
    for (int64_t dim : stage.input_sample_shape)
      PIPEPLAN_CHECK(dim >= 1, where, "input_sample_shape: dimension ", dim, " must be >= 1");
    for (int64_t dim : stage.output_sample_shape)
      PIPEPLAN_CHECK(dim >= 1, where, "output_sample_shape: dimension ", dim, " must be >= 1");
    expected_first = stage.last;
  }
  PIPEPLAN_CHECK(expected_first == plan.model.num_layers, document, ": stages: cover layers [0, ",
                 expected_first, ") of a model with ", plan.model.num_layers, " layers");
}

void validate_ranks(const Plan& plan, std::string_view document) {
  PIPEPLAN_CHECK(static_cast<int>(plan.ranks.size()) == plan.dp * plan.pp, document, ": ranks: ",
                 plan.ranks.size(), " ranks for dp=", plan.dp, " pp=", plan.pp);
  std::set<std::pair<int, int>> placed;
  for (size_t rank = 0; rank < plan.ranks.size(); ++rank) {
    const RankAssignment& assignment = plan.ranks[rank];
    PIPEPLAN_CHECK(assignment.rank == static_cast<int>(rank), document, ": ranks[", rank,
                   "].rank: ", assignment.rank, " (expected ", rank, ")");
    PIPEPLAN_CHECK(assignment.stage >= 0 && assignment.stage < plan.pp, document, ": ranks[", rank,
                   "].stage: ", assignment.stage, " is not in [0, ", plan.pp, ")");
    PIPEPLAN_CHECK(assignment.replica >= 0 && assignment.replica < plan.dp, document, ": ranks[",
                   rank, "].replica: ", assignment.replica, " is not in [0, ", plan.dp, ")");
    PIPEPLAN_CHECK(placed.insert({assignment.stage, assignment.replica}).second, document,
                   ": ranks[", rank, "]: stage ", assignment.stage, " of replica ",
                   assignment.replica, " is placed twice");
    const int per_node = plan.cluster.devices_per_node;
    PIPEPLAN_CHECK(assignment.node == static_cast<int>(rank) / per_node, document, ": ranks[", rank,
                   "].node: ", assignment.node, " (expected rank / devices_per_node = ",
                   static_cast<int>(rank) / per_node, ")");
    PIPEPLAN_CHECK(assignment.local_rank == static_cast<int>(rank) % per_node, document,
                   ": ranks[", rank, "].local_rank: ", assignment.local_rank,
                   " (expected rank % devices_per_node = ", static_cast<int>(rank) % per_node, ")");
  }
}

}  // namespace

int64_t dtype_bytes(std::string_view dtype, std::string_view field) {
  for (const auto& [word, bytes] : kDtypeBytes)
    if (dtype == word) return bytes;
  throw Error(ErrorKind::kBadInput, detail::concat(field, ": ", quote(dtype),
                                                   " is not float32, int64, bfloat16 or float16"));
}

int64_t activation_bytes(const std::vector<int64_t>& sample_shape, std::string_view dtype,
                         int64_t batch) {
  int64_t elements = batch;
  for (int64_t dim : sample_shape) elements *= dim;
  return elements * dtype_bytes(dtype, "activation dtype");
}

std::string to_string(Schedule schedule) { return word_of(schedule, kScheduleWords); }
std::string to_string(Precision precision) { return word_of(precision, kPrecisionWords); }
std::string to_string(OptimizerKind optimizer) { return word_of(optimizer, kOptimizerWords); }

Schedule parse_schedule(std::string_view text, std::string_view field) {
  return parse_word(text, field, kScheduleWords);
}
Precision parse_precision(std::string_view text, std::string_view field) {
  return parse_word(text, field, kPrecisionWords);
}
OptimizerKind parse_optimizer(std::string_view text, std::string_view field) {
  return parse_word(text, field, kOptimizerWords);
}

OptimizerSettings OptimizerSettings::defaults_for(OptimizerKind kind) {
  OptimizerSettings settings;
  settings.kind = kind;
  if (kind == OptimizerKind::kAdamw) {
    settings.base_lr = 1e-3;
    settings.weight_decay = 0.01;
  }
  return settings;
}

void Plan::validate(std::string_view document) const {
  model.validate(document);
  PIPEPLAN_CHECK(dp >= 1, document, ": dp: ", dp, " must be at least 1");
  PIPEPLAN_CHECK(pp >= 1, document, ": pp: ", pp, " must be at least 1");
  PIPEPLAN_CHECK(cluster.devices == dp * pp, document, ": cluster.devices: ", cluster.devices,
                 " is not dp*pp=", dp * pp);
  PIPEPLAN_CHECK(cluster.device_kind == "cpu" || cluster.device_kind == "cuda", document,
                 ": cluster.device_kind: ", quote(cluster.device_kind), " is not 'cpu' or 'cuda'");
  PIPEPLAN_CHECK(cluster.devices_per_node >= 1, document, ": cluster.devices_per_node: ",
                 cluster.devices_per_node, " must be at least 1");
  PIPEPLAN_CHECK(cluster.device_memory_bytes >= 1, document, ": cluster.device_memory_bytes: ",
                 cluster.device_memory_bytes, " must be at least 1");
  PIPEPLAN_CHECK(micro_batch_size >= 1, document, ": micro_batch_size: ", micro_batch_size,
                 " must be at least 1");
  PIPEPLAN_CHECK(num_micro_batches >= 1, document, ": num_micro_batches: ", num_micro_batches,
                 " must be at least 1");
  PIPEPLAN_CHECK(global_batch == dp * num_micro_batches * micro_batch_size, document,
                 ": global_batch: ", global_batch, " is not dp*num_micro_batches*micro_batch_size=",
                 dp * num_micro_batches * micro_batch_size);
  PIPEPLAN_CHECK(pp <= model.num_layers, document, ": pp: ", pp, " stages for ",
                 model.num_layers, " layers");
  validate_stages(*this, document);
  validate_ranks(*this, document);
  PIPEPLAN_CHECK(static_cast<int>(predictions.stages.size()) == pp, document,
                 ": predictions.stages: ", predictions.stages.size(), " entries for pp=", pp);
  PIPEPLAN_CHECK(optimizer.base_lr > 0 && optimizer.base_batch >= 1, document,
                 ": optimizer: base_lr must be > 0 and base_batch >= 1");
  if (calibration) {
    calibration->validate(document);
    PIPEPLAN_CHECK(calibration->stages.back().last == model.num_layers, document,
                   ": calibration.stages: cover layers [0, ", calibration->stages.back().last,
                   ") of a model with ", model.num_layers, " layers");
  }
}

std::string plan_hash(const Plan& plan) { return content_hash(to_json(plan).dump()); }

std::string plan_configuration(const Plan& plan) {
  std::string text = detail::concat("dp=", plan.dp, " pp=", plan.pp, " b=", plan.micro_batch_size,
                                    " m=", plan.num_micro_batches, " ", to_string(plan.schedule),
                                    " stages ");
  for (size_t stage_idx = 0; stage_idx < plan.stages.size(); ++stage_idx) {
    const StagePlan& stage = plan.stages[stage_idx];
    text += detail::concat(stage_idx == 0 ? "" : ",", stage.first, ":", stage.last,
                           stage.checkpoint ? "c" : "");
  }
  return text;
}

int rank_of(const Plan& plan, int stage, int replica) {
  for (const RankAssignment& assignment : plan.ranks)
    if (assignment.stage == stage && assignment.replica == replica) return assignment.rank;
  PIPEPLAN_ASSERT(false, "no rank for stage ", stage, " replica ", replica);
}

}  // namespace pipeplan
