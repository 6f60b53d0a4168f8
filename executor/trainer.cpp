// `pipeplan train` for one rank: setup, the step loop, evaluation, checkpoints, outputs.
#include "executor/trainer.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/version.h"
#include "executor/checkpoint.h"
#include "executor/data_parallel.h"
#include "executor/rank_session.h"
#include "plans/run.h"
#include "plans/schedule.h"
#include "plans/timeline.h"
#include "runtime/optimizer.h"

namespace pipeplan::executor {
namespace {

// Steps of each process left out of the timing means and medians (allocator and cache warm-up).
constexpr int kTimingWarmupSteps = 3;
// Measured steps each rank reports to rank 0 (the last ones the recorder kept): run.json's
// step_times, for compare's replay, and --trace.
constexpr size_t kReportedSteps = 20;
// Complete checkpoints kept in --checkpoint-dir; older ones are removed.
constexpr int kCheckpointsKept = 2;
// Test hook: every rank stops with a runtime error when it is about to run this step.
constexpr const char* kFailAtStepVariable = "PIPEPLAN_TEST_FAIL_AT_STEP";

using OrderedJson = nlohmann::ordered_json;

int64_t fail_at_step() {
  const char* text = std::getenv(kFailAtStepVariable);
  return text == nullptr ? 0 : std::atoll(text);
}

// --steps, or --epochs (at least 1) times the steps of an epoch; at most kMaxTrainSteps.
int64_t total_steps(const TrainOptions& options, int64_t steps_per_epoch) {
  PIPEPLAN_CHECK(options.steps >= 0 && options.steps <= kMaxTrainSteps, "--steps: ", options.steps,
                 " is out of range; give 1 to ", kMaxTrainSteps);
  if (options.steps > 0) return options.steps;
  const int64_t epochs = std::max<int64_t>(options.epochs, 1);
  PIPEPLAN_CHECK(epochs <= kMaxTrainSteps / steps_per_epoch, "--epochs: ", epochs, " epochs of ",
                 steps_per_epoch, " steps are more than ", kMaxTrainSteps,
                 " steps; give fewer epochs");
  return epochs * steps_per_epoch;
}

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  void run();

 private:
  void check_inputs();
  void build();
  void resume();
  void prepare_timing();
  void open_log();
  void run_step(int64_t step);
  void on_report(const StepReport& report);
  void flush_reports();
  void average_buffers(int64_t step);
  void evaluate(int64_t step, int64_t epoch);
  void save_checkpoint(int64_t step);
  void finish();
  int64_t agree_on_timeline_step();
  std::vector<StepEvents> steps_to_report(int64_t timeline_step) const;
  void write_outputs(std::vector<RankMeasurement> ranks,
                     const std::vector<std::vector<StepEvents>>& steps, int64_t timeline_step);
  Comm& comm() { return session_.comm(); }
  StageRuntime& stage() { return session_.stage(); }
  Recorder& recorder() { return session_.recorder(); }
  const Recorder& recorder() const { return session_.recorder(); }
  bool is_rank0() const { return session_.is_rank0(); }
  int replica() const { return session_.replica(); }
  int tp_rank() const { return session_.tp_rank(); }
  int stage_idx() const { return session_.stage_idx(); }
  // ZeRO-1: each replica steps and checkpoints its own shard of the optimizer state.
  bool sharded() const { return plan_.dp > 1 && plan_.data_parallel.zero == 1; }

