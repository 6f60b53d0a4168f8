// The Run: validation and JSON reading and writing.
#include "plans/run.h"

#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "common/error.h"
#include "common/hash.h"
#include "common/limits.h"
#include "plans/plan.h"

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

// Times written only where they apply (zb-h1's W), read as 0 when absent.
const std::pair<const char*, double MeasuredTimes::*> kOptionalTimeFields[] = {
    {"bwd_weight_ms", &MeasuredTimes::bwd_weight_ms},
    {"allgather_ms", &MeasuredTimes::allgather_ms},
    {"tp_allreduce_ms", &MeasuredTimes::tp_allreduce_ms},
};

void write_optional_times(const MeasuredTimes& t, Json* json) {
  for (const auto& [key, field] : kOptionalTimeFields)
    if (t.*field > 0) (*json)[key] = t.*field;
}

void read_optional_times(const JsonReader& reader, MeasuredTimes* t) {
  for (const auto& [key, field] : kOptionalTimeFields)
    if (reader.has(key)) t->*field = reader.number_in(key, 0, kMaxTimeMs);
}

const std::pair<const char*, double Measurements::*> kRunTimeFields[] = {
    {"iteration_ms", &Measurements::iteration_ms},
    {"samples_per_s", &Measurements::samples_per_s},
    {"bubble_fraction", &Measurements::bubble_fraction},
    {"allreduce_ms", &Measurements::allreduce_ms},
    {"optimizer_ms", &Measurements::optimizer_ms},
};

// Inference runs only: written when measured (above 0), read as 0 when absent.
const std::pair<const char*, double Measurements::*> kLatencyFields[] = {
    {"latency_p50_ms", &Measurements::latency_p50_ms},
    {"latency_p90_ms", &Measurements::latency_p90_ms},
    {"latency_p99_ms", &Measurements::latency_p99_ms},
};

}  // namespace

void MeasuredTimes::add(const MeasuredTimes& other, double weight) {
  for (const auto& [key, field] : kTimeFields) this->*field += other.*field * weight;
  for (const auto& [key, field] : kOptionalTimeFields) this->*field += other.*field * weight;
}

Json to_json(const RankMeasurement& r) {
  Json json{{"rank", r.rank},
            {"stage", r.stage},
            {"replica", r.replica},
            {"device", r.device},
            {"peak_memory_bytes", r.peak_memory_bytes},
            {"cuda_allocator_peak_bytes", r.cuda_allocator_peak_bytes}};
  if (r.tp_rank > 0) json["tp_rank"] = r.tp_rank;  // optional: 0 when absent
  for (const auto& [key, field] : kTimeFields) json[key] = r.*field;
  write_optional_times(r, &json);
  json["iteration_ms"] = r.iteration_ms;
  return json;
}

RankMeasurement rank_measurement_from_json(const JsonReader& reader) {
  RankMeasurement r;
  r.rank = reader.int_in("rank", 0, kMaxDevices - 1);
  r.stage = reader.int_in("stage", 0, kMaxDevices - 1);
  r.replica = reader.int_in("replica", 0, kMaxDevices - 1);
  if (reader.has("tp_rank")) r.tp_rank = reader.int_in("tp_rank", 1, kMaxDevices - 1);
  r.device = reader.string("device");
  r.peak_memory_bytes = reader.byte_count("peak_memory_bytes");
  r.cuda_allocator_peak_bytes = reader.byte_count("cuda_allocator_peak_bytes");
  for (const auto& [key, field] : kTimeFields) r.*field = reader.number_in(key, 0, kMaxIterationMs);
  read_optional_times(reader, &r);
  r.iteration_ms = reader.number_in("iteration_ms", 0, kMaxIterationMs);
  return r;
}

