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

#include "planner/predict.h"
#include "plans/plan.h"

namespace pipeplan {

/// Keeps the best `capacity` plans offered, ranked by `better` on the predictions they were
/// offered with (mean action times), and predicts each with simulate's draws
/// (predict_variation) from the moment it enters: its draws split into pieces
/// (VariationDraws), played on one background thread per hardware thread but one (at least
/// one), which take the costliest piece not yet started (of the best-ranked plan among equals), so that the last to finish is a short one and one long plan's draws are
/// shared out. The search goes on meanwhile on the caller's thread; finish() plays what is left
/// there too. A plan pushed out of the top stops being drawn: pieces under way finish and are
/// dropped with it. Each plan's draws are deterministic however they are shared out, so the
/// result does not depend on which thread drew what, or when.
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
  struct Job {  // one plan's draws, on its own copy of the plan
    explicit Job(Plan offered);
    Plan plan;
    VariationDraws draws;
    int next_piece = 0;     // pieces [0, next_piece) have been taken
    int pieces_left = 0;    // taken or not, not yet played
    std::exception_ptr error;  // the first a piece threw
    bool done = false;         // finished (or failed): its plan holds its draws
  };
  struct Kept {
    Plan plan;  // as offered: what the ranking reads
    std::shared_ptr<Job> job;
  };
  struct Piece {
    std::shared_ptr<Job> job;
    int index = 0;
  };

  // The costliest piece not yet taken of the kept plans (of the best-ranked among equals),
  // marked taken; none (no job) if there is none. Under mutex_.
  Piece take_piece();
  // Plays `piece` outside the lock; its plan's last piece also finishes the plan.
  void play(const Piece& piece, std::unique_lock<std::mutex>& lock);
  void work();  // a background thread: plays pieces until stopped
  void stop();  // the background threads finish their pieces and return

  const int capacity_;
  const Better better_;
  std::vector<Kept> kept_;  // best first; written by the caller's thread under mutex_
  std::mutex mutex_;
  std::condition_variable waiting_;  // a piece to play, or stop
  std::condition_variable done_;     // a plan's draws ended
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // started with the first offer
};

}  // namespace pipeplan
