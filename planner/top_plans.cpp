// The top plans and their draws on background threads.
#include "planner/top_plans.h"

#include <algorithm>
#include <utility>

#include "common/error.h"

namespace pipeplan {

TopPlans::Job::Job(Plan offered)
    : plan(std::move(offered)), draws(&plan), pieces_left(draws.num_pieces()) {}

TopPlans::TopPlans(int capacity, Better better) : capacity_(capacity), better_(std::move(better)) {
  PIPEPLAN_ASSERT(capacity_ >= 1);
}

TopPlans::~TopPlans() { stop(); }

void TopPlans::offer(Plan plan) {
  const auto at = std::upper_bound(
      kept_.begin(), kept_.end(), plan,
      [this](const Plan& offered, const Kept& kept) { return better_(offered, kept.plan); });
  if (at - kept_.begin() >= capacity_) return;
  auto job = std::make_shared<Job>(plan);
  if (job->pieces_left == 0) {  // nothing to draw
    job->draws.finish();
    job->done = true;
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    kept_.insert(at, Kept{std::move(plan), std::move(job)});
    if (size() > capacity_) kept_.pop_back();
  }
  if (workers_.empty()) {
    const int threads = std::max(static_cast<int>(std::thread::hardware_concurrency()) - 1, 1);
    for (int idx = 0; idx < threads; ++idx) workers_.emplace_back([this] { work(); });
  }
  waiting_.notify_all();
}

TopPlans::Piece TopPlans::take_piece() {
  Piece costliest;
  double most_actions = -1;
  for (const Kept& kept : kept_) {
    Job& job = *kept.job;
    if (job.next_piece >= job.draws.num_pieces()) continue;
    const double actions = job.draws.piece_actions(job.next_piece);
    if (actions > most_actions) {
      most_actions = actions;
      costliest = {kept.job, job.next_piece};
    }
  }
  if (costliest.job) ++costliest.job->next_piece;
  return costliest;
}

void TopPlans::play(const Piece& piece, std::unique_lock<std::mutex>& lock) {
  Job& job = *piece.job;
  lock.unlock();
  std::exception_ptr error;
  try {
    job.draws.play(piece.index);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  if (error && !job.error) job.error = error;
  if (--job.pieces_left > 0) return;
  // The plan's last piece: no other thread touches its draws any more.
  lock.unlock();
  if (!job.error) {
    try {
      job.draws.finish();
    } catch (...) {
      error = std::current_exception();
    }
  }
  lock.lock();
  if (error && !job.error) job.error = error;
  job.done = true;
  done_.notify_all();
}

void TopPlans::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    Piece piece;
    waiting_.wait(lock, [&] { return stopping_ || (piece = take_piece()).job != nullptr; });
    if (!piece.job) return;
    play(piece, lock);
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
    for (Piece piece = take_piece(); piece.job; piece = take_piece()) play(piece, lock);
    done_.wait(lock, [this] {
      return std::all_of(kept_.begin(), kept_.end(),
                         [](const Kept& kept) { return kept.job->done; });
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
