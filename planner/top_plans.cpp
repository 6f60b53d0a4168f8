// The top plans and their draws on background threads.
#include "planner/top_plans.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "planner/predict.h"
#include "planner/simulator.h"
#include "planner/variability.h"

namespace pipeplan {
namespace {

// About the compute actions predict_variation's draws play for `plan` (draw_count): folded, one
// replica kind's; else every replica's, each action counted twice for the dearer generator.
double draw_work(const Plan& plan) {
  const double actions =
      pipeline_actions(plan.schedule, plan.pp, plan.virtual_stages, plan.num_micro_batches);
  const DrawCount count = draw_count(actions, plan.dp, kVariabilityDraws, ReplicaDraws::kAuto);
  return count.folded ? count.draws * actions : 2.0 * count.draws * plan.dp * actions;
}

}  // namespace

TopPlans::TopPlans(int capacity, Better better) : capacity_(capacity), better_(std::move(better)) {
  PIPEPLAN_ASSERT(capacity_ >= 1);
}

TopPlans::~TopPlans() { stop(); }

void TopPlans::offer(Plan plan) {
  const auto at = std::upper_bound(
      kept_.begin(), kept_.end(), plan,
      [this](const Plan& offered, const Kept& kept) { return better_(offered, kept.plan); });
  if (at - kept_.begin() >= capacity_) return;
  auto job = std::make_shared<Job>();
  job->plan = plan;
  job->work = draw_work(plan);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    kept_.insert(at, Kept{std::move(plan), std::move(job)});
    if (size() > capacity_) kept_.pop_back();
  }
  if (workers_.empty()) {
    const int threads =
        std::clamp(static_cast<int>(std::thread::hardware_concurrency()) - 1, 1, capacity_);
    for (int idx = 0; idx < threads; ++idx) workers_.emplace_back([this] { work(); });
  }
  waiting_.notify_one();
}

std::shared_ptr<TopPlans::Job> TopPlans::take_waiting() {
  std::shared_ptr<Job> costliest;
  for (const Kept& kept : kept_)
    if (kept.job->state == State::kWaiting && (!costliest || kept.job->work > costliest->work))
      costliest = kept.job;
  if (costliest) costliest->state = State::kDrawing;
  return costliest;
}

void TopPlans::draw(const std::shared_ptr<Job>& job, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  try {
    predict_variation(&job->plan);
  } catch (...) {
    job->error = std::current_exception();
  }
  lock.lock();
  job->state = State::kDone;
  done_.notify_all();
}

void TopPlans::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    std::shared_ptr<Job> job;
    waiting_.wait(lock, [&] { return stopping_ || (job = take_waiting()) != nullptr; });
    if (!job) return;
    draw(job, lock);
  }
}

void TopPlans::stop() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  waiting_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

std::vector<Plan> TopPlans::finish() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    while (std::shared_ptr<Job> job = take_waiting()) draw(job, lock);
    done_.wait(lock, [this] {
      return std::all_of(kept_.begin(), kept_.end(),
                         [](const Kept& kept) { return kept.job->state == State::kDone; });
    });
  }
  stop();
  std::vector<Plan> plans;
  for (Kept& kept : kept_) {
    if (kept.job->error) std::rethrow_exception(kept.job->error);
    plans.push_back(std::move(kept.job->plan));
  }
  kept_.clear();
  return plans;
}

}  // namespace pipeplan
