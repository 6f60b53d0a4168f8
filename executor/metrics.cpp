// What a rank measures: timed actions, per-step world sums, the run's summary, the trace.
#include "executor/metrics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/stats.h"
#include "common/units.h"
#include "executor/comm.h"

namespace pipeplan::executor {
namespace {

// The median of `values`; 0 for none (a quantity no step measured).
double median_or_zero(std::vector<double> values) {
  return values.empty() ? 0 : median(std::move(values));
}

// The mean of `field` over `steps`; 0 for none.
template <typename Field>
double mean_of(const std::deque<StepTiming>& steps, Field field) {
  double total = 0;
  for (const StepTiming& step : steps) total += step.*field;
  return steps.empty() ? 0 : total / static_cast<double>(steps.size());
}

template <typename Field>
double median_of(const std::deque<StepTiming>& steps, Field field) {
  std::vector<double> values;
  values.reserve(steps.size());
  for (const StepTiming& step : steps) values.push_back(step.*field);
  return median_or_zero(std::move(values));
}

// The step of a steps log line ({"step": N, ...}), or nullopt for any other line.
std::optional<int64_t> step_of_log_line(std::string_view line) {
  const Json record = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  const auto found = record.is_object() ? record.find("step") : record.end();
  if (found == record.end() || !found->is_number_integer()) return std::nullopt;
  return found->get<int64_t>();
}

}  // namespace

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
  ++steps_begun_;
  current_ = StepTiming();
  fwd_total_ = bwd_total_ = recompute_total_ = bwd_weight_total_ = MicroBatchTotal();
  current_events_ = StepEvents();
  current_events_.step = step;
  current_events_.start_ms = now_ms();
}

void Recorder::record(TimelineKind kind, int micro_batch, double start_ms, double end_ms, int peer,
                      int chunk) {
  const double ms = end_ms - start_ms;
  switch (kind) {
    case TimelineKind::kForward:
      fwd_total_.add(ms, chunk);
      current_.compute_ms += ms;
      break;
    case TimelineKind::kBackward:
    case TimelineKind::kBackwardInput:
      bwd_total_.add(ms, chunk);
      current_.compute_ms += ms;
      break;
    case TimelineKind::kBackwardWeight:
      bwd_weight_total_.add(ms, chunk);
      current_.compute_ms += ms;
      break;
    case TimelineKind::kRecompute:
      recompute_total_.add(ms, chunk);
      current_.compute_ms += ms;
      break;
    case TimelineKind::kOptimizer: current_.optimizer_ms += ms; break;
    case TimelineKind::kAllReduce: current_.allreduce_ms += ms; break;
    case TimelineKind::kAllGather:
      current_.allgather_ms += ms;
      break;
    case TimelineKind::kRecvWait: current_.recv_wait_ms += ms; break;
    case TimelineKind::kLoad: current_.load_ms += ms; break;
    case TimelineKind::kSend:
    case TimelineKind::kSendWait: break;
  }
  if (measuring())
    current_events_.events.push_back({rank_, kind, micro_batch, start_ms, end_ms, peer, chunk});
}

StepTiming Recorder::end_step() {
  const double end_ms = now_ms();
  current_.iteration_ms = end_ms - current_events_.start_ms;
  current_.busy_ms =
      current_.compute_ms + current_.allreduce_ms + current_.optimizer_ms + current_.allgather_ms;
  current_.fwd_ms = fwd_total_.mean_ms();
  current_.bwd_ms = bwd_total_.mean_ms();
  current_.recompute_ms = recompute_total_.mean_ms();
  current_.bwd_weight_ms = bwd_weight_total_.mean_ms();
  if (measuring()) {
    steps_.push_back(current_);
    if (static_cast<int>(steps_.size()) > kMaxMeasuredSteps) steps_.pop_front();
    current_events_.end_ms = end_ms;
    kept_.push_back(std::move(current_events_));
    if (static_cast<int>(kept_.size()) > kMaxKeptSteps) kept_.pop_front();
  }
  current_events_ = StepEvents();
  return current_;
}

