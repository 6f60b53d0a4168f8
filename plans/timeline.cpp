// The timeline: event kinds, the Chrome-trace writer and run.json's JSON form.
#include "plans/timeline.h"

#include <optional>
#include <set>
#include <utility>

#include "common/error.h"
#include "common/limits.h"
#include "common/words.h"

namespace pipeplan {
namespace {

constexpr double kMicrosecondsPerMs = 1000.0;
constexpr int kComputeThread = 0;

constexpr std::pair<const char*, TimelineKind> kKindWords[] = {
    {"forward", TimelineKind::kForward},
    {"backward", TimelineKind::kBackward},
    {"backward-input", TimelineKind::kBackwardInput},
    {"backward-weight", TimelineKind::kBackwardWeight},
    {"recompute", TimelineKind::kRecompute},
    {"send", TimelineKind::kSend},
    {"recv-wait", TimelineKind::kRecvWait},
    {"all-reduce", TimelineKind::kAllReduce},
    {"optimizer", TimelineKind::kOptimizer},
    {"load", TimelineKind::kLoad},
    {"send-wait", TimelineKind::kSendWait},
    {"all-gather", TimelineKind::kAllGather}};

std::string event_name(const TimelineEvent& event) {
  // Chunks as the action lists name them (plans/schedule.h: "F3v1").
  const std::string mb = std::to_string(event.micro_batch) +
                         (event.chunk > 0 ? "v" + std::to_string(event.chunk) : std::string());
  switch (event.kind) {
    case TimelineKind::kForward:
      return "F" + mb;
    case TimelineKind::kBackward:
      return "B" + mb;
    case TimelineKind::kBackwardInput:
      return "Bi" + mb;
    case TimelineKind::kBackwardWeight:
      return "W" + mb;
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
    case TimelineKind::kLoad:
      return "load " + mb;
    case TimelineKind::kSendWait:
      return event.micro_batch >= 0 ? "send-wait before " + mb : "send-wait";
    case TimelineKind::kAllGather:
      return "all-gather";
  }
  return "?";
}

Json metadata(const char* name, int pid, int tid, const Json& args) {
  Json json{{"name", name}, {"ph", "M"}, {"pid", pid}, {"args", args}};
  if (tid >= 0) json["tid"] = tid;
  return json;
}

}  // namespace

std::string to_string(TimelineKind kind) { return word_of(kind, kKindWords); }

TimelineKind parse_timeline_kind(std::string_view word, std::string_view field) {
  const std::optional<TimelineKind> kind = find_word(word, kKindWords);
  PIPEPLAN_CHECK(kind, field, ": ", quote(word), " is not one of ", joined_words(kKindWords));
  return *kind;
}

bool is_busy(TimelineKind kind) {
  switch (kind) {
    case TimelineKind::kForward:
    case TimelineKind::kBackward:
    case TimelineKind::kBackwardInput:
    case TimelineKind::kBackwardWeight:
    case TimelineKind::kRecompute:
    case TimelineKind::kAllReduce:
    case TimelineKind::kOptimizer:
    case TimelineKind::kAllGather:
      return true;
    case TimelineKind::kSend:
    case TimelineKind::kRecvWait:
    case TimelineKind::kLoad:
    case TimelineKind::kSendWait:
      return false;
  }
  return false;
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
    if (event.chunk > 0) args["chunk"] = event.chunk;
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

Json to_json(const Timeline& timeline) {
  Json events = Json::array();
  for (const TimelineEvent& e : timeline.events) {
    events.push_back(Json{{"rank", e.rank},
                          {"kind", to_string(e.kind)},
                          {"micro_batch", e.micro_batch},
                          {"start_ms", e.start_ms},
                          {"end_ms", e.end_ms},
                          {"peer", e.peer}});
    if (e.chunk > 0) events.back()["chunk"] = e.chunk;  // interleaved-1f1b only
  }
  return Json{{"title", timeline.title},
              {"iteration_ms", timeline.iteration_ms},
              {"bubble_fraction", timeline.bubble_fraction},
              {"rank_stages", timeline.rank_stages},
              {"events", events}};
}

Timeline timeline_from_json(const JsonReader& reader) {
  Timeline timeline;
  timeline.title = reader.string("title");
  timeline.iteration_ms = reader.number_in("iteration_ms", 0, kMaxIterationMs);
  timeline.bubble_fraction = reader.number_in("bubble_fraction", 0, 1);
  for (int64_t stage : reader.integers_in("rank_stages", 0, kMaxDevices - 1))
    timeline.rank_stages.push_back(static_cast<int>(stage));
  const int ranks = static_cast<int>(timeline.rank_stages.size());
  for (const JsonReader& e : reader.objects("events")) {
    TimelineEvent event;
    if (ranks == 0) e.fail("rank", "expected no events: rank_stages lists no ranks");
    event.rank = e.int_in("rank", 0, ranks - 1);
    const std::string kind = e.string("kind");
    const std::optional<TimelineKind> found = find_word(kind, kKindWords);
    if (!found)
      e.fail("kind", detail::concat(quote(kind), ": expected one of ", joined_words(kKindWords)));
    event.kind = *found;
    event.micro_batch = e.int_in("micro_batch", -1, kMaxMicroBatches - 1);
    event.start_ms = e.number_in("start_ms", 0, kMaxIterationMs);
    event.end_ms = e.number_in("end_ms", event.start_ms, kMaxIterationMs);
    event.peer = e.int_in("peer", -1, ranks - 1);
    if (e.has("chunk")) event.chunk = e.int_in("chunk", 0, kMaxVirtualStages - 1);
    timeline.events.push_back(event);
  }
  return timeline;
}

}  // namespace pipeplan
