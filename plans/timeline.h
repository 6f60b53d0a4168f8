// The timeline of one iteration (what each rank did, when), shared by the simulator and the
// executor's --trace, and its writers: Chrome-trace JSON (opens in Perfetto) and SVG.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"

namespace pipeplan {

/// What a rank was doing during one timeline event.
enum class TimelineKind {
  kForward,
  kBackward,
  kRecompute,  ///< the extra forward of a checkpointed stage, just before its backward
  kSend,       ///< a transfer in flight (asynchronous: the rank computes meanwhile)
  kRecvWait,   ///< the rank is blocked until a receive's data arrives (idle)
  kAllReduce,
  kOptimizer,
};

/// "forward", "backward", "recompute", "send", "recv-wait", "all-reduce", "optimizer".
std::string to_string(TimelineKind kind);

/// One interval on one rank, in ms from the start of the iteration.
struct TimelineEvent {
  int rank = 0;
  TimelineKind kind = TimelineKind::kForward;
  int micro_batch = -1;  ///< -1 for all-reduce and optimizer
  double start_ms = 0;
  double end_ms = 0;  ///< >= start_ms
  int peer = -1;      ///< kSend: the receiving rank; kRecvWait: the sending rank; else -1
};

/// One iteration of every rank.
struct Timeline {
  std::vector<int> rank_stages;  ///< the stage of each rank, indexed by rank
  std::vector<TimelineEvent> events;
  double iteration_ms = 0;
  double bubble_fraction = 0;  ///< idle share of ranks × iteration
  std::string title;           ///< what the timeline is of, e.g. "simulated plan.json"
};

/// Chrome trace: `traceEvents` of `ph:"X"` events in µs. Each rank is one process named
/// "rank r (stage s)" whose thread 0 ("compute") holds its compute, waits and collectives,
/// and whose thread 1 + p ("send to rank p") holds its transfers to rank p, so that no two
/// events of one thread overlap.
Json to_chrome_trace(const Timeline& timeline);

/// A self-contained SVG: one row per rank labelled "rank r (stage s)", forward (light) and
/// backward (dark, hatched) boxes coloured by micro-batch, recompute dashed, all-reduce and
/// optimizer grey, idle time as gaps on a light background, a time axis in ms, and a title
/// with the iteration time and bubble fraction.
std::string to_svg(const Timeline& timeline);

/// Writers (atomic). Throw Error(kBadInput) naming the path when it cannot be written.
void write_chrome_trace(const std::string& path, const Timeline& timeline);
void write_svg(const std::string& path, const Timeline& timeline);

}  // namespace pipeplan