namespace {

Json stage_json(const StageMeasurement& s) {
  Json json{{"peak_memory_bytes", s.peak_memory_bytes}};
  for (const auto& [key, field] : kTimeFields) json[key] = s.*field;
  write_optional_times(s, &json);
  return json;
}

StageMeasurement stage_from(const JsonReader& reader) {
  StageMeasurement s;
  s.peak_memory_bytes = reader.byte_count("peak_memory_bytes");
  for (const auto& [key, field] : kTimeFields) s.*field = reader.number_in(key, 0, kMaxIterationMs);
  read_optional_times(reader, &s);
  return s;
}

Json step_times_json(const StepTimes& step) {
  Json ranks = Json::array();
  for (const RankStepTimes& r : step.ranks) {
    ranks.push_back(Json{{"fwd_ms", r.fwd_ms},
                         {"bwd_ms", r.bwd_ms},
                         {"recompute_ms", r.recompute_ms},
                         {"allreduce_ms", r.allreduce_ms},
                         {"optimizer_ms", r.optimizer_ms}});
    if (!r.bwd_weight_ms.empty()) ranks.back()["bwd_weight_ms"] = r.bwd_weight_ms;
  }
  return Json{{"step", step.step}, {"iteration_ms", step.iteration_ms}, {"ranks", ranks}};
}

StepTimes step_times_from(const JsonReader& reader) {
  StepTimes step;
  step.step = reader.integer_in("step", 1, kMaxSteps);
  step.iteration_ms = reader.number_in("iteration_ms", 0, kMaxIterationMs);
  for (const JsonReader& r : reader.objects("ranks")) {
    step.ranks.push_back({r.times_ms("fwd_ms"), r.times_ms("bwd_ms"), r.times_ms("recompute_ms"),
                          r.time_ms("allreduce_ms"), r.time_ms("optimizer_ms"), {}});
    if (r.has("bwd_weight_ms")) step.ranks.back().bwd_weight_ms = r.times_ms("bwd_weight_ms");
  }
  return step;
}

Json measured_json(const Measurements& m) {
  Json timeline = to_json(m.timeline);
  timeline["step"] = m.timeline_step;
  Json json{{"warmup_steps", m.warmup_steps},
            {"measured_steps", m.measured_steps},
            {"stages", json_array(m.stages, stage_json)},
            {"ranks", json_array(m.ranks, [](const RankMeasurement& r) { return to_json(r); })},
            {"timeline", timeline},
            {"step_times", json_array(m.step_times, step_times_json)}};
  for (const auto& [key, field] : kRunTimeFields) json[key] = m.*field;
  for (const auto& [key, field] : kLatencyFields)
    if (m.*field > 0) json[key] = m.*field;
  return json;
}

Measurements measured_from(const JsonReader& reader) {
  Measurements m;
  for (const auto& [key, field] : kRunTimeFields)
    m.*field = field == &Measurements::samples_per_s   ? reader.non_negative(key)
               : field == &Measurements::bubble_fraction ? reader.number_in(key, 0, 1)
                                                         : reader.number_in(key, 0, kMaxIterationMs);
  for (const auto& [key, field] : kLatencyFields)
    if (reader.has(key)) m.*field = reader.number_in(key, 0, kMaxIterationMs);
  m.warmup_steps = reader.int_in("warmup_steps", 0, std::numeric_limits<int>::max());
  m.measured_steps = reader.int_in("measured_steps", 0, std::numeric_limits<int>::max());
  for (const JsonReader& stage : reader.objects("stages")) m.stages.push_back(stage_from(stage));
  for (const JsonReader& rank : reader.objects("ranks")) m.ranks.push_back(rank_measurement_from_json(rank));
  const JsonReader timeline = reader.object("timeline");
  m.timeline_step = timeline.integer_in("step", 0, kMaxSteps);
  m.timeline = timeline_from_json(timeline);
  if (reader.has("step_times"))  // optional: absent means no steps to replay
    for (const JsonReader& step : reader.objects("step_times"))
      m.step_times.push_back(step_times_from(step));
  return m;
}

bool in_range(double value, double max_value) {
  return std::isfinite(value) && value >= 0 && value <= max_value;
}

// Times of one rank or stage: per micro-batch within kMaxTimeMs, per iteration kMaxIterationMs.
void validate_times(const MeasuredTimes& t, const std::string& where) {
  for (const auto& [key, field] : kTimeFields) {
    const bool per_micro_batch = field == &MeasuredTimes::fwd_ms ||
                                 field == &MeasuredTimes::bwd_ms ||
                                 field == &MeasuredTimes::recompute_ms;
    const double max_ms = per_micro_batch ? kMaxTimeMs : kMaxIterationMs;
    PIPEPLAN_CHECK(in_range(t.*field, max_ms), where, key, ": ", t.*field,
                   ": expected a time in ms in [0, ", max_ms, "]");
  }
}

// The rank list: ranks in order, each on a stage of measured.stages, the stages' replicas
// filling world_size, each (stage, replica) once.
void validate_ranks(const Run& run, std::string_view document) {
  const Measurements& m = run.measured;
  PIPEPLAN_CHECK(static_cast<int>(m.ranks.size()) == run.world_size, document,
                 ": measured.ranks: ", m.ranks.size(), " entries: expected world_size = ",
                 run.world_size);
  const int stages = static_cast<int>(m.stages.size());
  PIPEPLAN_CHECK(stages >= 1 && run.world_size % stages == 0, document, ": measured.stages: ",
                 stages, " entries: expected a divisor of world_size = ", run.world_size);
  const int replicas = run.world_size / stages;
  std::set<std::tuple<int, int, int>> placed;
  for (size_t rank = 0; rank < m.ranks.size(); ++rank) {
    const RankMeasurement& r = m.ranks[rank];
    const std::string where = detail::concat(document, ": measured.ranks[", rank, "].");
    PIPEPLAN_CHECK(r.rank == static_cast<int>(rank), where, "rank: ", r.rank, ": expected ",
                   rank, " (ranks in order)");
    PIPEPLAN_CHECK(r.stage < stages && r.replica < replicas, where, "stage: stage ", r.stage,
                   " of replica ", r.replica, ": expected a stage below ", stages,
                   " and a replica below ", replicas, " (measured.stages, world_size)");
    PIPEPLAN_CHECK(placed.insert({r.stage, r.replica, r.tp_rank}).second, where, "stage: stage ",
                   r.stage, " of replica ", r.replica,
                   r.tp_rank > 0 ? detail::concat(" tp rank ", r.tp_rank) : std::string(),
                   ": expected on one rank only");
    validate_times(r, where);
    PIPEPLAN_CHECK(in_range(r.iteration_ms, kMaxIterationMs), where, "iteration_ms: ",
                   r.iteration_ms, ": expected a time in ms in [0, ", kMaxIterationMs, "]");
  }
  for (size_t stage = 0; stage < m.stages.size(); ++stage)
    validate_times(m.stages[stage], detail::concat(document, ": measured.stages[", stage, "]."));
}

// The run-wide measurements: finite, in range, steps within the run, a timeline of its ranks.
void validate_measurements(const Run& run, std::string_view document) {
  const Measurements& m = run.measured;
  for (const auto& [key, field] : kRunTimeFields) {
    const double max_value =
        field == &Measurements::samples_per_s ? std::numeric_limits<double>::max() : kMaxIterationMs;
    PIPEPLAN_CHECK(in_range(m.*field, max_value), document, ": measured.", key, ": ", m.*field,
                   ": expected a finite value in [0, ", max_value, "]");
  }
  for (const auto& [key, field] : kLatencyFields)
    PIPEPLAN_CHECK(in_range(m.*field, kMaxIterationMs), document, ": measured.", key, ": ",
                   m.*field, ": expected a finite value in [0, ", kMaxIterationMs, "]");
  PIPEPLAN_CHECK(m.latency_p50_ms <= m.latency_p90_ms && m.latency_p90_ms <= m.latency_p99_ms,
                 document, ": measured.latency_p90_ms: ", m.latency_p90_ms,
                 ": expected latency_p50_ms <= latency_p90_ms <= latency_p99_ms (",
                 m.latency_p50_ms, ", ", m.latency_p99_ms, ")");
  PIPEPLAN_CHECK(m.bubble_fraction <= 1, document, ": measured.bubble_fraction: ",
                 m.bubble_fraction, ": expected a fraction in [0, 1]");
  PIPEPLAN_CHECK(int64_t{m.warmup_steps} + m.measured_steps <= run.steps, document,
                 ": measured.measured_steps: ", m.measured_steps, ": expected, with ",
                 m.warmup_steps, " warm-up steps, at most steps = ", run.steps);
  PIPEPLAN_CHECK(m.timeline_step <= run.steps, document, ": measured.timeline.step: ",
                 m.timeline_step, ": expected a step in [0, steps = ", run.steps, "]");
  PIPEPLAN_CHECK(m.timeline.events.empty() ||
                     static_cast<int>(m.timeline.rank_stages.size()) == run.world_size,
                 document, ": measured.timeline.rank_stages: ", m.timeline.rank_stages.size(),
                 " entries: expected world_size = ", run.world_size);
  for (size_t idx = 0; idx < run.test_accuracy.size(); ++idx)
    PIPEPLAN_CHECK(run.test_accuracy[idx].step <= run.steps, document, ": test_accuracy[", idx,
                   "].step: ", run.test_accuracy[idx].step, ": expected a step in [0, steps = ",
                   run.steps, "]");
}

// Whether `ranks`' backwards were split into B and W (zb-h1): its first rank's, which every rank
// of every step must share.
bool splits_backward(const std::vector<StepTimes>& steps) {
  return !steps.empty() && !steps.front().ranks.empty() &&
         !steps.front().ranks.front().bwd_weight_ms.empty();
}

void validate_step_times(const Run& run, std::string_view document) {
  const bool split = splits_backward(run.measured.step_times);
  for (size_t idx = 0; idx < run.measured.step_times.size(); ++idx) {
    const StepTimes& step = run.measured.step_times[idx];
    const std::string where = detail::concat(document, ": measured.step_times[", idx, "]");
    PIPEPLAN_CHECK(step.step >= 1 && step.step <= run.steps, where, ".step: ", step.step,
                   ": expected a step in [1, steps = ", run.steps, "]");
    PIPEPLAN_CHECK(static_cast<int>(step.ranks.size()) == run.world_size, where, ".ranks: ",
                   step.ranks.size(), " entries: expected world_size = ", run.world_size);
    for (size_t rank = 0; rank < step.ranks.size(); ++rank) {
      const RankStepTimes& r = step.ranks[rank];
      const size_t micro_batches = step.ranks.front().fwd_ms.size();
      // interleaved-1f1b: V entries per micro-batch (RankStepTimes).
      PIPEPLAN_CHECK(r.fwd_ms.size() == micro_batches &&
                         micro_batches <= size_t{kMaxVirtualStages} * kMaxMicroBatches &&
                         r.bwd_ms.size() == micro_batches &&
                         (r.recompute_ms.empty() || r.recompute_ms.size() == micro_batches) &&
                         (r.bwd_weight_ms.empty() || r.bwd_weight_ms.size() == micro_batches),
                     where, ".ranks[", rank, "]: ", r.fwd_ms.size(), " forwards, ",
                     r.bwd_ms.size(), " backwards and ", r.recompute_ms.size(),
                     " recomputes (", r.bwd_weight_ms.size(), " Ws): expected ", micro_batches,
                     " of each (every rank runs every micro-batch of each chunk, at most ",
                     kMaxVirtualStages * kMaxMicroBatches,
                     "), or none recomputed (or none split into B and W)");
      PIPEPLAN_CHECK(r.bwd_weight_ms.empty() != split, where, ".ranks[", rank, "].bwd_weight_ms: ",
                     r.bwd_weight_ms.size(), " Ws: expected ", split ? micro_batches : 0,
                     " as measured.step_times[0].ranks[0] (every rank of a zb-h1 run splits "
                     "its backwards into B and W, no rank of another run does)");
    }
  }
}

}  // namespace

