// Tests for common/json.h: field access errors name the document and path; atomic writes.
#include "common/json.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/error_of.h"

namespace pipeplan {
namespace {

using testing::error_of;

TEST(JsonTest, ReaderNamesDocumentAndPath) {
  const Json json = Json::parse(R"({"stages": [{"first": 0}, {"first": "x"}], "n": -3})");
  JsonReader reader(json, "plan.json");
  const auto stages = reader.objects("stages");
  EXPECT_EQ(stages[0].integer("first"), 0);
  EXPECT_EQ(error_of([&] { stages[1].integer("first"); }),
            "plan.json: stages[1].first: \"x\": expected an integer");
  EXPECT_EQ(error_of([&] { stages[0].integer("last"); }), "plan.json: stages[0].last: missing");
  EXPECT_EQ(error_of([&] { reader.non_negative("n"); }), "plan.json: n: -3: expected a value >= 0");
  EXPECT_EQ(error_of([&] { reader.integer_at_least("n", 1); }),
            "plan.json: n: -3: expected an integer >= 1");
}

// Issue 18: integers were read through 32 bits (4294967297 became 1) or wrapped (2^64 − 1
// became -1); a number with a fraction was rounded.
TEST(JsonTest, IntegersAreReadWholeOrRefused) {
  const Json json = Json::parse(
      R"({"big": 4294967297, "huge": 18446744073709551615, "real": 2.5, "times": [1, -2]})");
  JsonReader reader(json, "run.json");
  EXPECT_EQ(reader.integer("big"), 4294967297);
  EXPECT_EQ(error_of([&] { reader.int_in("big", 1, 65536); }),
            "run.json: big: 4294967297: expected an integer in [1, 65536]");
  EXPECT_EQ(error_of([&] { reader.integer("huge"); }),
            "run.json: huge: 18446744073709551615: expected an integer");
  EXPECT_EQ(error_of([&] { reader.integer_in("real", 0, 10); }),
            "run.json: real: 2.5: expected an integer in [0, 10]");
  EXPECT_EQ(error_of([&] { reader.integers_in("times", 0, 9); }),
            "run.json: times: -2: expected an integer in [0, 9] in the array");
  EXPECT_EQ(error_of([&] { reader.times_ms("times"); }),
            "run.json: times: -2: expected times in ms in [0, 1e+08]");
  EXPECT_EQ(error_of([&] { reader.time_ms("big"); }),
            "run.json: big: 4294967297: expected a time in ms in [0, 1e+08]");
}

TEST(JsonTest, LongValuesAndKeysAreQuotedShortened) {
  Json json = Json::object();
  json["name"] = std::string(100000000, 'z');
  json[std::string(1000, 'k')] = "x";
  JsonReader reader(json, "profile.json");
  const std::string message = error_of([&] { reader.integer("name"); });
  EXPECT_LT(message.size(), 200u) << message;
  EXPECT_NE(message.find("(100000002 characters): expected an integer"), std::string::npos)
      << message;
  EXPECT_LT(error_of([&] { reader.integer(std::string(1000, 'k')); }).size(), 200u);
}

TEST(JsonTest, StreamingHandsOnTheRootArraysElementsAndKeepsTheRest) {
  const std::string text =
      R"({"layers": [{"i": 0}, 7, [1, {"i": 2}], {"i": 3}], "model": {"layers": [{"i": 9}]},)"
      R"( "n": 1, "n": 2})";
  std::vector<Json> elements;
  const std::optional<Json> rest =
      parse_json_streaming(text, "layers", [&](Json&& element) { elements.push_back(element); });
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(elements,
            (std::vector<Json>{{{"i", 0}}, 7, Json::parse(R"([1, {"i": 2}])"), {{"i", 3}}}));
  // The rest is Json::parse's document without those elements: a nested "layers" and a repeated
  // key (the last value kept) as ever.
  Json expected = Json::parse(text);
  expected["layers"] = Json::array();
  EXPECT_EQ(*rest, expected);
}

TEST(JsonTest, StreamingGivesUpWhereParseJsonWouldThrowOrKeepTheLastArray) {
  int handed_on = 0;
  const auto count = [&](Json&&) { ++handed_on; };
  EXPECT_FALSE(parse_json_streaming(R"({"layers": [{}, {}], "x": })", "layers", count));
  EXPECT_EQ(handed_on, 2);  // before the error
  EXPECT_FALSE(parse_json_streaming(R"({"layers": [1e999]})", "layers", count));
  EXPECT_FALSE(parse_json_streaming(R"({"layers": [], "layers": [{}]})", "layers", count));
  handed_on = 0;
  const std::optional<Json> scalar = parse_json_streaming(R"({"layers": 5})", "layers", count);
  ASSERT_TRUE(scalar.has_value());
  EXPECT_EQ(*scalar, Json({{"layers", 5}}));
  EXPECT_EQ(handed_on, 0);
}

TEST(JsonTest, RefusesAFifoAndAFolderInsteadOfBlocking) {
  namespace fs = std::filesystem;
  const fs::path fifo = fs::temp_directory_path() / "pipeplan_json_test.fifo";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { read_json_file(fifo.string()); }),
            fifo.string() + ": not a regular file (a folder, FIFO or device); expected a file");
  fs::remove(fifo);
  EXPECT_NE(error_of([] { read_json_file("/tmp"); }).find("/tmp: not a regular file"),
            std::string::npos);
  const fs::path junk = fs::temp_directory_path() / "pipeplan_json_test_junk.json";
  std::ofstream(junk) << "{ not json";
  EXPECT_EQ(error_of([&] { read_json_file(junk.string()); }),
            junk.string() + ": not valid JSON (error at byte 4)");
  fs::remove(junk);
}

TEST(JsonTest, ANumberBeyondADoubleIsBadInputNamingIt) {
  const auto kind_of = [](const auto& call) {
    try {
      call();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  const auto parse = [] { parse_json(R"({"fwd_ms": 1e999})", "profile.json"); };
  EXPECT_EQ(error_of(parse),
            "profile.json: not valid JSON (number overflow parsing '1e999': expected a number "
            "within a double's range)");
  EXPECT_EQ(kind_of(parse), ErrorKind::kBadInput);
}

TEST(JsonTest, SchemaCheckNamesBothVersions) {
  EXPECT_NO_THROW(check_schema(Json{{"schema", "pipeplan.plan/1"}}, "pipeplan.plan/1", "p"));
  EXPECT_NE(error_of([] { check_schema(Json{{"schema", "pipeplan.plan/9"}}, "pipeplan.plan/1", "p"); })
                .find("p: schema: \"pipeplan.plan/9\": unsupported; expected 'pipeplan.plan/1'"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_schema(Json::object(), "pipeplan.plan/1", "p"); }).find("missing"),
            std::string::npos);
}

TEST(JsonTest, WritesAtomicallyAndReadsBack) {
  const std::string path = (std::filesystem::temp_directory_path() / "pipeplan_json_test.json").string();
  write_json_file(path, Json{{"a", 1}});
  EXPECT_EQ(read_json_file(path)["a"], 1);
  std::remove(path.c_str());
  EXPECT_NE(error_of([&] { read_json_file(path); }).find("cannot read"), std::string::npos);
  EXPECT_NE(error_of([] { write_json_file("/nonexistent-folder/x.json", Json{}); }).find("cannot write"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_writable("/nonexistent-folder/x.json", "-o"); }).find("-o"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
