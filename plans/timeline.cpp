// The timeline: event kinds and the Chrome-trace writer.
#include "plans/timeline.h"

#include <set>
#include <utility>

#include "common/error.h"

namespace pipeplan {
namespace {

constexpr double kMicrosecondsPerMs = 1000.0;
constexpr int kComputeThread = 0;

std::string event_name(const TimelineEvent& event) {
  const std::string mb = std::to_string(event.micro_batch);
  switch (event.kind) {
    case TimelineKind::kForward:
      return "F" + mb;
    case TimelineKind::kBackward:
      return "B" + mb;
    case TimelineKind::kRecompute:
      return "R" + mb;
    case TimelineKind::kSend:
      return "send " + mb + " -> rank " + std::to_string(event.peer);
    case TimelineKind::kRecvWait:
      return "wait " + mb + " <- rank " + std::to_string(event.peer);
    case TimelineKind::kAllReduce:
      return "all-reduce";
    case TimelineKind::kOptimizer:
      return "optimizer";
  }
  return "?";
}

Json metadata(const char* name, int pid, int tid, const Json& args) {
  Json json{{"name", name}, {"ph", "M"}, {"pid", pid}, {"args", args}};
  if (tid >= 0) json["tid"] = tid;
  return json;
}

}  // namespace

std::string to_string(TimelineKind kind) {
  switch (kind) {
    case TimelineKind::kForward:
      return "forward";
    case TimelineKind::kBackward:
      return "backward";
    case TimelineKind::kRecompute:
      return "recompute";
    case TimelineKind::kSend:
      return "send";
    case TimelineKind::kRecvWait:
      return "recv-wait";
    case TimelineKind::kAllReduce:
      return "all-reduce";
    case TimelineKind::kOptimizer:
      return "optimizer";
  }
  return "?";
}

Json to_chrome_trace(const Timeline& timeline) {
  Json events = Json::array();
  std::set<std::pair<int, int>> send_threads;
  for (const TimelineEvent& event : timeline.events)
    if (event.kind == TimelineKind::kSend) send_threads.insert({event.rank, event.peer});
  for (size_t rank = 0; rank < timeline.rank_stages.size(); ++rank) {
    const int pid = static_cast<int>(rank);
    const std::string name =
        detail::concat("rank ", rank, " (stage ", timeline.rank_stages[rank], ")");
    events.push_back(metadata("process_name", pid, -1, {{"name", name}}));
    events.push_back(metadata("process_sort_index", pid, -1, {{"sort_index", pid}}));
    events.push_back(metadata("thread_name", pid, kComputeThread, {{"name", "compute"}}));
  }
  for (const auto& [rank, peer] : send_threads)
    events.push_back(
        metadata("thread_name", rank, 1 + peer, {{"name", detail::concat("send to rank ", peer)}}));
  for (const TimelineEvent& event : timeline.events) {
    Json args{{"micro_batch", event.micro_batch}};
    if (event.peer >= 0) args["peer"] = event.peer;
    events.push_back(
        Json{{"name", event_name(event)},
             {"cat", to_string(event.kind)},
             {"ph", "X"},
             {"ts", event.start_ms * kMicrosecondsPerMs},
             {"dur", (event.end_ms - event.start_ms) * kMicrosecondsPerMs},
             {"pid", event.rank},
             {"tid", event.kind == TimelineKind::kSend ? 1 + event.peer : kComputeThread},
             {"args", args}});
  }
  return Json{{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"title", timeline.title},
                {"iteration_ms", timeline.iteration_ms},
                {"bubble_fraction", timeline.bubble_fraction}}}};
}

void write_chrome_trace(const std::string& path, const Timeline& timeline) {
  write_file_atomic(path, to_chrome_trace(timeline).dump() + "\n");
}

void write_svg(const std::string& path, const Timeline& timeline) {
  write_file_atomic(path, to_svg(timeline));
}

}  // namespace pipeplan
