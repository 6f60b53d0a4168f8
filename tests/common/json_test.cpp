// Tests for common/json.h: field access errors name the document and path; atomic writes.
#include "common/json.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

namespace pipeplan {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonTest, ReaderNamesDocumentAndPath) {
  const Json json = Json::parse(R"({"stages": [{"first": 0}, {"first": "x"}], "n": -3})");
  JsonReader reader(json, "plan.json");
  const auto stages = reader.objects("stages");
  EXPECT_EQ(stages[0].integer("first"), 0);
  EXPECT_EQ(error_of([&] { stages[1].integer("first"); }),
            "plan.json: stages[1].first: expected an integer, got \"x\"");
  EXPECT_EQ(error_of([&] { stages[0].integer("last"); }), "plan.json: stages[0].last: missing");
  EXPECT_EQ(error_of([&] { reader.non_negative("n"); }),
            "plan.json: n: -3 is negative; expected a value >= 0");
  EXPECT_EQ(error_of([&] { reader.integer_at_least("n", 1); }),
            "plan.json: n: -3 is out of range; expected an integer >= 1");
}

TEST(JsonTest, SchemaCheckNamesBothVersions) {
  EXPECT_NO_THROW(check_schema(Json{{"schema", "pipeplan.plan/1"}}, "pipeplan.plan/1", "p"));
  EXPECT_NE(error_of([] { check_schema(Json{{"schema", "pipeplan.plan/9"}}, "pipeplan.plan/1", "p"); })
                .find("unsupported schema \"pipeplan.plan/9\""),
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
