// interleaved-1f1b's chunk splits made ahead on a background thread.
#include "planner/chunk_splits_ahead.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "planner/interleaved_partition.h"

namespace pipeplan {

ChunkSplitsAhead::ChunkSplitsAhead(PartitionSpec spec, std::vector<Job> jobs)
    : spec_(std::move(spec)) {
  entries_.resize(jobs.size());
  for (size_t idx = 0; idx < jobs.size(); ++idx) entries_[idx].job = std::move(jobs[idx]);
  worker_ = std::thread([this] { work(); });
}

ChunkSplitsAhead::~ChunkSplitsAhead() {
  stop();
  worker_.join();
}

void ChunkSplitsAhead::stop() {
  const std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
}

void ChunkSplitsAhead::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (Entry& entry : entries_) {
    if (stopping_) return;
    if (entry.state != State::kWaiting) continue;
    entry.state = State::kRunning;
    lock.unlock();
    // A problem proven not to fit asks for no split: left for a candidate of the same key that
    // fits (kNone and kNeeded share one), which makes it itself.
    PartitionResult proof;
    if (interleaved_proven_infeasible(*entry.job.table, entry.job.problem, &proof)) {
      lock.lock();
      entry.state = State::kTaken;
      done_.notify_all();
      continue;
    }
    std::vector<int> split;
    std::exception_ptr error;
    try {
      split =
          interleaved_chunk_boundaries(spec_, *entry.job.table, entry.job.problem, entry.job.sends);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    entry.split = std::move(split);
    entry.error = error;
    entry.state = State::kDone;
    ++made_;
    done_.notify_all();
  }
}

std::optional<std::vector<int>> ChunkSplitsAhead::take(const Key& key) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto it = std::find_if(entries_.begin(), entries_.end(),
                               [&key](const Entry& entry) { return entry.job.key == key; });
  if (it == entries_.end()) return std::nullopt;
  Entry& entry = *it;
  done_.wait(lock, [&entry] { return entry.state != State::kRunning; });
  const bool made = entry.state == State::kDone;
  entry.state = State::kTaken;  // the worker never starts it now
  if (!made) return std::nullopt;
  if (entry.error) std::rethrow_exception(entry.error);
  return std::move(entry.split);
}

int ChunkSplitsAhead::made() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return made_;
}

}  // namespace pipeplan