  TrainOptions options_;
  // Declared before everything built under its memory tracking, so that it outlives them.
  RankSession session_;
  const Plan& plan_;
  std::unique_ptr<runtime::FlatOptimizer> optimizer_;
  std::unique_ptr<runtime::LossScaler> scaler_;
  std::vector<FlatBucket> buckets_;
  std::unique_ptr<ReplicaSync> sync_;
  std::unique_ptr<StepReducer> reducer_;
  std::vector<Action> actions_;
  int64_t total_steps_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t start_step_ = 0;
  int64_t last_checkpoint_step_ = -1;
  int64_t buffers_averaged_step_ = -1;
  int64_t order_epoch_ = -1;
  int64_t step_in_epoch_ = 0;
  std::vector<int64_t> order_;
  PassData pass_;
  std::vector<EpochAccuracy> accuracy_;
  double last_loss_ = 0;
  std::vector<std::pair<int64_t, double>> slowest_iteration_ms_;  // rank 0: (step, ms) measured
  std::unique_ptr<OutputFile> log_;                               // rank 0 with --log
  std::unique_ptr<ProgressLine> progress_;
};

Trainer::Trainer(const TrainOptions& options)
    : options_(options), session_(options, PlanMode::kTraining), plan_(session_.plan()) {
  check_inputs();
  build();
}

// The flags only training has; the session checked the rest. All before any rank waits.
void Trainer::check_inputs() {
  if (!options_.log_path.empty()) check_writable(options_.log_path, "--log");
  if (!options_.trace_path.empty()) check_writable(options_.trace_path, "--trace");
  if (!options_.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.checkpoint_dir, ec);
    PIPEPLAN_CHECK(std::filesystem::is_directory(options_.checkpoint_dir),
                   "--checkpoint-dir: ", quote(options_.checkpoint_dir),
                   " is not a folder that can be created");
  }
  const int64_t train_size = session_.data().size(Split::kTrain);
  steps_per_epoch_ = train_size / plan_.global_batch;
  PIPEPLAN_CHECK(steps_per_epoch_ >= 1, options_.plan_path, ": global_batch: ", plan_.global_batch,
                 " is larger than the ", train_size, " training samples of ", quote(options_.data));
  total_steps_ = total_steps(options_, steps_per_epoch_);
}

void Trainer::build() {
  session_.build_stage();
  StageRuntime& stage = session_.stage();
  actions_ = expand_schedule(plan_)[session_.env().rank];
  buckets_ = flat_buckets(plan_, stage, actions_);
  optimizer_ = sharded()
                   ? std::make_unique<runtime::FlatOptimizer>(
                         plan_.optimizer, shard_segments(buckets_, stage, replica(), plan_.dp))
                   : std::make_unique<runtime::FlatOptimizer>(plan_.optimizer, stage.parameters(),
                                                              stage.gradients());
  // The peak the memory model predicts is training's: building a stage from a TorchScript file
  // loads the whole file for a moment (and flattening copies the stage's weights once), which
  // would otherwise set the peak of a stage that holds few of the file's weights.
  session_.tracker().reset_peak();
  scaler_ = std::make_unique<runtime::LossScaler>(plan_.precision == Precision::kAmpFp16);
  pass_.rows.assign(static_cast<size_t>(plan_.num_micro_batches), plan_.micro_batch_size);
  pass_.load = [this](int64_t micro_batch) {
    return session_.load(
        Split::kTrain,
        micro_batch_indices(order_, step_in_epoch_, plan_.global_batch, plan_.dp, replica(),
                            plan_.num_micro_batches, static_cast<int>(micro_batch)));
  };
}

