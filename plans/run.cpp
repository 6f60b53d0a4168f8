// The Run: validation and JSON reading and writing.
#include "plans/run.h"

#include <cmath>
#include <utility>

#include "common/error.h"
#include "common/hash.h"

namespace pipeplan {
namespace {

const std::pair<const char*, double MeasuredTimes::*> kTimeFields[] = {
    {"fwd_ms", &MeasuredTimes::fwd_ms},
    {"bwd_ms", &MeasuredTimes::bwd_ms},
    {"recompute_ms", &MeasuredTimes::recompute_ms},
    {"compute_ms", &MeasuredTimes::compute_ms},
    {"optimizer_ms", &MeasuredTimes::optimizer_ms},
    {"allreduce_ms", &MeasuredTimes::allreduce_ms},
    {"recv_wait_ms", &MeasuredTimes::recv_wait_ms},
    {"load_ms", &MeasuredTimes::load_ms},
    {"busy_ms", &MeasuredTimes::busy_ms},
    {"idle_ms", &MeasuredTimes::idle_ms},
};

const std::pair<const char*, double Measurements::*> kRunTimeFields[] = {
    {"iteration_ms", &Measurements::iteration_ms},
    {"samples_per_s", &Measurements::samples_per_s},
    {"bubble_fraction", &Measurements::bubble_fraction},
    {"allreduce_ms", &Measurements::allreduce_ms},
    {"optimizer_ms", &Measurements::optimizer_ms},
};

}  // namespace

void MeasuredTimes::add(const MeasuredTimes& other, double weight) {
  for (const auto& [key, field] : kTimeFields) this->*field += other.*field * weight;
}

Json to_json(const RankMeasurement& r) {
  Json json{{"rank", r.rank},
            {"stage", r.stage},
            {"replica", r.replica},
            {"device", r.device},
            {"peak_memory_bytes", r.peak_memory_bytes},
            {"cuda_allocator_peak_bytes", r.cuda_allocator_peak_bytes}};
  for (const auto& [key, field] : kTimeFields) json[key] = r.*field;
  json["iteration_ms"] = r.iteration_ms;
  return json;
}

RankMeasurement rank_measurement_from_json(const JsonReader& reader) {
  RankMeasurement r;
  r.rank = static_cast<int>(reader.integer_at_least("rank", 0));
  r.stage = static_cast<int>(reader.integer_at_least("stage", 0));
  r.replica = static_cast<int>(reader.integer_at_least("replica", 0));
  r.device = reader.string("device");
  r.peak_memory_bytes = reader.integer_at_least("peak_memory_bytes", 0);
  r.cuda_allocator_peak_bytes = reader.integer_at_least("cuda_allocator_peak_bytes", 0);
  for (const auto& [key, field] : kTimeFields) r.*field = reader.non_negative(key);
  r.iteration_ms = reader.non_negative("iteration_ms");
  return r;
}

namespace {

Json stage_json(const StageMeasurement& s) {
  Json json{{"peak_memory_bytes", s.peak_memory_bytes}};
  for (const auto& [key, field] : kTimeFields) json[key] = s.*field;
  return json;
}

StageMeasurement stage_from(const JsonReader& reader) {
  StageMeasurement s;
  s.peak_memory_bytes = reader.integer_at_least("peak_memory_bytes", 0);
  for (const auto& [key, field] : kTimeFields) s.*field = reader.non_negative(key);
  return s;
}

Json step_times_json(const StepTimes& step) {
  Json ranks = Json::array();
  for (const RankStepTimes& r : step.ranks)
    ranks.push_back(Json{{"fwd_ms", r.fwd_ms},
                         {"bwd_ms", r.bwd_ms},
                         {"recompute_ms", r.recompute_ms},
                         {"allreduce_ms", r.allreduce_ms},
                         {"optimizer_ms", r.optimizer_ms}});
  return Json{{"step", step.step}, {"iteration_ms", step.iteration_ms}, {"ranks", ranks}};
}

StepTimes step_times_from(const JsonReader& reader) {
  StepTimes step;
  step.step = reader.integer_at_least("step", 1);
  step.iteration_ms = reader.non_negative("iteration_ms");
  for (const JsonReader& r : reader.objects("ranks"))
    step.ranks.push_back({r.non_negatives("fwd_ms"), r.non_negatives("bwd_ms"),
                          r.non_negatives("recompute_ms"), r.non_negative("allreduce_ms"),
                          r.non_negative("optimizer_ms")});
  return step;
}

Json measured_json(const Measurements& m) {
  Json stages = Json::array();
  for (const StageMeasurement& stage : m.stages) stages.push_back(stage_json(stage));
  Json ranks = Json::array();
  for (const RankMeasurement& rank : m.ranks) ranks.push_back(to_json(rank));
  Json timeline = to_json(m.timeline);
  timeline["step"] = m.timeline_step;
  Json step_times = Json::array();
  for (const StepTimes& step : m.step_times) step_times.push_back(step_times_json(step));
  Json json{{"warmup_steps", m.warmup_steps},
            {"measured_steps", m.measured_steps},
            {"stages", stages},
            {"ranks", ranks},
            {"timeline", timeline},
            {"step_times", step_times}};
  for (const auto& [key, field] : kRunTimeFields) json[key] = m.*field;
  return json;
}

Measurements measured_from(const JsonReader& reader) {
  Measurements m;
  for (const auto& [key, field] : kRunTimeFields) m.*field = reader.non_negative(key);
  m.warmup_steps = static_cast<int>(reader.integer_at_least("warmup_steps", 0));
  m.measured_steps = static_cast<int>(reader.integer_at_least("measured_steps", 0));
  for (const JsonReader& stage : reader.objects("stages")) m.stages.push_back(stage_from(stage));
  for (const JsonReader& rank : reader.objects("ranks")) m.ranks.push_back(rank_measurement_from_json(rank));
  const JsonReader timeline = reader.object("timeline");
  m.timeline_step = timeline.integer_at_least("step", 0);
  m.timeline = timeline_from_json(timeline);
  if (reader.has("step_times"))  // optional: absent means no steps to replay
    for (const JsonReader& step : reader.objects("step_times"))
      m.step_times.push_back(step_times_from(step));
  return m;
}

bool finite_non_negative(double value) { return std::isfinite(value) && value >= 0; }

}  // namespace

void Run::validate(std::string_view document) const {
  PIPEPLAN_CHECK(world_size >= 1, document, ": world_size: ", world_size, " must be at least 1");
  PIPEPLAN_CHECK(steps >= 1, document, ": steps: ", steps, " must be at least 1");
  PIPEPLAN_CHECK(resumed_from_step >= 0 && resumed_from_step <= steps, document,
                 ": resumed_from_step: ", resumed_from_step, " is not in [0, steps=", steps, "]");
  PIPEPLAN_CHECK(static_cast<int>(measured.ranks.size()) == world_size, document,
                 ": measured.ranks: ", measured.ranks.size(), " entries for world_size=", world_size);
  for (size_t rank = 0; rank < measured.ranks.size(); ++rank) {
    const RankMeasurement& r = measured.ranks[rank];
    PIPEPLAN_CHECK(r.rank == static_cast<int>(rank), document, ": measured.ranks[", rank,
                   "].rank: ", r.rank, " (expected ", rank, ")");
    for (const auto& [key, field] : kTimeFields)
      PIPEPLAN_CHECK(finite_non_negative(r.*field), document, ": measured.ranks[", rank, "].",
                     key, ": ", r.*field, " is not a finite time >= 0");
    PIPEPLAN_CHECK(finite_non_negative(r.iteration_ms), document, ": measured.ranks[", rank,
                   "].iteration_ms: ", r.iteration_ms, " is not a finite time >= 0");
  }
  for (const auto& [key, field] : kRunTimeFields)
    PIPEPLAN_CHECK(finite_non_negative(measured.*field), document, ": measured.", key, ": ",
                   measured.*field, " is not a finite value >= 0");
  PIPEPLAN_CHECK(measured.bubble_fraction <= 1, document, ": measured.bubble_fraction: ",
                 measured.bubble_fraction, " is not in [0, 1]");
  PIPEPLAN_CHECK(std::isfinite(final_loss), document, ": final_loss: ", final_loss,
                 " is not finite");
  PIPEPLAN_CHECK(measured.timeline.events.empty() ||
                     static_cast<int>(measured.timeline.rank_stages.size()) == world_size,
                 document, ": measured.timeline.rank_stages: ",
                 measured.timeline.rank_stages.size(), " entries for world_size=", world_size);
  for (size_t idx = 0; idx < measured.step_times.size(); ++idx) {
    const StepTimes& step = measured.step_times[idx];
    PIPEPLAN_CHECK(static_cast<int>(step.ranks.size()) == world_size, document,
                   ": measured.step_times[", idx, "].ranks: ", step.ranks.size(),
                   " entries for world_size=", world_size);
    for (size_t rank = 0; rank < step.ranks.size(); ++rank) {
      const RankStepTimes& r = step.ranks[rank];
      PIPEPLAN_CHECK(r.bwd_ms.size() == r.fwd_ms.size() &&
                         (r.recompute_ms.empty() || r.recompute_ms.size() == r.fwd_ms.size()),
                     document, ": measured.step_times[", idx, "].ranks[", rank,
                     "]: ", r.fwd_ms.size(), " forwards, ", r.bwd_ms.size(), " backwards and ",
                     r.recompute_ms.size(),
                     " recomputes (expected as many of each, or none recomputed)");
    }
  }
}

Json to_json(const Run& run) {
  Json accuracy = Json::array();
  for (const EpochAccuracy& a : run.test_accuracy)
    accuracy.push_back(Json{{"epoch", a.epoch}, {"step", a.step}, {"test_accuracy", a.test_accuracy}});
  return Json{{"schema", kRunSchema},
              {"tool_version", run.tool_version},
              {"plan", {{"path", run.plan_path}, {"hash", run.plan_hash}}},
              {"world_size", run.world_size},
              {"data", {{"kind", run.data}, {"dir", run.data_dir}}},
              {"seed", run.seed},
              {"steps", run.steps},
              {"steps_per_epoch", run.steps_per_epoch},
              {"resumed_from_step", run.resumed_from_step},
              {"final_loss", run.final_loss},
              {"test_accuracy", accuracy},
              {"measured", measured_json(run.measured)}};
}

Run run_from_json(const Json& json, const std::string& document) {
  check_schema(json, kRunSchema, document);
  const JsonReader r(json, document);
  Run run;
  run.tool_version = r.string("tool_version");
  const JsonReader plan = r.object("plan");
  run.plan_path = plan.string("path");
  run.plan_hash = plan.string("hash");
  run.world_size = static_cast<int>(r.integer_at_least("world_size", 1));
  const JsonReader data = r.object("data");
  run.data = data.string("kind");
  run.data_dir = data.string("dir");
  run.seed = static_cast<uint64_t>(r.integer_at_least("seed", 0));
  run.steps = r.integer_at_least("steps", 1);
  run.steps_per_epoch = r.integer_at_least("steps_per_epoch", 1);
  run.resumed_from_step = r.integer_at_least("resumed_from_step", 0);
  run.final_loss = r.number("final_loss");
  for (const JsonReader& a : r.objects("test_accuracy"))
    run.test_accuracy.push_back(
        {a.integer_at_least("epoch", 1), a.integer_at_least("step", 0), a.non_negative("test_accuracy")});
  run.measured = measured_from(r.object("measured"));
  run.validate(document);
  return run;
}

Run read_run(const std::string& path) { return run_from_json(read_json_file(path), path); }

void write_run(const std::string& path, const Run& run) { write_json_file(path, to_json(run)); }

std::string run_hash(const Run& run) { return content_hash(to_json(run).dump()); }

}  // namespace pipeplan
