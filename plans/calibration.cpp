// The Calibration record: validation, JSON, and the memory corrections for a stage count.
#include "plans/calibration.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/limits.h"

namespace pipeplan {
namespace {

// The largest correction factor (and 1 / it the smallest): a model off by more than a factor
// of 1,000 was not calibrated from a run of the same model on the same device.
constexpr double kMaxScale = 1e3;

const std::pair<const char*, double StageCalibration::*> kScaleFields[] = {
    {"fwd_scale", &StageCalibration::fwd_scale},
    {"bwd_scale", &StageCalibration::bwd_scale},
    {"optimizer_scale", &StageCalibration::optimizer_scale},
    {"bwd_input_scale", &StageCalibration::bwd_input_scale},
    {"bwd_weight_scale", &StageCalibration::bwd_weight_scale},
};
// Keys of kScaleFields a calibration written before zb-h1 does not have: read as 1.
bool optional_scale(std::string_view key) {
  return key == "bwd_input_scale" || key == "bwd_weight_scale";
}

}  // namespace

void Calibration::validate(std::string_view document) const {
  PIPEPLAN_CHECK(!stages.empty(), document, ": calibration.stages: empty (one per stage)");
  PIPEPLAN_CHECK(virtual_stages >= 1 && virtual_stages <= kMaxVirtualStages &&
                     stages.size() % static_cast<size_t>(virtual_stages) == 0,
                 document, ": calibration.virtual_stages: ", virtual_stages, ": expected 1 to ",
                 kMaxVirtualStages, " dividing the ", stages.size(), " stages (pp · V chunks)");
  int expected_first = 0;
  for (size_t stage_idx = 0; stage_idx < stages.size(); ++stage_idx) {
    const StageCalibration& stage = stages[stage_idx];
    PIPEPLAN_CHECK(stage.first == expected_first && stage.last > stage.first &&
                       stage.last <= kMaxLayers,
                   document, ": calibration.stages[", stage_idx, "]: layers [", stage.first, ", ",
                   stage.last, "): expected a non-empty range from layer ", expected_first);
    for (const auto& [key, field] : kScaleFields)
      PIPEPLAN_CHECK(std::isfinite(stage.*field) && stage.*field >= 1 / kMaxScale &&
                         stage.*field <= kMaxScale,
                     document, ": calibration.stages[", stage_idx, "].", key, ": ", stage.*field,
                     ": expected a factor in [", 1 / kMaxScale, ", ", kMaxScale, "]");
    PIPEPLAN_CHECK(std::abs(stage.memory_correction_bytes) <= kMaxBytes, document,
                   ": calibration.stages[", stage_idx, "].memory_correction_bytes: ",
                   stage.memory_correction_bytes, ": expected at most ", kMaxBytes, " either way");
    expected_first = stage.last;
  }
  for (const auto& [key, ms] : {std::pair{"latency_ms", latency_ms},
                                {"profile_latency_ms", profile_latency_ms}})
    PIPEPLAN_CHECK(std::isfinite(ms) && ms >= 0 && ms <= kMaxTimeMs, document, ": calibration.",
                   key, ": ", ms, ": expected a time in ms in [0, ", kMaxTimeMs, "]");
}

std::vector<int64_t> Calibration::memory_corrections(int pp) const {
  if (static_cast<size_t>(pp) * static_cast<size_t>(virtual_stages) == stages.size()) {
    std::vector<int64_t> corrections;  // chunk s is stage s's first
    for (int stage_idx = 0; stage_idx < pp; ++stage_idx)
      corrections.push_back(stages[static_cast<size_t>(stage_idx)].memory_correction_bytes);
    return corrections;
  }
  int64_t largest = stages.empty() ? 0 : stages.front().memory_correction_bytes;
  for (const StageCalibration& stage : stages)
    largest = std::max(largest, stage.memory_correction_bytes);
  return std::vector<int64_t>(static_cast<size_t>(pp), largest);
}

Json to_json(const Calibration& c) {
  const Json stages = json_array(c.stages, [](const StageCalibration& stage) {
    Json json{{"first", stage.first},
              {"last", stage.last},
              {"memory_correction_bytes", stage.memory_correction_bytes}};
    for (const auto& [key, field] : kScaleFields) json[key] = stage.*field;
    return json;
  });
  Json json{{"run", {{"path", c.run_path}, {"hash", c.run_hash}}},
            {"plan_hash", c.plan_hash},
            {"configuration", c.configuration},
            {"optimizer", c.optimizer},
            {"stages", stages},
            {"profile_latency_ms", c.profile_latency_ms},
            {"latency_ms", c.latency_ms},
            {"latency_only", c.latency_only},
            {"latency_note", c.latency_note}};
  if (c.virtual_stages > 1) json["virtual_stages"] = c.virtual_stages;  // optional: 1 when absent
  return json;
}

Calibration calibration_from_json(const JsonReader& r) {
  Calibration c;
  const JsonReader run = r.object("run");
  c.run_path = run.string("path");
  c.run_hash = run.string("hash");
  c.plan_hash = r.string("plan_hash");
  c.configuration = r.string("configuration");
  c.optimizer = r.string("optimizer");
  if (r.has("virtual_stages")) c.virtual_stages = r.int_in("virtual_stages", 1, kMaxVirtualStages);
  for (const JsonReader& s : r.objects("stages")) {
    StageCalibration stage;
    stage.first = s.int_in("first", 0, kMaxLayers - 1);
    stage.last = s.int_in("last", 1, kMaxLayers);
    stage.memory_correction_bytes =
        s.integer_in("memory_correction_bytes", -kMaxBytes, kMaxBytes);
    for (const auto& [key, field] : kScaleFields)
      if (!optional_scale(key) || s.has(key)) stage.*field = s.non_negative(key);
    c.stages.push_back(stage);
  }
  c.profile_latency_ms = r.time_ms("profile_latency_ms");
  c.latency_ms = r.time_ms("latency_ms");
  c.latency_only = r.boolean("latency_only");
  c.latency_note = r.string("latency_note");
  c.validate(r.document());
  return c;
}

}  // namespace pipeplan