// Rank 0 picks the newest complete checkpoint; every rank loads its stage's file from it.
void Trainer::resume() {
  if (!options_.resume) return;
  if (is_rank0())
    comm().store_set("resume/step",
                     std::to_string(latest_complete_checkpoint(options_.checkpoint_dir)));
  const int64_t step = std::stoll(comm().store_get("resume/step"));
  if (step == 0) {
    if (is_rank0())
      log_info("no checkpoint in ", quote(options_.checkpoint_dir), "; starting at step 0");
    return;
  }
  const CheckpointManifest m = read_checkpoint_manifest(options_.checkpoint_dir, step);
  const std::string where =
      "checkpoint " + quote(checkpoint_step_dir(options_.checkpoint_dir, step));
  // Before the plan hash (which differs too): the one change that cannot work is named.
  const int zero = sharded() ? 1 : 0;
  PIPEPLAN_CHECK(m.dp == 0 || (m.dp == plan_.dp && m.zero == zero), where,
                 " was saved with dp=", m.dp, " and data_parallel.zero=", m.zero,
                 ", this plan has dp=", plan_.dp, " and data_parallel.zero=", zero,
                 "; ZeRO-1 optimizer state is saved per replica, "
                 "so resume with the dp and zero it was saved with or start without --resume");
  PIPEPLAN_CHECK(m.plan_hash == session_.plan_hash(), where, " was made for another plan (",
                 quote(m.plan_hash), ", not ", quote(session_.plan_hash()),
                 "); use its plan or another --checkpoint-dir");
  PIPEPLAN_CHECK(
      m.total_steps == total_steps_ && m.seed == options_.seed && m.data == options_.data, where,
      " belongs to a run of ", m.total_steps, " steps with --seed ", m.seed, " --data ", m.data,
      "; resume with the same flags");
  PIPEPLAN_CHECK(m.pp == plan_.pp, where, " has ", m.pp, " stages, this plan ", plan_.pp,
                 "; use its plan or another --checkpoint-dir");
  PIPEPLAN_CHECK(m.tp == plan_.tp(), where, " was saved with tp=", m.tp,
                 ", this plan has tp=", plan_.tp(), "; use its plan or another --checkpoint-dir");
  const size_t stage_at = static_cast<size_t>(stage_idx());
  const std::string& checksum = plan_.tp() > 1
                                    ? m.tp_checksums.at(stage_at).at(static_cast<size_t>(tp_rank()))
                                    : m.stage_checksums.at(stage_at);
  load_stage_checkpoint(options_.checkpoint_dir, step, session_.plan_hash(), checksum, stage(),
                        sharded() ? nullptr : optimizer_.get(), tp_rank());
  if (sharded())
    load_optimizer_shard(
        options_.checkpoint_dir, step, session_.plan_hash(), stage_idx(), replica(),
        m.shard_checksums.at(static_cast<size_t>(stage_idx())).at(static_cast<size_t>(replica())),
        *optimizer_);
  optimizer_->set_steps_taken(m.optimizer_steps);
  scaler_->restore(m.loss_scale, m.loss_scale_clean_steps);
  accuracy_ = m.test_accuracy;
  last_loss_ = m.loss;
  start_step_ = last_checkpoint_step_ = step;
  if (is_rank0()) log_info("resuming from ", where, " at step ", step, " of ", total_steps_);
}

// At least one of this process's steps is measured; the time origin is common to all ranks.
void Trainer::prepare_timing() {
  const int64_t steps_to_run = total_steps_ - start_step_;
  const int64_t warmup =
      std::min<int64_t>(kTimingWarmupSteps, std::max<int64_t>(steps_to_run - 1, 0));
  sync_ = std::make_unique<ReplicaSync>(plan_, stage(), comm(), buckets_);
  session_.start_interpreter(static_cast<int>(warmup),
                             TrainingParts{*sync_, *optimizer_, *scaler_});
}

void Trainer::open_log() {
  if (!is_rank0()) return;
  progress_ = std::make_unique<ProgressLine>();
  if (options_.log_path.empty()) return;
  if (start_step_ > 0) truncate_log_after(options_.log_path, start_step_);
  log_ = std::make_unique<OutputFile>(options_.log_path, /*append=*/start_step_ > 0, "--log");
}

void Trainer::run() {
  session_.connect();
  reducer_ = std::make_unique<StepReducer>(comm(), plan_);
  resume();
  prepare_timing();
  open_log();
  const int64_t stop_at = fail_at_step();
  for (int64_t step = start_step_ + 1; step <= total_steps_; ++step) {
    PIPEPLAN_RUNTIME_CHECK(step != stop_at, "stopping before step ", step, " as ",
                           kFailAtStepVariable, " asks (a test hook)");
    run_step(step);
    if (step % steps_per_epoch_ == 0) evaluate(step, step / steps_per_epoch_);
    if (!options_.checkpoint_dir.empty() && options_.checkpoint_every > 0 &&
        step % options_.checkpoint_every == 0)
      save_checkpoint(step);
  }
  flush_reports();
  if (accuracy_.empty() || accuracy_.back().step != total_steps_)
    evaluate(total_steps_, total_steps_ / steps_per_epoch_ + 1);
  if (!options_.checkpoint_dir.empty() && last_checkpoint_step_ != total_steps_)
    save_checkpoint(total_steps_);
  finish();
}

