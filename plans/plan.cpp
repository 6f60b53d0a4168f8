// The Plan: enum words, optimizer defaults, validation, hashing.
#include "plans/plan.h"

#include <utility>

#include "common/error.h"
#include "common/hash.h"
#include "common/limits.h"
#include "common/units.h"
#include "common/words.h"

namespace pipeplan {
namespace {

constexpr std::pair<const char*, Schedule> kScheduleWords[] = {
    {"gpipe", Schedule::kGpipe}, {"1f1b", Schedule::kOneFOneB}, {"zb-h1", Schedule::kZeroBubbleH1},
    {"interleaved-1f1b", Schedule::kInterleaved1F1B}};
constexpr std::pair<const char*, Precision> kPrecisionWords[] = {
    {"fp32", Precision::kFp32}, {"amp-bf16", Precision::kAmpBf16}, {"amp-fp16", Precision::kAmpFp16}};
constexpr std::pair<const char*, OptimizerKind> kOptimizerWords[] = {{"sgd", OptimizerKind::kSgd},
                                                                     {"adamw", OptimizerKind::kAdamw}};
constexpr std::pair<const char*, PlanMode> kModeWords[] = {{"training", PlanMode::kTraining},
                                                           {"inference", PlanMode::kInference}};
constexpr std::pair<const char*, IterationEstimate> kEstimateWords[] = {
    {"mean-times", IterationEstimate::kMeanTimes}, {"draws", IterationEstimate::kDraws}};

constexpr std::pair<const char*, int64_t> kDtypeBytes[] = {
    {"float32", 4}, {"int64", 8}, {"bfloat16", 2}, {"float16", 2}};

}  // namespace

int64_t dtype_bytes(std::string_view dtype, std::string_view field) {
  for (const auto& [word, bytes] : kDtypeBytes)
    if (dtype == word) return bytes;
  throw Error(ErrorKind::kBadInput, detail::concat(field, ": ", quote(dtype),
                                                   ": expected float32, int64, bfloat16 or float16"));
}

int64_t activation_bytes(const std::vector<int64_t>& sample_shape, std::string_view dtype,
                         int64_t batch) {
  // In floating point first: absurd shapes must not overflow 64 bits on the way to the check.
  double bytes = static_cast<double>(batch) * static_cast<double>(dtype_bytes(dtype, "dtype"));
  for (int64_t dim : sample_shape) bytes *= static_cast<double>(dim);
  PIPEPLAN_CHECK(bytes >= 0 && bytes <= static_cast<double>(kMaxBytes), "an activation of ",
                 batch, " samples of ", format_shape(sample_shape), " ", dtype, ": ", bytes,
                 " bytes: expected at most ", kMaxBytes);
  return static_cast<int64_t>(bytes);
}

std::string to_string(Schedule schedule) { return word_of(schedule, kScheduleWords); }
std::string to_string(Precision precision) { return word_of(precision, kPrecisionWords); }
std::string to_string(OptimizerKind optimizer) { return word_of(optimizer, kOptimizerWords); }
std::string to_string(PlanMode mode) { return word_of(mode, kModeWords); }
std::string to_string(IterationEstimate estimate) { return word_of(estimate, kEstimateWords); }

Schedule parse_schedule(std::string_view text, std::string_view field) {
  return parse_word(text, field, kScheduleWords);
}
Precision parse_precision(std::string_view text, std::string_view field) {
  return parse_word(text, field, kPrecisionWords);
}
OptimizerKind parse_optimizer(std::string_view text, std::string_view field) {
  return parse_word(text, field, kOptimizerWords);
}
PlanMode parse_plan_mode(std::string_view text, std::string_view field) {
  return parse_word(text, field, kModeWords);
}
IterationEstimate parse_iteration_estimate(std::string_view text, std::string_view field) {
  return parse_word(text, field, kEstimateWords);
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

std::string plan_hash(const Plan& plan) { return content_hash(to_json(plan).dump()); }

std::string recompute_marker(const std::vector<int>& recompute_layers) {
  std::string text;
  for (size_t idx = 0; idx < recompute_layers.size(); ++idx)
    text += detail::concat(idx == 0 ? "r" : ".", recompute_layers[idx]);
  return text;
}

std::string plan_configuration(const Plan& plan) {
  std::string text = detail::concat(
      "dp=", plan.dp, plan.tp() > 1 ? detail::concat(" tp=", plan.tp()) : "", " pp=", plan.pp,
      " b=", plan.micro_batch_size, " m=", plan.num_micro_batches, " ", to_string(plan.schedule),
      plan.virtual_stages > 1 ? detail::concat(" v=", plan.virtual_stages) : std::string(),
      " stages ");
  for (size_t stage_idx = 0; stage_idx < plan.stages.size(); ++stage_idx) {
    const StagePlan& stage = plan.stages[stage_idx];
    text += detail::concat(stage_idx == 0 ? "" : ",", stage.first, ":", stage.last,
                           stage.checkpoint ? "c" : "", recompute_marker(stage.recompute_layers));
  }
  return text;
}

int rank_of(const Plan& plan, int stage, int replica, int tp_rank) {
  for (const RankAssignment& assignment : plan.ranks)
    if (assignment.stage == stage && assignment.replica == replica && assignment.tp_rank == tp_rank)
      return assignment.rank;
  PIPEPLAN_ASSERT(false, "no rank for stage ", stage, " replica ", replica, " tp rank ", tp_rank);
}

}  // namespace pipeplan
