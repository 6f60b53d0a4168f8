// `pipeplan infer` for one rank: setup, weights, the request stream, accuracy, run.json.
#include "executor/inferencer.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/stats.h"
#include "common/version.h"
#include "executor/checkpoint.h"
#include "executor/comm.h"
#include "executor/data.h"
#include "executor/metrics.h"
#include "executor/plan_checks.h"
#include "executor/stage.h"
#include "executor/trainer.h"
#include "models/torch_compat.h"
#include "plans/run.h"
#include "plans/schedule.h"
#include "runtime/device.h"
#include "runtime/memory_tracker.h"

namespace pipeplan::executor {
namespace {

// Requests whose last-stage outputs --save-outputs keeps.
constexpr int64_t kSavedOutputRequests = 4;
// Micro-batch tags repeat after this many groups (requests): receives posted ahead never span
// that many, and tags stay far below INT_MAX.
constexpr int64_t kTagGroupCycle = 1024;

using Batch = std::pair<torch::Tensor, torch::Tensor>;

// One forward-only stream of micro-batches through this rank, in groups of `group_size`
// (a request; an evaluation is one group). Micro-batch `stream_idx` = group · group_size + k.
struct Stream {
  int64_t group_size = 1;
  int64_t num_groups = 1;
  std::function<int64_t(int64_t stream_idx)> rows;
  std::function<Batch(int64_t stream_idx)> load;  // first and last stage
  std::function<void(int64_t stream_idx, const Batch& output_and_target)> output;  // last stage
  bool timed = false;  // requests: groups are the recorder's steps, stamped for latency
};

// ms of q-quantile (linear interpolation), 0 for none.
double quantile_or_zero(const std::vector<double>& values, double fraction) {
  return values.empty() ? 0 : quantile(values, fraction);
}

class Inferencer {
 public:
  explicit Inferencer(const InferOptions& options);
  void run();

 private:
  void check_inputs();
  void build();
  void load_weights();
  void serve();
  void run_stream(const Stream& stream);
  void forward(const Action& action, int64_t stream_idx, const Stream& stream,
               torch::Tensor* activation);
  std::optional<double> evaluate();
  void finish(const RankMeasurement& rank_measurement, std::optional<double> accuracy);
  void write_outputs(std::vector<RankMeasurement> ranks, const std::vector<Json>& reports,
                     std::optional<double> accuracy);
  void save_outputs() const;
  Batch load(Split split, const std::vector<int64_t>& indices) const;
  bool is_rank0() const { return env_.rank == 0; }
  int replica() const { return plan_.ranks[env_.rank].replica; }

