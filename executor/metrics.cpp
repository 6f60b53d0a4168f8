// What a rank measures: timed actions, per-step world sums, the run's summary, the trace.
#include "executor/metrics.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/error.h"
#include "executor/comm.h"

namespace pipeplan::executor {
namespace {

constexpr double kMsToUs = 1000.0;

const EventKind kAllEventKinds[] = {EventKind::kLoad,      EventKind::kForward,
                                    EventKind::kBackward,  EventKind::kRecompute,
                                    EventKind::kSend,      EventKind::kRecvWait,
                                    EventKind::kSendWait,  EventKind::kAllReduce,
                                    EventKind::kOptimizer};

// Median of `values` (copied: nth_element reorders); 0 for none.
double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle), values.end());
  double result = values[middle];
  if (values.size() % 2 == 0) {
    result = (result + *std::max_element(values.begin(), values.begin() +
                                                               static_cast<std::ptrdiff_t>(middle))) / 2;
  }
  return result;
}

// Keeps at most the last `limit` entries, trimming in halves so that pushes stay amortised O(1).
template <typename T>
void push_bounded(std::vector<T>* values, T value, size_t limit) {
  values->push_back(value);
  if (values->size() >= 2 * limit)
    values->erase(values->begin(), values->begin() + static_cast<std::ptrdiff_t>(values->size() - limit));
}

template <typename Field>
double median_of(const std::vector<StepTiming>& steps, Field field) {
  std::vector<double> values;
  values.reserve(steps.size());
  for (const StepTiming& step : steps) values.push_back(step.*field);
  return median(std::move(values));
}

EventKind event_kind_from(const std::string& word) {
  for (EventKind kind : kAllEventKinds)
    if (word == to_string(kind)) return kind;
  PIPEPLAN_ASSERT(false, "unknown event kind ", word);
}

}  // namespace

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::kLoad: return "load";
    case EventKind::kForward: return "forward";
    case EventKind::kBackward: return "backward";
    case EventKind::kRecompute: return "recompute";
    case EventKind::kSend: return "send";
    case EventKind::kRecvWait: return "recv-wait";
    case EventKind::kSendWait: return "send-wait";
    case EventKind::kAllReduce: return "all-reduce";
    case EventKind::kOptimizer: return "optimizer";
  }
  return "?";
}

// The one place the trace format lives: switch it to plans/timeline's writer at merge.
void write_chrome_trace(const std::string& path, const std::vector<ActionEvent>& events,
                        const Plan& plan) {
  Json trace_events = Json::array();
  for (const RankAssignment& a : plan.ranks) {
    const std::string name = detail::concat("rank ", a.rank, ": stage ", a.stage, ", replica ", a.replica);
    trace_events.push_back(Json{{"name", "process_name"}, {"ph", "M"}, {"pid", a.rank},
                                {"tid", 0}, {"args", {{"name", name}}}});
    trace_events.push_back(Json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", a.rank},
                                {"tid", 0}, {"args", {{"sort_index", a.rank}}}});
  }
  for (const ActionEvent& e : events) {
    std::string name = to_string(e.kind);
    if (e.micro_batch >= 0) name += " " + std::to_string(e.micro_batch);
    trace_events.push_back(Json{{"name", name},
                                {"cat", to_string(e.kind)},
                                {"ph", "X"},
                                {"ts", e.start_ms * kMsToUs},
                                {"dur", (e.end_ms - e.start_ms) * kMsToUs},
                                {"pid", e.rank},
                                {"tid", 0},
                                {"args", {{"step", e.step}, {"micro_batch", e.micro_batch}}}});
  }
  write_json_file(path, Json{{"traceEvents", trace_events}, {"displayTimeUnit", "ms"}});
}

Recorder::Recorder(int rank, int warmup_steps) : rank_(rank), warmup_steps_(warmup_steps) {
  reset_origin();
}