void Trainer::run_step(int64_t step) {
  const int64_t epoch = (step - 1) / steps_per_epoch_;
  step_in_epoch_ = (step - 1) % steps_per_epoch_;
  if (epoch != order_epoch_) {
    order_ = epoch_order(session_.data().size(Split::kTrain), options_.seed, epoch);
    order_epoch_ = epoch;
  }
  const double lr = runtime::learning_rate(plan_.optimizer, plan_.global_batch, step, total_steps_);
  recorder().begin_step(step);
  pass_.step = step;
  const IterationOutcome outcome = session_.interpreter().train(actions_, pass_, lr);
  const StepTiming timing = recorder().end_step();
  StepValues values;
  values.step = step;
  // Every rank of a tensor-parallel group computes the same loss: count it once.
  values.loss_sum = tp_rank() == 0 ? outcome.loss_sum : 0.0;
  values.loss_finite = outcome.loss_finite;
  values.gradients_finite = outcome.gradients_finite;
  values.iteration_ms = timing.iteration_ms;
  if (std::optional<StepReport> report = reducer_->push(values)) on_report(*report);
}

// Rank 0: one log line per step, the progress line, and the slowest iteration of measured steps.
void Trainer::on_report(const StepReport& report) {
  last_loss_ = report.loss;
  if (!is_rank0()) return;
  if (report.step > start_step_ + recorder().warmup_steps())
    slowest_iteration_ms_.push_back({report.step, report.slowest_iteration_ms});
  const double samples_per_s = static_cast<double>(plan_.global_batch) * 1000.0 /
                               std::max(report.slowest_iteration_ms, 1e-9);
  if (log_) {
    OrderedJson line{{"step", report.step},
                     {"epoch", (report.step - 1) / steps_per_epoch_ + 1},
                     {"loss", report.loss},
                     {"lr", runtime::learning_rate(plan_.optimizer, plan_.global_batch, report.step,
                                                   total_steps_)},
                     {"iteration_ms", report.slowest_iteration_ms},
                     {"samples_per_s", samples_per_s}};
    log_->write(line.dump() + "\n");
  }
  char text[128];
  std::snprintf(text, sizeof text, "step %lld/%lld  loss %.4f  %.1f samples/s",
                static_cast<long long>(report.step), static_cast<long long>(total_steps_),
                report.loss, samples_per_s);
  progress_->update(text);
}

void Trainer::flush_reports() {
  if (std::optional<StepReport> report = reducer_->flush()) on_report(*report);
}

// The replicas' floating-point buffers (BatchNorm's running statistics), which each replica
// updates from its own samples, set to their mean over the replicas before an evaluation and a
// checkpoint: every replica then evaluates with the buffers the checkpoint holds (replica 0's
// file), so that serving the checkpoint (pipeplan infer) gives the accuracy the run reported,
// and a resume continues with the buffers every replica had. Training's forward uses batch
// statistics, so the losses do not change.
void Trainer::average_buffers(int64_t step) {
  // Once per step: averaging equal buffers again could change their last bit (dp = 3).
  if (plan_.dp == 1 || buffers_averaged_step_ == step) return;
  buffers_averaged_step_ = step;
  std::vector<torch::Tensor> buffers;
  for (const models::LayerPtr& layer : stage().layers())
    for (const torch::Tensor& buffer : layer->buffers())
      if (buffer.is_floating_point()) buffers.push_back(buffer);
  if (buffers.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& buffer : buffers)
    flat.push_back(buffer.reshape(-1).to(torch::kFloat32));
  torch::Tensor packed = torch::cat(flat);
  comm().start_bucket(BucketOp::kAllReduce, packed);
  comm().finish_buckets();
  packed.div_(plan_.dp);
  int64_t offset = 0;
  for (torch::Tensor& buffer : buffers) {
    buffer.copy_(packed.narrow(0, offset, buffer.numel()).view(buffer.sizes()));
    offset += buffer.numel();
  }
}