void Run::validate(std::string_view document) const {
  PIPEPLAN_CHECK(world_size >= 1 && world_size <= kMaxDevices, document, ": world_size: ",
                 world_size, ": expected an integer in [1, ", kMaxDevices, "]");
  PIPEPLAN_CHECK(steps >= 1 && steps <= kMaxSteps, document, ": steps: ", steps,
                 ": expected an integer in [1, ", kMaxSteps, "]");
  PIPEPLAN_CHECK(resumed_from_step >= 0 && resumed_from_step <= steps, document,
                 ": resumed_from_step: ", resumed_from_step, ": expected a step in [0, steps = ",
                 steps, "]");
  PIPEPLAN_CHECK(is_data_kind(data), document, ": data.kind: ", quote(data), ": expected ",
                 kDataKinds);
  PIPEPLAN_CHECK(std::isfinite(final_loss), document, ": final_loss: ", final_loss,
                 ": expected a finite loss");
  validate_ranks(*this, document);
  validate_measurements(*this, document);
  validate_step_times(*this, document);
}

Json to_json(const std::vector<EpochAccuracy>& test_accuracy) {
  return json_array(test_accuracy, [](const EpochAccuracy& a) {
    return Json{{"epoch", a.epoch}, {"step", a.step}, {"test_accuracy", a.test_accuracy}};
  });
}

