// One rank's start-up and shared state for training and serving: checks, stage, groups, clock.
#include "executor/rank_session.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "common/error.h"
#include "common/files.h"
#include "executor/plan_checks.h"
#include "models/torch_compat.h"
#include "plans/schedule.h"

namespace pipeplan::executor {
namespace {

// What each command says of a plan of the other mode.
std::string wrong_mode_advice(PlanMode command_mode) {
  return command_mode == PlanMode::kTraining
             ? "pipeplan train runs training plans; serve it with pipeplan infer, or plan "
               "without --inference"
             : "pipeplan infer serves inference plans; plan one with pipeplan plan --inference, "
               "or train this one with pipeplan train";
}

}  // namespace

// Everything that is bad input fails here, on every rank alike, before any rank waits.
RankSession::RankSession(const RankOptions& options, PlanMode mode)
    : options_(options), mode_(mode) {
  PIPEPLAN_CHECK(options_.timeout_s > 0 && options_.timeout_s <= kMaxTimeoutS,
                 "--timeout-s: ", options_.timeout_s,
                 " is out of range; give more than 0 and at most ", kMaxTimeoutS);
  env_ = read_rendezvous_env();
  set_threads_from_env();
  plan_ = read_plan(options_.plan_path);
  PIPEPLAN_CHECK(plan_.mode == mode_, options_.plan_path, ": mode: ", to_string(plan_.mode), ": ",
                 wrong_mode_advice(mode_));
  plan_hash_ = pipeplan::plan_hash(plan_);
  model_ = models::make_model_from_config(plan_.model.name, plan_.model.config);
  check_plan_matches_model(plan_, model_, options_.plan_path);
  check_world(plan_, env_, options_.plan_path);
  device_ = rank_device(plan_, env_, options_.plan_path);
  check_writable(options_.output_path, "-o");
  data_ = open_data(options_.data, options_.data_dir, model_, options_.seed);
}

void RankSession::build_stage() {
  if (device_.is_cuda()) device_guard_.emplace(device_);
  tracker_ = std::make_shared<runtime::MemoryTracker>();
  tracking_ = std::make_unique<runtime::MemoryTrackingScope>(tracker_);
  tp_group_ = c10::make_intrusive<models::TensorParallelGroup>(tp_rank(), plan_.tp());
  stage_ =
      std::make_unique<StageRuntime>(model_, plan_, stage_idx(), device_, options_.seed, tp_group_);
}

void RankSession::connect() {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options_.timeout_s * 1000));
  comm_ = Comm::connect(env_, plan_, device_, timeout, tie_stages(model_, plan_));
  // Timed into the current step once the recorder exists (the all-reduce may run on autograd's
  // thread while this one waits in the backward: never both at once).
  tp_group_->set_all_reduce([this](torch::Tensor& tensor) {
    const double start_ms = recorder_ ? recorder_->now_ms() : 0;
    comm_->tp_all_reduce(tensor);
    if (recorder_) recorder_->add_tp_allreduce(recorder_->now_ms() - start_ms);
  });
}

void RankSession::start_interpreter(int warmup_steps, std::optional<TrainingParts> training) {
  recorder_ = std::make_unique<Recorder>(env_.rank, warmup_steps);
  interpreter_ = std::make_unique<Interpreter>(plan_, env_.rank, *stage_, *comm_, *recorder_,
                                               options_.seed, std::move(training));
  comm_->barrier();
  recorder_->reset_origin();
}

std::pair<torch::Tensor, torch::Tensor> RankSession::load(
    Split split, const std::vector<int64_t>& indices) const {
  auto [input, target] = data_->batch(split, indices);
  return {input.to(device_), target.to(device_)};
}

double RankSession::test_accuracy(int64_t step) {
  const int64_t size = data_->size(Split::kTest);
  const int64_t begin = size * replica() / plan_.dp;
  const int64_t count = size * (replica() + 1) / plan_.dp - begin;
  const int64_t rows = plan_.micro_batch_size;
  PassData pass;
  pass.step = step;
  for (int64_t offset = 0; offset < count; offset += rows)
    pass.rows.push_back(std::min(rows, count - offset));
  pass.load = [&](int64_t item) {
    std::vector<int64_t> indices(static_cast<size_t>(pass.rows[static_cast<size_t>(item)]));
    std::iota(indices.begin(), indices.end(), begin + item * rows);
    return load(Split::kTest, indices);
  };
  int64_t correct = 0, total = 0;
  pass.output = [&](int64_t, const torch::Tensor& output, const torch::Tensor& target) {
    const torch::Tensor predicted = output.argmax(-1);
    correct += predicted.eq(target.to(predicted.device())).sum().item<int64_t>();
    total += target.numel();
  };
  const std::vector<Action> actions =
      expand_forward_only(plan_, static_cast<int>(pass.rows.size()))[env_.rank];
  stage_->set_training(false);
  interpreter_->forward_only(actions, pass, /*timed_groups=*/false);
  stage_->set_training(mode_ == PlanMode::kTraining);
  torch::Tensor counts =
      torch::tensor({static_cast<double>(correct), static_cast<double>(total)}, torch::kFloat64);
  if (tp_rank() > 0) counts.zero_();  // the group's ranks count the same predictions
  comm_->world_sum(counts);
  return counts[0].item<double>() / std::max(counts[1].item<double>(), 1.0);
}

RankMeasurement RankSession::measure_rank() const {
  RankMeasurement m = recorder_->summarize(plan_.ranks[env_.rank]);
  m.peak_memory_bytes = tracker_->peak_bytes(device_.type());
#ifdef PIPEPLAN_HAS_CUDA
  if (device_.is_cuda())
    m.cuda_allocator_peak_bytes = compat::cuda_allocator_bytes(device_.index()).peak_allocated;
#endif
  return m;
}

std::vector<Json> RankSession::gather_reports(const std::string& key, const Json& report) {
  comm_->store_set(key + "/" + std::to_string(env_.rank), report.dump());
  std::vector<Json> reports;
  if (is_rank0())
    for (size_t rank = 0; rank < plan_.ranks.size(); ++rank)
      reports.push_back(Json::parse(comm_->store_get(key + "/" + std::to_string(rank))));
  return reports;
}

}  // namespace pipeplan::executor