  InferOptions options_;
  RendezvousEnv env_;
  Plan plan_;
  std::string plan_hash_;
  models::Model model_;
  torch::Device device_{torch::kCPU};
  std::optional<c10::DeviceGuard> device_guard_;
  std::unique_ptr<DataSource> data_;
  std::shared_ptr<runtime::MemoryTracker> tracker_;
  std::unique_ptr<runtime::MemoryTrackingScope> tracking_;
  std::unique_ptr<StageRuntime> stage_;
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Recorder> recorder_;
  int64_t requests_per_pass_ = 0;  // whole requests in the test split
  bool trained_ = false;           // weights from a checkpoint
  std::vector<double> start_ms_;   // stage 0: each request's first forward (its load)
  std::vector<double> end_ms_;     // last stage: each request's last output
  std::map<std::string, torch::Tensor> saved_outputs_;
};

Inferencer::Inferencer(const InferOptions& options) : options_(options) {
  check_inputs();
  build();
}

// Everything that is bad input fails here, on every rank alike, before any rank waits.
void Inferencer::check_inputs() {
  PIPEPLAN_CHECK(options_.timeout_s > 0 && options_.timeout_s <= kMaxTimeoutS,
                 "--timeout-s: ", options_.timeout_s,
                 " is out of range; give more than 0 and at most ", kMaxTimeoutS);
  PIPEPLAN_CHECK(options_.requests >= 1 && options_.requests <= kMaxInferRequests,
                 "--requests: ", options_.requests, " is out of range; give 1 to ",
                 kMaxInferRequests);
  PIPEPLAN_CHECK(options_.warmup_requests >= 0 && options_.warmup_requests < options_.requests,
                 "--warmup: ", options_.warmup_requests,
                 " leaves no request measured of --requests ", options_.requests,
                 "; give fewer warm-up requests or more requests");
  env_ = read_rendezvous_env();
  set_threads_from_env();
  plan_ = read_plan(options_.plan_path);
  PIPEPLAN_CHECK(plan_.mode == PlanMode::kInference, options_.plan_path,
                 ": mode: ", to_string(plan_.mode),
                 ": pipeplan infer serves inference plans; plan one with "
                 "pipeplan plan --inference, or train this one with pipeplan train");
  plan_hash_ = plan_hash(plan_);
  model_ = models::make_model_from_config(plan_.model.name, plan_.model.config);
  check_plan_matches_model(plan_, model_, options_.plan_path);
  check_world(plan_, env_, options_.plan_path);
  device_ = rank_device(plan_, env_, options_.plan_path);
  check_writable(options_.output_path, "-o");
  trained_ = !options_.checkpoint_dir.empty();
  data_ = open_data(options_.data, options_.data_dir, model_, options_.seed);
  requests_per_pass_ = data_->size(Split::kTest) / plan_.global_batch;
  PIPEPLAN_CHECK(requests_per_pass_ >= 1, options_.plan_path,
                 ": global_batch: ", plan_.global_batch, " is larger than the ",
                 data_->size(Split::kTest), " test samples of ", quote(options_.data),
                 "; plan a smaller global batch");
}

void Inferencer::build() {
  if (device_.is_cuda()) device_guard_.emplace(device_);
  tracker_ = std::make_shared<runtime::MemoryTracker>();
  tracking_ = std::make_unique<runtime::MemoryTrackingScope>(tracker_);
  stage_ = std::make_unique<StageRuntime>(model_, plan_, plan_.ranks[env_.rank].stage, device_,
                                          options_.seed);
  load_weights();
  stage_->release_gradients();
  stage_->set_training(false);
  // The peak an inference plan predicts is serving's: weights and the micro-batches in flight.
  tracker_->reset_peak();
}

// The newest complete checkpoint of --checkpoint, whatever split it was trained with.
void Inferencer::load_weights() {
  if (!trained_) return;
  const std::string& dir = options_.checkpoint_dir;
  const int64_t step = latest_complete_checkpoint(dir);
  PIPEPLAN_CHECK(step > 0, "--checkpoint: ", quote(dir),
                 " holds no complete checkpoint; give a training run's --checkpoint-dir");
  const CheckpointManifest m = read_checkpoint_manifest(dir, step);
  PIPEPLAN_CHECK(m.model_hash.empty() || m.model_hash == plan_.model.hash,
                 "--checkpoint: ", quote(checkpoint_step_dir(dir, step)),
                 " holds weights of model ", quote(m.model_name), " (hash ", quote(m.model_hash),
                 "), this plan's is ", quote(plan_.model.name), " (hash ", quote(plan_.model.hash),
                 "); serve the model and configuration it was trained with");
  load_stage_weights_by_name(dir, step, m, *stage_);
  if (is_rank0()) log_info("serving the weights of ", quote(checkpoint_step_dir(dir, step)));
}

Batch Inferencer::load(Split split, const std::vector<int64_t>& indices) const {
  auto [input, target] = data_->batch(split, indices);
  return {input.to(device_), target.to(device_)};
}

void Inferencer::run() {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options_.timeout_s * 1000));
  comm_ = Comm::connect(env_, plan_, device_, timeout, tie_stages(model_, plan_));
  recorder_ = std::make_unique<Recorder>(env_.rank, static_cast<int>(options_.warmup_requests));
  comm_->barrier();
  recorder_->reset_origin();
  serve();
  RankMeasurement measurement = recorder_->summarize(plan_.ranks[env_.rank]);
  measurement.peak_memory_bytes = tracker_->peak_bytes(device_.type());
#ifdef PIPEPLAN_HAS_CUDA
  if (device_.is_cuda())
    measurement.cuda_allocator_peak_bytes =
        compat::cuda_allocator_bytes(device_.index()).peak_allocated;
#endif
  save_outputs();
  finish(measurement, evaluate());
}

// The requests: request r takes the (r mod requests_per_pass_)-th global batch of the test split.
void Inferencer::serve() {
  const int64_t m = plan_.num_micro_batches;
  start_ms_.assign(static_cast<size_t>(options_.requests), 0);
  end_ms_.assign(static_cast<size_t>(options_.requests), 0);
  std::vector<int64_t> order(static_cast<size_t>(data_->size(Split::kTest)));
  std::iota(order.begin(), order.end(), 0);
  Stream stream;
  stream.group_size = m;
  stream.num_groups = options_.requests;
  stream.timed = true;
  stream.rows = [this](int64_t) { return plan_.micro_batch_size; };
  stream.load = [&](int64_t stream_idx) {
    return load(Split::kTest,
                micro_batch_indices(order, (stream_idx / m) % requests_per_pass_,
                                    plan_.global_batch, plan_.dp, replica(),
                                    plan_.num_micro_batches, static_cast<int>(stream_idx % m)));
  };
  stream.output = [&](int64_t stream_idx, const Batch& output) {
    const int64_t request = stream_idx / m;
    if (options_.outputs_path.empty() || request >= kSavedOutputRequests) return;
    const int64_t global_micro_batch = replica() * m + stream_idx % m;
    saved_outputs_[detail::concat("r", request, ".g", global_micro_batch)] =
        output.first.detach().to(torch::kCPU).clone();
  };
  run_stream(stream);
  if (is_rank0()) log_info("served ", options_.requests, " requests");
}