Json to_json(const Run& run) {
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
              {"test_accuracy", to_json(run.test_accuracy)},
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
  run.world_size = r.int_in("world_size", 1, kMaxDevices);
  const JsonReader data = r.object("data");
  run.data = data.string("kind");
  run.data_dir = data.string("dir");
  run.seed = static_cast<uint64_t>(r.integer_at_least("seed", 0));
  run.steps = r.integer_in("steps", 1, kMaxSteps);
  run.steps_per_epoch = r.integer_in("steps_per_epoch", 1, kMaxSteps);
  run.resumed_from_step = r.integer_in("resumed_from_step", 0, kMaxSteps);
  run.final_loss = r.number("final_loss");
  for (const JsonReader& a : r.objects("test_accuracy"))
    run.test_accuracy.push_back({a.integer_in("epoch", 1, kMaxSteps),
                                 a.integer_in("step", 0, kMaxSteps),
                                 a.number_in("test_accuracy", 0, 1)});
  run.measured = measured_from(r.object("measured"));
  run.validate(document);
  return run;
}

bool is_data_kind(std::string_view data) {
  return data == "fashion-mnist" || data == "cifar10" || data == "synthetic";
}

Run read_run(const std::string& path) { return run_from_json(read_json_file(path), path); }

void check_step_times_of_plan(const Plan& plan, const Run& run, const std::string& run_path) {
  const bool zero_bubble = plan.schedule == Schedule::kZeroBubbleH1;
  const std::vector<StepTimes>& steps = run.measured.step_times;
  PIPEPLAN_CHECK(steps.empty() || splits_backward(steps) == zero_bubble, run_path,
                 ": measured.step_times[0].ranks[0].bwd_weight_ms: ",
                 steps.empty() || steps.front().ranks.empty()
                     ? 0
                     : steps.front().ranks.front().bwd_weight_ms.size(),
                 " Ws: expected ", zero_bubble ? "one per backward" : "none",
                 " for a plan of schedule ", to_string(plan.schedule),
                 " (compare a run with the plan it ran)");
}

void write_run(const std::string& path, const Run& run) { write_json_file(path, to_json(run)); }

std::string run_hash(const Run& run) { return content_hash(to_json(run).dump()); }

}  // namespace pipeplan