// The test split's accuracy (RankSession::test_accuracy) with the replicas' buffers averaged.
void Trainer::evaluate(int64_t step, int64_t epoch) {
  flush_reports();
  average_buffers(step);
  const double accuracy = session_.test_accuracy(step);
  accuracy_.push_back({epoch, step, accuracy});
  if (is_rank0() && log_)
    log_->write(OrderedJson{{"epoch", epoch}, {"step", step}, {"test_accuracy", accuracy}}.dump() +
                "\n");
}

// Stage files from each stage's replica 0 (and under ZeRO-1 every replica's shard file), a
// barrier, then rank 0's manifest completes it; the files' checksums reach rank 0 through the
// store.
void Trainer::save_checkpoint(int64_t step) {
  flush_reports();
  average_buffers(step);
  const std::string checksum_key = detail::concat("checkpoint/", step, "/stage-");
  const auto stage_key = [&](int stage, int tp_rank_idx) {
    return detail::concat(checksum_key, stage, tp_rank_idx > 0 ? "-tp-" : "",
                          tp_rank_idx > 0 ? std::to_string(tp_rank_idx) : "");
  };
  if (replica() == 0)
    comm().store_set(
        stage_key(stage_idx(), tp_rank()),
        save_stage_checkpoint(options_.checkpoint_dir, step, session_.plan_hash(), stage(),
                              sharded() ? nullptr : optimizer_.get(), tp_rank()));
  const auto shard_key = [&](int stage, int replica_idx) {
    return detail::concat(checksum_key, stage, "-shard-", replica_idx);
  };
  if (sharded())
    comm().store_set(shard_key(stage_idx(), replica()),
                     save_optimizer_shard(options_.checkpoint_dir, step, session_.plan_hash(),
                                          stage_idx(), replica(), *optimizer_));
  comm().barrier();
  last_checkpoint_step_ = step;
  if (!is_rank0()) return;
  CheckpointManifest m;
  m.plan_hash = session_.plan_hash();
  m.step = step;
  m.total_steps = total_steps_;
  m.seed = options_.seed;
  m.data = options_.data;
  m.pp = plan_.pp;
  m.model_name = plan_.model.name;
  m.model_hash = plan_.model.hash;
  m.dp = plan_.dp;
  m.zero = sharded() ? 1 : 0;
  m.optimizer_steps = optimizer_->steps_taken();
  m.loss_scale = scaler_->scale();
  m.loss_scale_clean_steps = scaler_->clean_steps();
  m.loss = last_loss_;
  m.test_accuracy = accuracy_;
  for (int stage = 0; stage < plan_.pp && sharded(); ++stage) {
    m.shard_checksums.emplace_back();
    for (int replica_idx = 0; replica_idx < plan_.dp; ++replica_idx)
      m.shard_checksums.back().push_back(comm().store_get(shard_key(stage, replica_idx)));
  }
  for (int stage_idx = 0; stage_idx < plan_.pp; ++stage_idx)
    m.stage_checksums.push_back(comm().store_get(stage_key(stage_idx, /*tp_rank_idx=*/0)));
  m.tp = plan_.tp();
  for (int stage_idx = 0; stage_idx < plan_.pp && m.tp > 1; ++stage_idx) {
    m.tp_checksums.emplace_back();
    for (int tp_rank_idx = 0; tp_rank_idx < m.tp; ++tp_rank_idx)
      m.tp_checksums.back().push_back(comm().store_get(stage_key(stage_idx, tp_rank_idx)));
  }
  write_checkpoint_manifest(options_.checkpoint_dir, m, kCheckpointsKept);
}