// expand_forward_only's order for each group, one group after another with no wait between
// them; receives posted kRecvLookahead ahead, at most kMaxSendsInFlight sends outstanding.
void Inferencer::run_stream(const Stream& stream) {
  const std::vector<Action> group =
      expand_forward_only(plan_, static_cast<int>(stream.group_size))[env_.rank];
  const int64_t tag_base = std::min(stream.num_groups, kTagGroupCycle);
  std::vector<Action> actions;
  std::vector<int64_t> stream_of;
  std::vector<size_t> receives;
  for (int64_t group_idx = 0; group_idx < stream.num_groups; ++group_idx)
    for (Action action : group) {
      stream_of.push_back(group_idx * stream.group_size + action.micro_batch);
      action.micro_batch += static_cast<int>((group_idx % tag_base) * stream.group_size);
      if (action.kind == ActionKind::kRecvActivation) receives.push_back(actions.size());
      actions.push_back(action);
    }
  const StagePlan& me = plan_.stages.at(static_cast<size_t>(stage_->stage()));
  const torch::Dtype dtype = boundary_dtype(me.input_dtype, "dtype");
  size_t posted = 0, waited = 0;
  const auto post_ahead = [&] {
    while (posted < receives.size() && posted < waited + kRecvLookahead) {
      const size_t position = receives[posted++];
      std::vector<int64_t> shape{stream.rows(stream_of[position])};
      shape.insert(shape.end(), me.input_sample_shape.begin(), me.input_sample_shape.end());
      comm_->post_recv(actions[position], shape, dtype);
    }
  };
  post_ahead();
  torch::Tensor activation;  // received, then the one to send
  for (size_t position = 0; position < actions.size(); ++position) {
    const Action& action = actions[position];
    if (stream.timed && position % group.size() == 0)
      recorder_->begin_step(static_cast<int64_t>(position / group.size()) + 1);
    switch (action.kind) {
      case ActionKind::kRecvActivation:
        activation = comm_->wait_recv(action);
        ++waited;
        post_ahead();
        break;
      case ActionKind::kForward:
        forward(action, stream_of[position], stream, &activation);
        break;
      case ActionKind::kSendActivation:
        comm_->wait_sends(kMaxSendsInFlight - 1);
        comm_->send(action, activation);
        activation = torch::Tensor();
        break;
      default:
        PIPEPLAN_ASSERT(false, "inference runs forward actions only, not ", to_string(action));
    }
    if (stream.timed && position % group.size() == group.size() - 1) recorder_->end_step();
  }
  comm_->wait_sends();
}

// One micro-batch's forward; with a timed stream, stamps a request's start (stage 0, its first
// micro-batch) and end (last stage, its last).
void Inferencer::forward(const Action& action, int64_t stream_idx, const Stream& stream,
                         torch::Tensor* activation) {
  const int64_t request = stream_idx / stream.group_size;
  const int64_t micro_batch = stream_idx % stream.group_size;
  const bool first = stage_->is_first(), last = stage_->is_last();
  if (stream.timed && first && micro_batch == 0)
    start_ms_[static_cast<size_t>(request)] = recorder_->now_ms();
  // Only the last stage keeps the target, to score the output (forward_stage_memory counts it
  // there); the input of a batch the last stage loads is dropped before the forward.
  torch::Tensor target;
  if (first || last) {
    Batch batch = stream.load(stream_idx);
    if (first) *activation = std::move(batch.first);
    if (last) target = std::move(batch.second);
  }
  const double start_ms = recorder_->now_ms();
  torch::Tensor output = stage_->infer(/*chunk=*/0, *activation);
  runtime::wait_for_stream(device_);  // the interval covers the compute itself
  if (stream.timed && recorder_->measuring())
    recorder_->record(TimelineKind::kForward, static_cast<int>(micro_batch), start_ms,
                      recorder_->now_ms(), /*peer=*/-1, action.chunk);
  if (!last) {
    *activation = std::move(output);
    return;
  }
  *activation = torch::Tensor();
  stream.output(stream_idx, {output, target});
  if (stream.timed && micro_batch == stream.group_size - 1)
    end_ms_[static_cast<size_t>(request)] = recorder_->now_ms();
}

