// Tests for plans/timeline.h: the SVG is well-formed with one row per rank; the Chrome trace
// has named tracks and events in µs that never overlap on one thread.
#include "plans/timeline.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>

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

// Checks that tags nest and close, attribute values are quoted and no bare '&' or '<' is in
// text. Returns "" or the first problem.
std::string xml_problem(const std::string& text) {
  std::vector<std::string> open;
  size_t pos = 0;
  while ((pos = text.find('<', pos)) != std::string::npos) {
    const size_t end = text.find('>', pos);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = text.substr(pos + 1, end - pos - 1);
    const size_t next_open = text.find('<', pos + 1);
    if (next_open != std::string::npos && next_open < end) return "'<' inside a tag: " + tag;
    if (tag.front() == '?') {
      if (tag.back() != '?') return "bad processing instruction";
    } else if (tag.front() == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return "unbalanced </" + tag.substr(1) + ">";
      open.pop_back();
    } else {
      if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unquoted attribute: " + tag;
      const std::string name = tag.substr(0, tag.find_first_of(" /"));
      if (tag.back() != '/') open.push_back(name);
    }
    pos = end + 1;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  const std::regex bare_amp("&(?!(amp|lt|gt|quot|apos);)");
  if (std::regex_search(text, bare_amp)) return "bare '&'";
  return "";
}

TEST(TimelineTest, SvgIsWellFormedWithOneRowPerRank) {
  const std::string svg = to_svg(sample_timeline());
  EXPECT_EQ(xml_problem(svg), "");
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
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(xml_problem("<svg width=\"1></svg>"), "");
  EXPECT_EQ(xml_problem("<svg><g/><text>a &amp; b</text></svg>"), "");
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

}  // namespace
}  // namespace pipeplan