// Rank 0 picks the representative step from the slowest-rank times it has; every rank reads
// it from the store (their kept steps are the same: all ranks measure the same steps).
int64_t Trainer::agree_on_timeline_step() {
  if (is_rank0()) {
    std::vector<int64_t> kept;
    for (const StepEvents& step : recorder().kept_steps()) kept.push_back(step.step);
    comm().store_set("timeline/step",
                     std::to_string(representative_step(slowest_iteration_ms_, kept)));
  }
  return std::stoll(comm().store_get("timeline/step"));
}

// The representative step and the last kReportedSteps kept steps, in step order.
std::vector<StepEvents> Trainer::steps_to_report(int64_t timeline_step) const {
  const std::deque<StepEvents>& kept = recorder().kept_steps();
  const size_t reported = std::min(kept.size(), kReportedSteps);
  std::vector<StepEvents> steps;
  for (size_t idx = 0; idx < kept.size(); ++idx)
    if (idx >= kept.size() - reported || kept[idx].step == timeline_step)
      steps.push_back(kept[idx]);
  return steps;
}

// Every rank's summary and steps go through the store to rank 0, which writes the files.
void Trainer::finish() {
  const int64_t timeline_step = agree_on_timeline_step();
  const std::vector<Json> reports = session_.gather_reports(
      "report", rank_report_json(session_.measure_rank(), steps_to_report(timeline_step)));
  if (is_rank0()) {
    std::vector<RankMeasurement> ranks(reports.size());
    std::vector<std::vector<StepEvents>> steps(reports.size());
    for (size_t rank = 0; rank < reports.size(); ++rank)
      parse_rank_report(reports[rank], &ranks[rank], &steps[rank]);
    write_outputs(std::move(ranks), steps, timeline_step);
    if (log_) log_->close();
    progress_.reset();
  }
  comm().barrier();
}

// Rank 0: run.json with the representative step's timeline, and the trace of the traced steps.
void Trainer::write_outputs(std::vector<RankMeasurement> ranks,
                            const std::vector<std::vector<StepEvents>>& steps,
                            int64_t timeline_step) {
  Run run;
  run.tool_version = version();
  run.plan_path = options_.plan_path;
  run.plan_hash = session_.plan_hash();
  run.world_size = session_.env().world_size;
  run.data = options_.data;
  run.data_dir = options_.data_dir;
  run.seed = options_.seed;
  run.steps = total_steps_;
  run.steps_per_epoch = steps_per_epoch_;
  run.resumed_from_step = start_step_;
  run.final_loss = last_loss_;
  run.test_accuracy = accuracy_;
  std::vector<double> slowest;
  for (const auto& [step, ms] : slowest_iteration_ms_) slowest.push_back(ms);
  run.measured = combine_measurements(plan_, std::move(ranks), slowest, recorder().warmup_steps());
  std::vector<std::vector<StepEvents>> representative(steps.size());
  for (size_t rank = 0; rank < steps.size(); ++rank)
    for (const StepEvents& step : steps[rank])
      if (step.step == timeline_step) representative[rank].push_back(step);
  run.measured.timeline_step = timeline_step;
  run.measured.timeline =
      measured_timeline(plan_, representative,
                        detail::concat("measured ", options_.output_path, " step ", timeline_step));
  run.measured.step_times =
      step_times(steps, slowest_iteration_ms_, kReportedSteps, plan_.num_micro_batches);
  write_run(options_.output_path, run);
  if (options_.trace_path.empty()) return;
  Timeline trace = measured_timeline(plan_, steps, "measured " + options_.output_path);
  trace.iteration_ms = run.measured.iteration_ms;
  trace.bubble_fraction = run.measured.bubble_fraction;
  write_chrome_trace(options_.trace_path, trace);
}

}  // namespace

void train(const TrainOptions& options) {
  run_leaking_on_failure(std::make_unique<Trainer>(options));
}

}  // namespace pipeplan::executor
