// Tests for plans/timeline.h: the SVG is well-formed with one row per rank; the Chrome trace
// has named tracks and events in µs that never overlap on one thread.
#include "plans/timeline.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "common/error.h"
#include "tests/plans/xml_check.h"

namespace pipeplan {
namespace {

Timeline sample_timeline() {
  Timeline timeline;
  timeline.rank_stages = {0, 1, 0, 1};
  timeline.iteration_ms = 10;
  timeline.bubble_fraction = 0.25;
  timeline.title = "test <plan> & co";
  for (int rank = 0; rank < 4; ++rank) {
    timeline.events.push_back({rank, TimelineKind::kForward, 0, 0.25 * rank, 0.25 * rank + 2, -1});
    timeline.events.push_back({rank, TimelineKind::kRecompute, 0, 3, 4, -1});
    timeline.events.push_back({rank, TimelineKind::kBackward, 0, 4, 7, -1});
    timeline.events.push_back({rank, TimelineKind::kAllReduce, -1, 7, 8, -1});
    timeline.events.push_back({rank, TimelineKind::kOptimizer, -1, 8, 9, -1});
  }
  timeline.events.push_back({0, TimelineKind::kSend, 0, 2, 2.5, 1});
  timeline.events.push_back({0, TimelineKind::kSend, 1, 2.5, 3.0, 1});
  timeline.events.push_back({1, TimelineKind::kRecvWait, 0, 0, 0.25, 0});
  return timeline;
}

TEST(TimelineTest, SvgIsWellFormedWithOneRowPerRank) {
  const std::string svg = to_svg(sample_timeline());
  EXPECT_EQ(testing::xml_problem(svg), "");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string label =
        "rank " + std::to_string(rank) + " (stage " + std::to_string(rank % 2) + ")";
    EXPECT_NE(svg.find(">" + label + "<"), std::string::npos) << label;
  }
  const std::regex label(">rank \\d+ \\(stage \\d+\\)<");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(svg.begin(), svg.end(), label), std::sregex_iterator()),
      4);
  EXPECT_NE(svg.find("iteration 10.00 ms, bubble 25.00 %"), std::string::npos);
  EXPECT_NE(svg.find("test &lt;plan&gt; &amp; co"), std::string::npos);
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
  EXPECT_NE(svg.find("url(#hatch)"), std::string::npos);  // backward boxes are hatched
  EXPECT_NE(svg.find(">F0<"), std::string::npos);
}

