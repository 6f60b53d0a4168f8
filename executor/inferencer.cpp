// `pipeplan infer` for one rank: weights, the request stream through the interpreter, run.json.
#include "executor/inferencer.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>

#include "common/error.h"
#include "common/log.h"
#include "common/stats.h"
#include "common/version.h"
#include "executor/checkpoint.h"
#include "executor/rank_session.h"
#include "plans/run.h"
#include "plans/schedule.h"

namespace pipeplan::executor {
namespace {

// Requests whose last-stage outputs --save-outputs keeps.
constexpr int64_t kSavedOutputRequests = 4;

// ms of q-quantile (linear interpolation), 0 for none.
double quantile_or_zero(const std::vector<double>& values, double fraction) {
  return values.empty() ? 0 : quantile(values, fraction);
}

// The flags only serving has, checked before the plan is read.
const InferOptions& checked(const InferOptions& options) {
  PIPEPLAN_CHECK(options.requests >= 1 && options.requests <= kMaxInferRequests,
                 "--requests: ", options.requests, " is out of range; give 1 to ",
                 kMaxInferRequests);
  PIPEPLAN_CHECK(options.warmup_requests >= 0 && options.warmup_requests < options.requests,
                 "--warmup: ", options.warmup_requests,
                 " leaves no request measured of --requests ", options.requests,
                 "; give fewer warm-up requests or more requests");
  return options;
}

// Each measured request's latency, from stage 0's earliest start over the replicas (the ranks'
// "request_start_ms" in `reports`) to the last stage's latest end, and the intervals between
// consecutive ends (one measured request alone: its latency).
std::pair<std::vector<double>, std::vector<double>> latency_and_interval_ms(
    const Plan& plan, const std::vector<Json>& reports, size_t requests, size_t warmup) {
  std::vector<double> start_ms(requests, std::numeric_limits<double>::infinity());
  std::vector<double> end_ms(requests, 0);
  for (size_t rank = 0; rank < reports.size(); ++rank) {
    const int stage = plan.ranks[rank].stage;
    for (size_t request = 0; request < requests; ++request) {
      if (stage == 0)
        start_ms[request] =
            std::min(start_ms[request], reports[rank]["request_start_ms"][request].get<double>());
      if (stage == plan.pp - 1)
        end_ms[request] =
            std::max(end_ms[request], reports[rank]["request_end_ms"][request].get<double>());
    }
  }
  std::vector<double> latency_ms, interval_ms;
  for (size_t request = warmup; request < requests; ++request) {
    latency_ms.push_back(end_ms[request] - start_ms[request]);
    if (request > warmup) interval_ms.push_back(end_ms[request] - end_ms[request - 1]);
  }
  if (interval_ms.empty()) interval_ms = latency_ms;
  return {latency_ms, interval_ms};
}

class Inferencer {
 public:
  explicit Inferencer(const InferOptions& options);
  void run();

 private:
  void load_weights();
  void serve();
  void save_outputs() const;
  void finish(const RankMeasurement& rank_measurement, std::optional<double> accuracy);
  void write_outputs(std::vector<RankMeasurement> ranks, const std::vector<Json>& reports,
                     std::optional<double> accuracy);

