// interleaved-1f1b's chunk splits made ahead on a background thread while the search partitions
// its other candidates.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "planner/baselines.h"
#include "planner/layer_table.h"
#include "planner/placement.h"
#include "planner/stage_cost.h"

namespace pipeplan {

/// Makes interleaved_chunk_boundaries of each job, in the order given, on one background thread
/// until stop(): the search hands it the chunk problems its interleaved candidates will ask for,
/// in about the order it will ask, while it is still partitioning alone (before its first
/// simulation, the second core has nothing else to do). A split depends on its problem alone,
/// so whoever makes it, the search gets the same one.
class ChunkSplitsAhead {
 public:
  /// What the search keys its chunk splits by: dp, pp, micro-batch size, V, layout, whether
  /// every chunk recomputes.
  using Key = std::tuple<int, int, int64_t, int, Layout, bool>;
  struct Job {
    Key key;
    PartitionProblem problem;  ///< the candidate's (interleaved_chunk_boundaries' argument)
    const LayerTable* table = nullptr;  ///< must outlive this object
    std::shared_ptr<const SendTimes> sends;
  };

  /// Starts the background thread on `jobs`, whose keys are distinct.
  ChunkSplitsAhead(PartitionSpec spec, std::vector<Job> jobs);
  ChunkSplitsAhead(const ChunkSplitsAhead&) = delete;
  ChunkSplitsAhead& operator=(const ChunkSplitsAhead&) = delete;
  /// Stops after the job under way and waits for it.
  ~ChunkSplitsAhead();

  /// No further job starts (one under way finishes).
  void stop();
  /// The split of `key` when its job has started (waiting for it to end); nullopt when it has
  /// not, and then it never will: the caller makes it.
  std::optional<std::vector<int>> take(const Key& key);
  /// The jobs made so far (taken or not).
  int made();

 private:
  enum class State { kWaiting, kRunning, kDone, kTaken };
  struct Entry {
    Job job;
    State state = State::kWaiting;
    std::vector<int> split;
    std::exception_ptr error;
  };

  void work();

  const PartitionSpec spec_;
  std::vector<Entry> entries_;  // in the order made
  std::mutex mutex_;
  std::condition_variable done_;  // a job ended
  bool stopping_ = false;
  int made_ = 0;        // jobs made so far
  std::thread worker_;  // last: started once the rest is set up
};

}  // namespace pipeplan