TEST(TimelineTest, XmlCheckerCatchesBrokenDocuments) {
  EXPECT_NE(testing::xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(testing::xml_problem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(testing::xml_problem("<svg width=\"1></svg>"), "");
  EXPECT_EQ(testing::xml_problem("<svg><g/><text>a &amp; b</text></svg>"), "");
}

TEST(TimelineTest, ChromeTraceHasNamedTracksAndNonOverlappingEvents) {
  const Json trace = to_chrome_trace(sample_timeline());
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> threads;
  int complete_events = 0;
  for (const Json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "process_name")
      process_names[event.at("pid")] = event.at("args").at("name");
    if (event.at("ph") != "X") continue;
    ++complete_events;
    threads[{event.at("pid"), event.at("tid")}].push_back({event.at("ts"), event.at("dur")});
  }
  EXPECT_EQ(complete_events, 4 * 5 + 3);
  ASSERT_EQ(process_names.size(), 4u);
  EXPECT_EQ(process_names[3], "rank 3 (stage 1)");
  for (auto& [thread, spans] : threads) {
    std::sort(spans.begin(), spans.end());
    for (size_t idx = 1; idx < spans.size(); ++idx)
      EXPECT_LE(spans[idx - 1].first + spans[idx - 1].second, spans[idx].first + 1e-9);
  }
  // Times are in µs: the optimizer of rank 0 starts at 8 ms.
  bool found = false;
  for (const Json& event : trace.at("traceEvents"))
    if (event.at("ph") == "X" && event.at("cat") == "optimizer" && event.at("pid") == 0) {
      EXPECT_DOUBLE_EQ(event.at("ts").get<double>(), 8000.0);
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(TimelineTest, KindsRoundTripThroughTheirWords) {
  for (TimelineKind kind :
       {TimelineKind::kForward, TimelineKind::kBackward, TimelineKind::kRecompute,
        TimelineKind::kSend, TimelineKind::kRecvWait, TimelineKind::kAllReduce,
        TimelineKind::kOptimizer, TimelineKind::kLoad, TimelineKind::kSendWait})
    EXPECT_EQ(parse_timeline_kind(to_string(kind), "kind"), kind);
  EXPECT_THROW(parse_timeline_kind("nap", "kind"), Error);
  EXPECT_TRUE(is_busy(TimelineKind::kAllReduce));
  EXPECT_FALSE(is_busy(TimelineKind::kLoad));
  EXPECT_FALSE(is_busy(TimelineKind::kSendWait));
}

TEST(TimelineTest, JsonRoundTripIsEqualAndBadEventsAreNamed) {
  Timeline timeline = sample_timeline();
  timeline.events.push_back({0, TimelineKind::kLoad, 2, 0, 0.125, -1});
  timeline.events.push_back({1, TimelineKind::kSendWait, -1, 9, 9.5, -1});
  const Json json = to_json(timeline);
  const Timeline back = timeline_from_json(JsonReader(json, "run.json", "measured.timeline"));
  EXPECT_EQ(to_json(back), json);
  ASSERT_EQ(back.events.size(), timeline.events.size());
  EXPECT_EQ(back.events.back().kind, TimelineKind::kSendWait);
  Json bad_kind = json;
  bad_kind["events"][0]["kind"] = "nap";
  try {
    timeline_from_json(JsonReader(bad_kind, "run.json", "measured.timeline"));
    FAIL() << "no error for an unknown kind";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("measured.timeline.events[0].kind: 'nap'"),
              std::string::npos)
        << e.what();
  }
  Json bad_rank = json;
  bad_rank["events"][1]["rank"] = 9;
  EXPECT_THROW(timeline_from_json(JsonReader(bad_rank, "run.json")), Error);
  Json backwards = json;
  backwards["events"][2]["end_ms"] = 0;
  EXPECT_THROW(timeline_from_json(JsonReader(backwards, "run.json")), Error);
}

// interleaved-1f1b's chunks are told apart in every form: labels, trace arguments, JSON.
TEST(TimelineTest, ChunksAreNamedInTheSvgTheTraceAndTheJson) {
  Timeline timeline = sample_timeline();
  timeline.events.push_back({2, TimelineKind::kForward, 3, 2.5, 3.0, -1, 1});
  timeline.events.push_back({3, TimelineKind::kBackward, 3, 7, 9, -1, 2});
  const std::string svg = to_svg(timeline);
  EXPECT_EQ(testing::xml_problem(svg), "");
  EXPECT_NE(svg.find(">B3v2<"), std::string::npos);
  const std::string trace = to_chrome_trace(timeline).dump();
  EXPECT_NE(trace.find("\"F3v1\""), std::string::npos);
  EXPECT_NE(trace.find("\"chunk\":2"), std::string::npos);
  const Json json = to_json(timeline);
  const Timeline back = timeline_from_json(JsonReader(json, "run.json", "measured.timeline"));
  EXPECT_EQ(back.events[back.events.size() - 2].chunk, 1);
  EXPECT_EQ(back.events.back().chunk, 2);
  EXPECT_EQ(back.events.front().chunk, 0);
  EXPECT_FALSE(json["events"][0].contains("chunk"));  // a plan without chunks keeps its form
}

TEST(TimelineTest, PanelsShareAGivenTimeScale) {
  const Timeline timeline = sample_timeline();
  std::string own, wide;
  append_svg_panel(timeline, SvgPanel{/*top_px=*/0, /*span_ms=*/0}, &own);
  append_svg_panel(timeline, SvgPanel{/*top_px=*/100, /*span_ms=*/20}, &wide);
  // The axis of a 20 ms scale has a tick at 20; the timeline's own (10 ms) does not.
  EXPECT_NE(wide.find(">20<"), std::string::npos);
  EXPECT_EQ(own.find(">20<"), std::string::npos);
  EXPECT_NE(own.find(">10<"), std::string::npos);
  EXPECT_EQ(testing::xml_problem("<svg>" + wide + "</svg>"), "");
}

}  // namespace
}  // namespace pipeplan