  InferOptions options_;
  RankSession session_;
  const Plan& plan_;
  int64_t requests_per_pass_ = 0;  // whole requests in the test split
  std::vector<double> start_ms_;   // stage 0: each request's first load
  std::vector<double> end_ms_;     // last stage: each request's last output
  std::map<std::string, torch::Tensor> saved_outputs_;
};

Inferencer::Inferencer(const InferOptions& options)
    : options_(checked(options)), session_(options, PlanMode::kInference), plan_(session_.plan()) {
  const int64_t test_size = session_.data().size(Split::kTest);
  requests_per_pass_ = test_size / plan_.global_batch;
  PIPEPLAN_CHECK(requests_per_pass_ >= 1, options_.plan_path,
                 ": global_batch: ", plan_.global_batch, " is larger than the ", test_size,
                 " test samples of ", quote(options_.data), "; plan a smaller global batch");
  session_.build_stage();
  load_weights();
  session_.stage().release_gradients();
  session_.stage().set_training(false);
  // The peak an inference plan predicts is serving's: weights and the micro-batches in flight.
  session_.tracker().reset_peak();
}

// The newest complete checkpoint of --checkpoint, whatever split it was trained with.
void Inferencer::load_weights() {
  const std::string& dir = options_.checkpoint_dir;
  if (dir.empty()) return;
  const int64_t step = latest_complete_checkpoint(dir);
  PIPEPLAN_CHECK(step > 0, "--checkpoint: ", quote(dir),
                 " holds no complete checkpoint; give a training run's --checkpoint-dir");
  const CheckpointManifest m = read_checkpoint_manifest(dir, step);
  PIPEPLAN_CHECK(m.model_hash.empty() || m.model_hash == plan_.model.hash,
                 "--checkpoint: ", quote(checkpoint_step_dir(dir, step)),
                 " holds weights of model ", quote(m.model_name), " (hash ", quote(m.model_hash),
                 "), this plan's is ", quote(plan_.model.name), " (hash ", quote(plan_.model.hash),
                 "); serve the model and configuration it was trained with");
  load_stage_weights_by_name(dir, step, m, session_.stage());
  if (session_.is_rank0())
    log_info("serving the weights of ", quote(checkpoint_step_dir(dir, step)));
}

void Inferencer::run() {
  session_.connect();
  session_.start_interpreter(static_cast<int>(options_.warmup_requests), std::nullopt);
  serve();
  const RankMeasurement measurement = session_.measure_rank();
  save_outputs();
  // Trained weights, or a real data set: an accuracy worth reporting.
  std::optional<double> accuracy;
  if (!options_.checkpoint_dir.empty() || options_.data != "synthetic")
    accuracy = session_.test_accuracy(options_.requests);
  finish(measurement, accuracy);
}

// Request r takes the (r mod requests_per_pass_)-th global batch of the test split: one group
// of the forward-only list. Its latency runs from stage 0's load of its first micro-batch to
// the last stage's output of its last.
void Inferencer::serve() {
  const int64_t m = plan_.num_micro_batches;
  const StageRuntime& stage = session_.stage();
  Recorder& recorder = session_.recorder();
  start_ms_.assign(static_cast<size_t>(options_.requests), 0);
  end_ms_.assign(static_cast<size_t>(options_.requests), 0);
  std::vector<int64_t> order(static_cast<size_t>(session_.data().size(Split::kTest)));
  std::iota(order.begin(), order.end(), 0);
  PassData pass;
  pass.rows.assign(static_cast<size_t>(m), plan_.micro_batch_size);
  pass.num_groups = options_.requests;
  pass.load = [&](int64_t item) {
    if (stage.is_first() && item % m == 0)
      start_ms_[static_cast<size_t>(item / m)] = recorder.now_ms();
    return session_.load(
        Split::kTest,
        micro_batch_indices(order, (item / m) % requests_per_pass_, plan_.global_batch, plan_.dp,
                            session_.replica(), static_cast<int>(m), static_cast<int>(item % m)));
  };
  pass.output = [&](int64_t item, const torch::Tensor& output, const torch::Tensor&) {
    const int64_t request = item / m;
    if (!options_.outputs_path.empty() && request < kSavedOutputRequests) {
      const int64_t global_micro_batch = session_.replica() * m + item % m;
      saved_outputs_[detail::concat("r", request, ".g", global_micro_batch)] =
          output.detach().to(torch::kCPU).clone();
    }
    if (item % m == m - 1) end_ms_[static_cast<size_t>(request)] = recorder.now_ms();
  };
  session_.interpreter().forward_only(
      expand_forward_only(plan_, static_cast<int>(m))[session_.env().rank], pass,
      /*timed_groups=*/true);
  if (session_.is_rank0()) log_info("served ", options_.requests, " requests");
}

// --save-outputs: each last-stage rank its replica's outputs (PATH, or PATH.replica-R with dp > 1).
void Inferencer::save_outputs() const {
  if (options_.outputs_path.empty() || !session_.stage().is_last()) return;
  std::string path = options_.outputs_path;
  if (plan_.dp > 1) path += ".replica-" + std::to_string(session_.replica());
  torch::serialize::OutputArchive archive;
  for (const auto& [name, tensor] : saved_outputs_) archive.write(name, tensor);
  archive.save_to(path);
}

// Every rank's summary and request stamps go through the store to rank 0, which writes run.json.
void Inferencer::finish(const RankMeasurement& rank_measurement, std::optional<double> accuracy) {
  Json report = rank_report_json(rank_measurement, {});
  report["request_start_ms"] = start_ms_;
  report["request_end_ms"] = end_ms_;
  const std::vector<Json> reports = session_.gather_reports("infer-report", report);
  if (session_.is_rank0()) {
    std::vector<RankMeasurement> ranks(reports.size());
    for (size_t rank = 0; rank < reports.size(); ++rank) {
      std::vector<StepEvents> unused;
      parse_rank_report(reports[rank], &ranks[rank], &unused);
    }
    write_outputs(std::move(ranks), reports, accuracy);
  }
  session_.comm().barrier();
}

// Rank 0: run.json, with the requests' latency percentiles and their interval as the iteration.
void Inferencer::write_outputs(std::vector<RankMeasurement> ranks, const std::vector<Json>& reports,
                               std::optional<double> accuracy) {
  const auto [latency_ms, interval_ms] =
      latency_and_interval_ms(plan_, reports, static_cast<size_t>(options_.requests),
                              static_cast<size_t>(options_.warmup_requests));
  Run run;
  run.tool_version = version();
  run.plan_path = options_.plan_path;
  run.plan_hash = session_.plan_hash();
  run.world_size = session_.env().world_size;
  run.data = options_.data;
  run.data_dir = options_.data_dir;
  run.seed = options_.seed;
  run.steps = options_.requests;
  run.steps_per_epoch = requests_per_pass_;
  if (accuracy) run.test_accuracy.push_back({/*epoch=*/1, /*step=*/options_.requests, *accuracy});
  run.measured = combine_measurements(plan_, std::move(ranks), interval_ms,
                                      static_cast<int>(options_.warmup_requests));
  run.measured.latency_p50_ms = quantile_or_zero(latency_ms, 0.5);
  run.measured.latency_p90_ms = quantile_or_zero(latency_ms, 0.9);
  run.measured.latency_p99_ms = quantile_or_zero(latency_ms, 0.99);
  write_run(options_.output_path, run);
  log_info(
      detail::concat("served ", options_.requests, " requests: ", run.measured.samples_per_s,
                     " samples/s, latency p50 ", run.measured.latency_p50_ms, " ms, p99 ",
                     run.measured.latency_p99_ms, " ms",
                     accuracy ? detail::concat(", test accuracy ", *accuracy) : std::string()));
}

}  // namespace

void infer(const InferOptions& options) {
  run_leaking_on_failure(std::make_unique<Inferencer>(options));
}

}  // namespace pipeplan::executor