RankMeasurement Recorder::summarize(const RankAssignment& assignment) const {
  RankMeasurement m;
  m.rank = assignment.rank;
  m.stage = assignment.stage;
  m.replica = assignment.replica;
  m.tp_rank = assignment.tp_rank;
  m.device = assignment.device;
  // Means, not medians: a stage pays for its slow actions too (on a shared CPU a few take
  // several times the typical time), and the simulator needs what an action costs on average.
  m.fwd_ms = mean_of(steps_, &StepTiming::fwd_ms);
  m.bwd_ms = mean_of(steps_, &StepTiming::bwd_ms);
  m.recompute_ms = mean_of(steps_, &StepTiming::recompute_ms);
  m.bwd_weight_ms = mean_of(steps_, &StepTiming::bwd_weight_ms);
  m.compute_ms = mean_of(steps_, &StepTiming::compute_ms);
  m.optimizer_ms = mean_of(steps_, &StepTiming::optimizer_ms);
  m.allreduce_ms = mean_of(steps_, &StepTiming::allreduce_ms);
  m.allgather_ms = mean_of(steps_, &StepTiming::allgather_ms);
  m.tp_allreduce_ms = mean_of(steps_, &StepTiming::tp_allreduce_ms);
  m.recv_wait_ms = mean_of(steps_, &StepTiming::recv_wait_ms);
  m.load_ms = mean_of(steps_, &StepTiming::load_ms);
  m.busy_ms = mean_of(steps_, &StepTiming::busy_ms);
  m.iteration_ms = median_of(steps_, &StepTiming::iteration_ms);
  return m;
}

int64_t representative_step(const std::vector<std::pair<int64_t, double>>& slowest_iteration_ms,
                            const std::vector<int64_t>& kept_steps) {
  std::vector<std::pair<double, int64_t>> candidates;  // (ms, step): ties go to the earlier step
  for (const auto& [step, ms] : slowest_iteration_ms)
    if (std::find(kept_steps.begin(), kept_steps.end(), step) != kept_steps.end())
      candidates.push_back({ms, step});
  if (candidates.empty()) return 0;
  const size_t lower_median = (candidates.size() - 1) / 2;
  std::nth_element(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(lower_median),
                   candidates.end());
  return candidates[lower_median].second;
}

Timeline measured_timeline(const Plan& plan, const std::vector<std::vector<StepEvents>>& ranks,
                           const std::string& title) {
  Timeline timeline;
  timeline.title = title;
  for (const RankAssignment& assignment : plan.ranks) timeline.rank_stages.push_back(assignment.stage);
  double origin_ms = std::numeric_limits<double>::infinity();
  for (const std::vector<StepEvents>& steps : ranks)
    for (const StepEvents& step : steps) origin_ms = std::min(origin_ms, step.start_ms);
  if (!std::isfinite(origin_ms)) return timeline;
  std::vector<double> busy_ms(plan.ranks.size(), 0);
  for (const std::vector<StepEvents>& steps : ranks)
    for (const StepEvents& step : steps) {
      timeline.iteration_ms = std::max(timeline.iteration_ms, step.end_ms - origin_ms);
      for (TimelineEvent event : step.events) {
        event.start_ms -= origin_ms;
        event.end_ms -= origin_ms;
        if (is_busy(event.kind)) busy_ms.at(static_cast<size_t>(event.rank)) += event.end_ms - event.start_ms;
        timeline.events.push_back(event);
      }
    }
  double idle_ms = 0;
  for (double busy : busy_ms) idle_ms += std::max(0.0, timeline.iteration_ms - busy);
  if (timeline.iteration_ms > 0)
    timeline.bubble_fraction =
        std::min(1.0, idle_ms / (timeline.iteration_ms * static_cast<double>(busy_ms.size())));
  return timeline;
}

namespace {

// One rank's compute in `step`, action by action (index chunk · num_micro_batches + micro-batch).
RankStepTimes action_times(const StepEvents& step, int num_micro_batches) {
  RankStepTimes times;
  for (const TimelineEvent& event : step.events) {
    const double ms = event.end_ms - event.start_ms;
    std::vector<double>* per_micro_batch = nullptr;
    switch (event.kind) {
      case TimelineKind::kForward:
        per_micro_batch = &times.fwd_ms;
        break;
      case TimelineKind::kBackward:
      case TimelineKind::kBackwardInput:
        per_micro_batch = &times.bwd_ms;
        break;
      case TimelineKind::kBackwardWeight:
        per_micro_batch = &times.bwd_weight_ms;
        break;
      case TimelineKind::kRecompute:
        per_micro_batch = &times.recompute_ms;
        break;
      case TimelineKind::kAllReduce:
        times.allreduce_ms += ms;
        break;
      case TimelineKind::kOptimizer:
        times.optimizer_ms += ms;
        break;
      default:
        break;
    }
    if (per_micro_batch == nullptr) continue;
    PIPEPLAN_ASSERT(event.chunk == 0 || event.micro_batch < num_micro_batches, "event of chunk ",
                    event.chunk, " without the number of micro-batches");
    const size_t mb = static_cast<size_t>(event.chunk * num_micro_batches + event.micro_batch);
    if (per_micro_batch->size() <= mb) per_micro_batch->resize(mb + 1, 0);
    (*per_micro_batch)[mb] += ms;
  }
  return times;
}

}  // namespace