// The whole test split, sharded over the replicas as training evaluates it; nullopt when the
// weights are the seeded init of synthetic data (no accuracy worth reporting).
std::optional<double> Inferencer::evaluate() {
  if (!trained_ && options_.data == "synthetic") return std::nullopt;
  const int64_t size = data_->size(Split::kTest);
  const int64_t begin = size * replica() / plan_.dp;
  const int64_t count = size * (replica() + 1) / plan_.dp - begin;
  const int64_t rows = plan_.micro_batch_size;
  int64_t correct = 0, total = 0;
  Stream stream;
  stream.group_size = (count + rows - 1) / rows;
  stream.rows = [&](int64_t idx) { return std::min(rows, count - idx * rows); };
  stream.load = [&](int64_t idx) {
    std::vector<int64_t> indices(static_cast<size_t>(stream.rows(idx)));
    std::iota(indices.begin(), indices.end(), begin + idx * rows);
    return load(Split::kTest, indices);
  };
  stream.output = [&](int64_t, const Batch& output) {
    const torch::Tensor predicted = output.first.argmax(-1);
    correct += predicted.eq(output.second.to(predicted.device())).sum().item<int64_t>();
    total += output.second.numel();
  };
  run_stream(stream);
  torch::Tensor counts =
      torch::tensor({static_cast<double>(correct), static_cast<double>(total)}, torch::kFloat64);
  comm_->world_sum(counts);
  return counts[0].item<double>() / std::max(counts[1].item<double>(), 1.0);
}

// --save-outputs: each last-stage rank its replica's outputs (PATH, or PATH.replica-R with dp > 1).
void Inferencer::save_outputs() const {
  if (options_.outputs_path.empty() || !stage_->is_last()) return;
  std::string path = options_.outputs_path;
  if (plan_.dp > 1) path += ".replica-" + std::to_string(replica());
  torch::serialize::OutputArchive archive;
  for (const auto& [name, tensor] : saved_outputs_) archive.write(name, tensor);
  archive.save_to(path);
}

// Every rank's summary and request stamps go through the store to rank 0, which writes run.json.
void Inferencer::finish(const RankMeasurement& rank_measurement, std::optional<double> accuracy) {
  Json report = rank_report_json(rank_measurement, {});
  report["request_start_ms"] = start_ms_;
  report["request_end_ms"] = end_ms_;
  comm_->store_set("infer-report/" + std::to_string(env_.rank), report.dump());
  if (is_rank0()) {
    std::vector<RankMeasurement> ranks(plan_.ranks.size());
    std::vector<Json> reports;
    for (size_t rank = 0; rank < ranks.size(); ++rank) {
      reports.push_back(Json::parse(comm_->store_get("infer-report/" + std::to_string(rank))));
      std::vector<StepEvents> unused;
      parse_rank_report(reports.back(), &ranks[rank], &unused);
    }
    write_outputs(std::move(ranks), reports, accuracy);
  }
  comm_->barrier();
}

// Rank 0: latency of each measured request from stage 0's earliest start over the replicas to
// the last stage's latest end; the interval between requests from consecutive ends.
void Inferencer::write_outputs(std::vector<RankMeasurement> ranks, const std::vector<Json>& reports,
                               std::optional<double> accuracy) {
  const auto requests = static_cast<size_t>(options_.requests);
  std::vector<double> start_ms(requests, std::numeric_limits<double>::infinity());
  std::vector<double> end_ms(requests, 0);
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const RankAssignment& a = plan_.ranks[rank];
    for (size_t request = 0; request < requests; ++request) {
      if (a.stage == 0)
        start_ms[request] =
            std::min(start_ms[request], reports[rank]["request_start_ms"][request].get<double>());
      if (a.stage == plan_.pp - 1)
        end_ms[request] =
            std::max(end_ms[request], reports[rank]["request_end_ms"][request].get<double>());
    }
  }
  const auto warmup = static_cast<size_t>(options_.warmup_requests);
  std::vector<double> latency_ms, interval_ms;
  for (size_t request = warmup; request < requests; ++request) {
    latency_ms.push_back(end_ms[request] - start_ms[request]);
    if (request > warmup) interval_ms.push_back(end_ms[request] - end_ms[request - 1]);
  }
  // One measured request alone: it is its own interval.
  if (interval_ms.empty()) interval_ms = latency_ms;
  Run run;
  run.tool_version = version();
  run.plan_path = options_.plan_path;
  run.plan_hash = plan_hash_;
  run.world_size = env_.world_size;
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