void Recorder::reset_origin() {
  origin_ms_ = std::chrono::duration<double, std::milli>(
                   std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Recorder::now_ms() const {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch()).count() - origin_ms_;
}

void Recorder::begin_step(int64_t step) {
  step_ = step;
  ++steps_begun_;
  current_ = StepTiming();
  step_start_ms_ = now_ms();
}

void Recorder::record(EventKind kind, int micro_batch, double start_ms, double end_ms) {
  const double ms = end_ms - start_ms;
  const bool measured = measuring();
  switch (kind) {
    case EventKind::kForward:
      current_.compute_ms += ms;
      if (measured) push_bounded(&fwd_ms_, ms, kMaxMeasuredSteps * 64);
      break;
    case EventKind::kBackward:
      current_.compute_ms += ms;
      if (measured) push_bounded(&bwd_ms_, ms, kMaxMeasuredSteps * 64);
      break;
    case EventKind::kRecompute:
      current_.compute_ms += ms;
      if (measured) push_bounded(&recompute_ms_, ms, kMaxMeasuredSteps * 64);
      break;
    case EventKind::kOptimizer: current_.optimizer_ms += ms; break;
    case EventKind::kAllReduce: current_.allreduce_ms += ms; break;
    case EventKind::kRecvWait: current_.recv_wait_ms += ms; break;
    case EventKind::kLoad: current_.busy_ms += ms; break;
    case EventKind::kSend:
    case EventKind::kSendWait: break;
  }
  if (measured && traced_steps_ < kMaxTraceSteps)
    events_.push_back(ActionEvent{rank_, kind, micro_batch, step_, start_ms, end_ms});
}

StepTiming Recorder::end_step() {
  current_.iteration_ms = now_ms() - step_start_ms_;
  current_.busy_ms += current_.compute_ms + current_.optimizer_ms;
  if (measuring()) {
    push_bounded(&steps_, current_, kMaxMeasuredSteps);
    ++traced_steps_;
  }
  return current_;
}

RankMeasurement Recorder::summarize(const RankAssignment& assignment) const {
  RankMeasurement m;
  m.rank = assignment.rank;
  m.stage = assignment.stage;
  m.replica = assignment.replica;
  m.device = assignment.device;
  m.fwd_ms = median(fwd_ms_);
  m.bwd_ms = median(bwd_ms_);
  m.recompute_ms = median(recompute_ms_);
  m.compute_ms = median_of(steps_, &StepTiming::compute_ms);
  m.optimizer_ms = median_of(steps_, &StepTiming::optimizer_ms);
  m.allreduce_ms = median_of(steps_, &StepTiming::allreduce_ms);
  m.recv_wait_ms = median_of(steps_, &StepTiming::recv_wait_ms);
  m.busy_ms = median_of(steps_, &StepTiming::busy_ms);
  m.iteration_ms = median_of(steps_, &StepTiming::iteration_ms);
  m.idle_ms = std::max(0.0, m.iteration_ms - m.busy_ms);
  return m;
}

StepReducer::StepReducer(Comm& comm, const Plan& plan) : comm_(comm), plan_(plan) {
  const int64_t world = static_cast<int64_t>(plan.ranks.size());
  values_ = torch::zeros({1 + 3 * world}, torch::kFloat64);
}

std::optional<StepReport> StepReducer::push(const StepValues& values) {
  std::optional<StepReport> previous = flush();
  const int64_t world = static_cast<int64_t>(plan_.ranks.size());
  const int64_t rank = comm_.rank();
  values_.zero_();
  double* data = values_.data_ptr<double>();
  data[0] = values.loss_sum;
  data[1 + rank] = values.iteration_ms;
  data[1 + world + rank] = values.loss_finite ? 0 : 1;
  data[1 + 2 * world + rank] = values.gradients_finite ? 0 : 1;
  pending_step_ = values.step;
  comm_.start_world_sum(values_);
  return previous;
}

std::optional<StepReport> StepReducer::flush() {
  if (pending_step_ == 0) return std::nullopt;
  comm_.finish_world_sum();
  return finish();
}

// Reads the finished sum. A NaN shows first in the loss (last stage); a gradient-only NaN is
// reported on the highest stage that has it, where the backward met it first.
StepReport StepReducer::finish() {
  const int world = static_cast<int>(plan_.ranks.size());
  const double* data = values_.data_ptr<double>();
  const int64_t step = pending_step_;
  pending_step_ = 0;
  int bad_rank = -1;
  const char* what = "the loss is";
  for (int rank = 0; rank < world && bad_rank < 0; ++rank)
    if (data[1 + world + rank] > 0) bad_rank = rank;
  if (bad_rank < 0) {
    what = "the gradients hold";
    for (int rank = 0; rank < world; ++rank)
      if (data[1 + 2 * world + rank] > 0 &&
          (bad_rank < 0 || plan_.ranks[rank].stage > plan_.ranks[bad_rank].stage))
        bad_rank = rank;
  }
  if (bad_rank >= 0) {
    const RankAssignment& a = plan_.ranks[bad_rank];
    throw Error(ErrorKind::kRuntime,
                detail::concat("step ", step, ": ", what, " NaN or Inf on stage ", a.stage,
                               " (rank ", a.rank, ", replica ", a.replica,
                               "); lower optimizer.base_lr in the plan or check the data"));
  }
  StepReport report;
  report.step = step;
  report.loss = data[0] / static_cast<double>(plan_.dp * plan_.num_micro_batches);
  for (int rank = 0; rank < world; ++rank)
    report.slowest_iteration_ms = std::max(report.slowest_iteration_ms, data[1 + rank]);
  return report;
}

Measurements combine_measurements(const Plan& plan, std::vector<RankMeasurement> ranks,
                                  const std::vector<double>& slowest_iteration_ms,
                                  int warmup_steps) {
  Measurements m;
  m.warmup_steps = warmup_steps;
  m.measured_steps = static_cast<int>(slowest_iteration_ms.size());
  m.iteration_ms = median(slowest_iteration_ms);
  m.samples_per_s = m.iteration_ms > 0 ? static_cast<double>(plan.global_batch) * 1000.0 / m.iteration_ms : 0;
  m.stages.resize(static_cast<size_t>(plan.pp));
  double idle_total_ms = 0;
  for (RankMeasurement& r : ranks) {
    r.idle_ms = std::max(0.0, m.iteration_ms - r.busy_ms);
    idle_total_ms += r.idle_ms;
    m.allreduce_ms += r.allreduce_ms / static_cast<double>(ranks.size());
    m.optimizer_ms += r.optimizer_ms / static_cast<double>(ranks.size());
    StageMeasurement& s = m.stages.at(static_cast<size_t>(r.stage));
    const double share = 1.0 / plan.dp;
    s.fwd_ms += r.fwd_ms * share;
    s.bwd_ms += r.bwd_ms * share;
    s.recompute_ms += r.recompute_ms * share;
    s.compute_ms += r.compute_ms * share;
    s.busy_ms += r.busy_ms * share;
    s.idle_ms += r.idle_ms * share;
    s.peak_memory_bytes = std::max(s.peak_memory_bytes, r.peak_memory_bytes);
  }
  if (m.iteration_ms > 0)
    m.bubble_fraction = std::min(1.0, idle_total_ms / (m.iteration_ms * static_cast<double>(ranks.size())));
  m.ranks = std::move(ranks);
  return m;
}

Json rank_report_json(const RankMeasurement& measurement, const std::vector<ActionEvent>& events) {
  Json rows = Json::array();
  for (const ActionEvent& e : events)
    rows.push_back(Json::array({to_string(e.kind), e.micro_batch, e.step, e.start_ms, e.end_ms}));
  return Json{{"measurement", to_json(measurement)}, {"events", rows}};
}

void parse_rank_report(const Json& json, RankMeasurement* measurement,
                       std::vector<ActionEvent>* events) {
  *measurement = rank_measurement_from_json(JsonReader(json.at("measurement"), "rank report"));
  for (const Json& row : json.at("events"))
    events->push_back(ActionEvent{measurement->rank, event_kind_from(row.at(0).get<std::string>()),
                                  row.at(1).get<int>(), row.at(2).get<int64_t>(),
                                  row.at(3).get<double>(), row.at(4).get<double>()});
}

}  // namespace pipeplan::executor
