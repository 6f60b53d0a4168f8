// The best plans of a search, predicted with their draws on background threads while the search
// goes on.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "plans/plan.h"

namespace pipeplan {

/// Keeps the best `capacity` plans offered, ranked by `better` on the predictions they were
/// offered with (mean action times), and predicts each with simulate's draws
/// (predict_variation) from the moment it enters: on one background thread per hardware thread
/// but one (at least one, at most `capacity`), which take the costliest plan not yet drawn
/// (the best-ranked of equal cost), so that the last to finish is a short one.
/// The search goes on meanwhile on the caller's thread; finish() draws what is left there too.
/// A plan pushed out of the top before its draws started is never drawn; one pushed out while
/// drawn is finished and dropped. Each plan's draws are deterministic, so the result does not
/// depend on which thread drew what, or when.
class TopPlans {
 public:
  using Better = std::function<bool(const Plan&, const Plan&)>;

  TopPlans(int capacity, Better better);
  TopPlans(const TopPlans&) = delete;
  TopPlans& operator=(const TopPlans&) = delete;
  /// Waits for the draws under way (a finish() that threw leaves some).
  ~TopPlans();

  int size() const { return static_cast<int>(kept_.size()); }
  bool full() const { return size() >= capacity_; }
  /// The last plan kept, as offered. Not empty.
  const Plan& worst() const { return kept_.back().plan; }

  /// Keeps `plan` if it ranks among the best `capacity` (after those it ties with), dropping
  /// the one it pushes out, and queues its draws.
  void offer(Plan plan);

  /// Every kept plan with its draws, in the order they were ranked when offered; rethrows the
  /// first exception a draw threw. Call once.
  std::vector<Plan> finish();

 private:
  enum class State { kWaiting, kDrawing, kDone };
  struct Job {  // one plan's draws, on its own copy of the plan
    Plan plan;
    double work = 0;  // about the compute actions its draws play
    State state = State::kWaiting;
    std::exception_ptr error;
  };
  struct Kept {
    Plan plan;  // as offered: what the ranking reads
    std::shared_ptr<Job> job;
  };

  // The costliest kept plan whose draws have not started, marked kDrawing; null if none.
  // Under mutex_.
  std::shared_ptr<Job> take_waiting();
  // Draws `job` outside the lock, then marks it done.
  void draw(const std::shared_ptr<Job>& job, std::unique_lock<std::mutex>& lock);
  void work();  // a background thread: draws until stopped
  void stop();  // the background threads finish their plans and return

  const int capacity_;
  const Better better_;
  std::vector<Kept> kept_;  // best first; written by the caller's thread under mutex_
  std::mutex mutex_;
  std::condition_variable waiting_;  // a plan to draw, or stop
  std::condition_variable done_;     // a plan's draws ended
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // started with the first offer
};

}  // namespace pipeplan
