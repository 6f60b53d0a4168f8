// The comparison as compare.json and as the table `pipeplan compare` prints.
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "planner/compare.h"
#include "planner/layer_table.h"

namespace pipeplan {
namespace {

constexpr double kPercent = 100.0;
// A compute-model error of this share of the measured iteration or more gets the calibration hint.
constexpr double kCalibrationHintPercent = 10.0;

// The per-stage differences, in the order of the table and the JSON: key, the table's label.
struct StageTime {
  const char* key;
  const char* label;
  Difference StageComparison::*field;
};
const StageTime kStageTimes[] = {
    {"fwd_ms", "forward / micro-batch", &StageComparison::fwd_ms},
    {"bwd_ms", "backward / micro-batch", &StageComparison::bwd_ms},
    {"bwd_weight_ms", "W / micro-batch (zb-h1)", &StageComparison::bwd_weight_ms},
    {"recompute_ms", "recompute / micro-batch", &StageComparison::recompute_ms},
    {"compute_ms", "compute / iteration", &StageComparison::compute_ms},
    {"tp_allreduce_ms", "  of it tp all-reduce", &StageComparison::tp_allreduce_ms},
    {"optimizer_ms", "optimizer / iteration", &StageComparison::optimizer_ms},
    {"allreduce_ms", "all-reduce / iteration", &StageComparison::allreduce_ms},
    {"allgather_ms", "all-gather / iteration", &StageComparison::allgather_ms},
    {"busy_ms", "busy / iteration", &StageComparison::busy_ms},
    {"idle_ms", "idle / iteration", &StageComparison::idle_ms},
};

// The memory terms of the table's memory block, with their short headings.
const std::pair<const char*, int64_t MemoryTerms::*> kMemoryColumns[] = {
    {"params", &MemoryTerms::parameters_bytes},
    {"grads", &MemoryTerms::gradients_bytes},
    {"opt_state", &MemoryTerms::optimizer_state_bytes},
    {"master", &MemoryTerms::master_copy_bytes},
    {"buffers", &MemoryTerms::buffers_bytes},
    {"activations", &MemoryTerms::activations_bytes},
    {"recompute", &MemoryTerms::recompute_bytes},
    {"w_grads", &MemoryTerms::deferred_gradients_bytes},
    {"transient", &MemoryTerms::transient_bytes},
    {"comm", &MemoryTerms::comm_buffers_bytes},
    {"runtime", &MemoryTerms::runtime_overhead_bytes},
    {"calibration", &MemoryTerms::calibration_bytes},
};

Json error_json(const std::optional<double>& percent) {
  return percent ? Json(*percent) : Json(nullptr);
}

Json difference_json(const Difference& d) {
  return Json{{"predicted", d.predicted},
              {"measured", d.measured},
              {"error_percent", error_json(d.error_percent())}};
}

std::optional<double> share_percent(int64_t part_ns, int64_t measured_ns) {
  if (measured_ns == 0) return part_ns == 0 ? std::optional<double>(0.0) : std::nullopt;
  return static_cast<double>(part_ns) / static_cast<double>(measured_ns) * kPercent;
}

Json split_json(const IterationSplit& s, double resimulated_bubble_fraction) {
  return Json{
      {"predicted_ns", s.predicted_ns},
      {"resimulated_ns", s.resimulated_ns},
      {"measured_ns", s.measured_ns},
      {"predicted_ms", to_ms(s.predicted_ns)},
      {"resimulated_ms", to_ms(s.resimulated_ns)},
      {"measured_ms", to_ms(s.measured_ns)},
      {"error_ms", to_ms(s.error_ns())},
      {"compute_error_ms", to_ms(s.compute_error_ns())},
      {"schedule_error_ms", to_ms(s.schedule_error_ns())},
      {"error_percent", error_json(share_percent(s.error_ns(), s.measured_ns))},
      {"compute_error_percent", error_json(share_percent(s.compute_error_ns(), s.measured_ns))},
      {"schedule_error_percent", error_json(share_percent(s.schedule_error_ns(), s.measured_ns))},
      {"resimulated_bubble_fraction", resimulated_bubble_fraction}};
}

Json stage_json(const StageComparison& s, size_t stage_idx) {
  Json json{{"stage", stage_idx},
            {"first", s.first},
            {"last", s.last},
            {"checkpoint", s.checkpoint},
            {"memory_terms", to_json(s.memory)},
            {"peak_memory_bytes", difference_json(s.peak_memory_bytes)},
            {"measured_load_ms", s.measured_load_ms},
            {"measured_recv_wait_ms", s.measured_recv_wait_ms}};
  for (const StageTime& entry : kStageTimes) json[entry.key] = difference_json(s.*entry.field);
  if (!s.recompute_layers.empty()) json["recompute_layers"] = s.recompute_layers;
  if (s.predicted_allreduce_total_ms > 0)
    json["predicted_allreduce_total_ms"] = s.predicted_allreduce_total_ms;
  if (!s.chunks.empty()) {  // interleaved-1f1b only
    json["chunks"] = json_array(s.chunks, [](const std::pair<int, int>& chunk) {
      return Json{{"first", chunk.first}, {"last", chunk.second}};
    });
  }
  return json;
}

std::string percent_text(const std::optional<double>& percent) {
  if (!percent) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", *percent);
  return text;
}

void row(std::string* out, const std::string& stage, const std::string& quantity,
         const std::string& predicted, const std::string& measured, const std::string& error) {
  char text[160];
  std::snprintf(text, sizeof text, "%-6s %-24s %12s %12s %9s\n", stage.c_str(), quantity.c_str(),
                predicted.c_str(), measured.c_str(), error.c_str());
  *out += text;
}

void stage_rows(std::string* out, const StageComparison& s, size_t stage_idx) {
  const std::string label = std::to_string(stage_idx);
  std::string layers = detail::concat("[", s.first, ",", s.last, ")");
  if (!s.chunks.empty()) {  // interleaved-1f1b: each chunk's range, "[0,2)+[4,6)"
    layers.clear();
    for (const auto& [first, last] : s.chunks)
      layers += detail::concat(layers.empty() ? "" : "+", "[", first, ",", last, ")");
  }
  if (!s.recompute_layers.empty()) layers += " " + recompute_marker(s.recompute_layers);
  row(out, label, "peak memory " + layers,
      format_size(static_cast<int64_t>(s.peak_memory_bytes.predicted)),
      format_size(static_cast<int64_t>(s.peak_memory_bytes.measured)),
      percent_text(s.peak_memory_bytes.error_percent()));
  for (const StageTime& entry : kStageTimes) {
    const Difference& d = s.*entry.field;
    if (d.predicted == 0 && d.measured == 0) continue;  // e.g. no recompute, no all-reduce
    row(out, "", entry.label, format_fixed(d.predicted, 3), format_fixed(d.measured, 3),
        percent_text(d.error_percent()));
  }
  if (s.predicted_allreduce_total_ms > 0 &&
      s.predicted_allreduce_total_ms != s.allreduce_ms.predicted)  // overlapped: the rest hidden
    row(out, "", "all buckets / iteration",
        format_fixed(s.predicted_allreduce_total_ms, 3), "-", "");
  row(out, "", "load / iteration", "-", format_fixed(s.measured_load_ms, 3), "");
}

// Predicted memory terms per stage: only the terms that are not 0 in every stage.
void memory_block(std::string* out, const Comparison& c) {
  std::vector<std::pair<const char*, int64_t MemoryTerms::*>> columns;
  for (const auto& column : kMemoryColumns)
    for (const StageComparison& stage : c.stages)
      if (stage.memory.*column.second != 0) {
        columns.push_back(column);
        break;
      }
  *out += "\npredicted memory terms (sum = predicted peak) beside the allocator's measured peak\n";
  char cell[64];
  std::string line = "stage ";
  for (const auto& [name, field] : columns) {
    std::snprintf(cell, sizeof cell, " %11s", name);
    line += cell;
  }
  *out += line + "   predicted    measured\n";
  for (size_t stage_idx = 0; stage_idx < c.stages.size(); ++stage_idx) {
    const StageComparison& stage = c.stages[stage_idx];
    std::snprintf(cell, sizeof cell, "%-6zu", stage_idx);
    line = cell;
    for (const auto& [name, field] : columns) {
      std::snprintf(cell, sizeof cell, " %11s", format_size(stage.memory.*field).c_str());
      line += cell;
    }
    std::snprintf(cell, sizeof cell, " %11s %11s\n", format_size(stage.memory.total_bytes).c_str(),
                  format_size(static_cast<int64_t>(stage.peak_memory_bytes.measured)).c_str());
    *out += line + cell;
  }
}

void run_rows(std::string* out, const Comparison& c) {
  *out += "\n";
  // Inference: the iteration is the interval between back-to-back requests.
  row(out, "run", c.mode == PlanMode::kInference ? "interval_ms" : "iteration_ms",
      format_fixed(c.iteration_ms.predicted, 3), format_fixed(c.iteration_ms.measured, 3),
      percent_text(c.iteration_ms.error_percent()));
  row(out, "", "samples/s", format_fixed(c.samples_per_s.predicted, 1),
      format_fixed(c.samples_per_s.measured, 1), percent_text(c.samples_per_s.error_percent()));
  if (c.mode == PlanMode::kInference)  // the interval above; the latency of one request here
    for (const auto& [name, difference] : {std::pair{"latency p50", c.latency_p50_ms},
                                           {"latency p90", c.latency_p90_ms},
                                           {"latency p99", c.latency_p99_ms}})
      row(out, "", name, format_fixed(difference.predicted, 3),
          format_fixed(difference.measured, 3), percent_text(difference.error_percent()));
  // One stage is no pipeline: it has no bubble to compare (its ranks' idle time is listed above).
  if (c.stages.size() == 1) return;
  row(out, "", "bubble", format_fixed(c.bubble_fraction.predicted * kPercent, 1) + "%",
      format_fixed(c.bubble_fraction.measured * kPercent, 1) + "%",
      percent_text(c.bubble_fraction.error_percent()));
}

void split_lines(std::string* out, const IterationSplit& s, double resimulated_bubble_fraction,
                 bool pipelined) {
  const std::string bubble =
      pipelined ? ", bubble " + format_fixed(resimulated_bubble_fraction * kPercent, 1) + "%" : "";
  char text[400];
  std::snprintf(text, sizeof text,
                "\niteration error %+.3f ms (%s) = compute model %+.3f ms (%s)"
                " + schedule, communication and overhead %+.3f ms (%s)\n"
                "  (the plan re-simulated with the measured stage times: %.3f ms%s)\n",
                to_ms(s.error_ns()),
                percent_text(share_percent(s.error_ns(), s.measured_ns)).c_str(),
                to_ms(s.compute_error_ns()),
                percent_text(share_percent(s.compute_error_ns(), s.measured_ns)).c_str(),
                to_ms(s.schedule_error_ns()),
                percent_text(share_percent(s.schedule_error_ns(), s.measured_ns)).c_str(),
                to_ms(s.resimulated_ns), bubble.c_str());
  *out += text;
}

// compare.json's keys for every plan.
Json training_json(const Comparison& c, Json stages) {
  return Json{{"schema", kCompareSchema},
              {"plan", {{"path", c.plan_path}, {"hash", c.plan_hash}}},
              {"run", {{"path", c.run_path}, {"hash", c.run_hash}}},
              {"in_sample", c.in_sample},
              {"configuration", c.configuration},
              {"measured_steps", c.measured_steps},
              {"stages", stages},
              {"iteration_ms", difference_json(c.iteration_ms)},
              {"samples_per_s", difference_json(c.samples_per_s)},
              {"bubble_fraction", difference_json(c.bubble_fraction)},
              {"iteration_split", split_json(c.split, c.resimulated_bubble_fraction)},
              {"resimulated_idle_ms_by_rank", c.resimulated_idle_ms},
              {"step_replay",
               {{"steps", c.replay.steps},
                {"replayed_ms", c.replay.replayed_ms},
                {"measured_ms", c.replay.measured_ms},
                {"replayed_idle_fraction_by_rank", c.replay.replayed_idle_fraction},
                {"measured_idle_fraction_by_rank", c.replay.measured_idle_fraction},
                {"error_percent", error_json(c.replay.error_percent())}}}};
}
}  // namespace

Json to_json(const Comparison& c) {
  Json stages = Json::array();
  for (size_t stage_idx = 0; stage_idx < c.stages.size(); ++stage_idx)
    stages.push_back(stage_json(c.stages[stage_idx], stage_idx));
  Json json = training_json(c, std::move(stages));
  if (c.mode == PlanMode::kInference) {  // optional keys: training's compare.json is unchanged
    json["mode"] = to_string(c.mode);
    json["latency_p50_ms"] = difference_json(c.latency_p50_ms);
    json["latency_p90_ms"] = difference_json(c.latency_p90_ms);
    json["latency_p99_ms"] = difference_json(c.latency_p99_ms);
    json["resimulated_latency_ms"] = c.resimulated_latency_ms;
  }
  return json;
}

std::string to_table(const Comparison& c) {
  std::string out = detail::concat("plan ", c.plan_path, " (", c.configuration, ") against run ",
                                   c.run_path, " (", c.measured_steps, " measured steps)\n");
  if (c.in_sample)
    out +=
        "in-sample: the plan was calibrated from this run, so its errors show the fit, not a "
        "forecast\n";
  out += "error = (predicted - measured) / measured: + over-predicts, - under-predicts\n\n";
  row(&out, "stage", "quantity", "predicted", "measured", "error");
  for (size_t stage_idx = 0; stage_idx < c.stages.size(); ++stage_idx)
    stage_rows(&out, c.stages[stage_idx], stage_idx);
  run_rows(&out, c);
  split_lines(&out, c.split, c.resimulated_bubble_fraction, c.stages.size() > 1);
  if (c.mode == PlanMode::kInference)
    out += detail::concat(
        "  (inference: iteration is the interval between requests; one request "
        "re-simulated with the measured forward times takes ",
        format_fixed(c.resimulated_latency_ms, 3), " ms)\n");
  const std::optional<double> compute_percent =
      share_percent(c.split.compute_error_ns(), c.split.measured_ns);
  if (!c.in_sample && compute_percent && std::abs(*compute_percent) >= kCalibrationHintPercent)
    out += detail::concat(
        "  (the compute model misses by ", percent_text(compute_percent),
        " of the iteration: the profile's layer times are not this run's (another device, load "
        "or minute of a shared host); `pipeplan plan --calibrate ",
        c.run_path, "` with the same profile scales them to this run)\n");
  if (c.replay.steps > 0) {
    out += detail::concat("  (the last ", c.replay.steps,
                          " measured steps replayed, each with its own action times: median ",
                          format_fixed(c.replay.replayed_ms, 3), " ms against ",
                          format_fixed(c.replay.measured_ms, 3), " ms measured, ",
                          percent_text(c.replay.error_percent()),
                          "; idle by rank, replayed/measured:");
    for (size_t rank = 0; rank < c.replay.replayed_idle_fraction.size(); ++rank)
      out += detail::concat(rank == 0 ? " " : ", ",
                            format_fixed(c.replay.replayed_idle_fraction[rank] * kPercent, 1), "/",
                            format_fixed(c.replay.measured_idle_fraction[rank] * kPercent, 1), "%");
    out += ")\n";
  }
  memory_block(&out, c);
  return out;
}

}  // namespace pipeplan