std::vector<StepTimes> step_times(
    const std::vector<std::vector<StepEvents>>& ranks,
    const std::vector<std::pair<int64_t, double>>& slowest_iteration_ms, size_t max_steps,
    int num_micro_batches) {
  std::vector<StepTimes> out;
  for (auto it = slowest_iteration_ms.rbegin();
       it != slowest_iteration_ms.rend() && out.size() < max_steps; ++it) {
    StepTimes step{it->first, it->second, {}};
    for (const std::vector<StepEvents>& reported : ranks) {
      const auto found = std::find_if(reported.begin(), reported.end(),
                                      [&](const StepEvents& s) { return s.step == step.step; });
      if (found == reported.end()) break;
      step.ranks.push_back(action_times(*found, num_micro_batches));
    }
    if (step.ranks.size() == ranks.size()) out.push_back(std::move(step));
  }
  std::reverse(out.begin(), out.end());
  return out;
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
  const size_t window =
      std::min(slowest_iteration_ms.size(), static_cast<size_t>(Recorder::kMaxMeasuredSteps));
  m.iteration_ms = median_or_zero(
      std::vector<double>(slowest_iteration_ms.end() - static_cast<std::ptrdiff_t>(window),
                          slowest_iteration_ms.end()));
  m.samples_per_s = samples_per_s(plan.global_batch, m.iteration_ms);
  m.stages.resize(static_cast<size_t>(plan.pp));
  double idle_total_ms = 0;
  for (RankMeasurement& r : ranks) {
    r.idle_ms = std::max(0.0, m.iteration_ms - r.busy_ms);
    idle_total_ms += r.idle_ms;
    m.allreduce_ms += r.allreduce_ms / static_cast<double>(ranks.size());
    m.optimizer_ms += r.optimizer_ms / static_cast<double>(ranks.size());
    StageMeasurement& s = m.stages.at(static_cast<size_t>(r.stage));
    s.add(r, 1.0 / (plan.dp * plan.tp()));  // the mean over the stage's ranks
    s.peak_memory_bytes = std::max(s.peak_memory_bytes, r.peak_memory_bytes);
  }
  // One stage is no pipeline: its idle time (waiting at the all-reduce) is no bubble, as in the
  // planner's predictions.
  if (m.iteration_ms > 0 && plan.pp > 1)
    m.bubble_fraction = std::min(1.0, idle_total_ms / (m.iteration_ms * static_cast<double>(ranks.size())));
  m.ranks = std::move(ranks);
  return m;
}

Json rank_report_json(const RankMeasurement& measurement, const std::vector<StepEvents>& steps) {
  Json rows = Json::array();
  for (const StepEvents& step : steps) {
    Json events = Json::array();
    for (const TimelineEvent& e : step.events) {
      Json event = Json::array({to_string(e.kind), e.micro_batch, e.start_ms, e.end_ms, e.peer});
      if (e.chunk != 0) event.push_back(e.chunk);  // interleaved-1f1b only
      events.push_back(std::move(event));
    }
    rows.push_back(Json{{"step", step.step}, {"start_ms", step.start_ms}, {"end_ms", step.end_ms},
                        {"events", events}});
  }
  return Json{{"measurement", to_json(measurement)}, {"steps", rows}};
}

void truncate_log_after(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  const std::string text = read_file_bytes(path, kMaxLogFileBytes);
  std::string kept;
  int64_t dropped = 0;
  int64_t first_dropped_line = 0;
  int64_t line_idx = 0;
  for (size_t start = 0; start < text.size(); ++line_idx) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    const std::optional<int64_t> line_step = step_of_log_line(line);
    if (!line_step && dropped++ == 0) first_dropped_line = line_idx + 1;
    if (line_step && *line_step <= step) kept.append(line).append("\n");
  }
  if (dropped > 0)
    log_warning(detail::concat("--log ", quote(path), ": dropped ", dropped,
                               dropped == 1 ? " line that is" : " lines that are",
                               " no step record (the first: line ", first_dropped_line, ")"));
  write_file_atomic(path, kept);
}

void parse_rank_report(const Json& json, RankMeasurement* measurement,
                       std::vector<StepEvents>* steps) {
  *measurement = rank_measurement_from_json(JsonReader(json.at("measurement"), "rank report"));
  for (const Json& row : json.at("steps")) {
    StepEvents step{row.at("step").get<int64_t>(), row.at("start_ms").get<double>(),
                    row.at("end_ms").get<double>(), {}};
    for (const Json& e : row.at("events"))
      step.events.push_back({measurement->rank,
                             parse_timeline_kind(e.at(0).get<std::string>(), "rank report"),
                             e.at(1).get<int>(), e.at(2).get<double>(), e.at(3).get<double>(),
                             e.at(4).get<int>(), e.size() > 5 ? e.at(5).get<int>() : 0});
    steps->push_back(std::move(step));
  }
}

}  // namespace pipeplan::executor
