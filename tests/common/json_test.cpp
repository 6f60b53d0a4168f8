// Tests for common/json.h: field access errors name the document and path; atomic writes.
#include "common/json.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
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
      R"( "n": 1})";
  std::vector<Json> elements;
  const std::optional<Json> rest =
      parse_json_streaming(text, "layers", [&](Json&& element) { elements.push_back(element); });
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(elements,
            (std::vector<Json>{{{"i", 0}}, 7, Json::parse(R"([1, {"i": 2}])"), {{"i", 3}}}));
  // The rest is Json::parse's document without those elements, a nested "layers" as ever.
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
            fifo.string() + ": not a regular file (a FIFO); expected a file");
  fs::remove(fifo);
  EXPECT_NE(error_of([] { read_json_file("/tmp"); }).find("/tmp: not a regular file"),
            std::string::npos);
  const fs::path junk = fs::temp_directory_path() / "pipeplan_json_test_junk.json";
  std::ofstream(junk) << "{ not json";
  EXPECT_EQ(error_of([&] { read_json_file(junk.string()); }),
            junk.string() + ": not valid JSON (error at byte 4)");
  fs::remove(junk);
}

// Issue 46: nesting of 100,000 levels was read, and printing it in an error overflowed the stack.
TEST(JsonTest, NestingDeeperThanTheLimitIsRefusedNamingWhere) {
  const auto nested = [](int levels) {
    return R"({"tool_version": )" + std::string(levels, '[') + std::string(levels, ']') + "}";
  };
  EXPECT_NO_THROW(parse_json(nested(kMaxJsonDepth - 1), "p.json"));  // with the root object
  const std::string message = error_of([&] { parse_json(nested(kMaxJsonDepth), "p.json"); });
  EXPECT_EQ(message.rfind("p.json: tool_version[0][0]", 0), 0u) << message;
  EXPECT_NE(message.find(": nested deeper than 64 levels; expected at most 64 arrays and objects"),
            std::string::npos)
      << message;
  const std::string deep = error_of([&] { parse_json(nested(100000), "p.json"); });
  EXPECT_EQ(deep, message);
  EXPECT_LT(deep.size(), 300u);
  const auto count = [](Json&&) {};
  EXPECT_FALSE(parse_json_streaming(nested(100000), "layers", count));
}

// Issue 46: a repeated key was read, the last value kept.
TEST(JsonTest, ARepeatedKeyIsRefusedNamingItAndItsObject) {
  EXPECT_EQ(error_of([] { parse_json(R"({"a": 1, "a": 1})", "p.json"); }),
            "p.json: key 'a' given twice; expected each key once in an object");
  EXPECT_EQ(
      error_of([] {
        parse_json(R"({"layers": [{}, {"points": [{"fwd_ms": 1, "fwd_ms": 2}]}]})", "p.json");
      }),
      "p.json: layers[1].points[0]: key 'fwd_ms' given twice; expected each key once in an object");
  // The same key in two objects is no repeat.
  EXPECT_NO_THROW(parse_json(R"({"a": {"x": 1}, "b": {"x": 1}, "x": [{"x": 1}, {"x": 2}]})", "p"));
  int handed_on = 0;
  const auto count = [&](Json&&) { ++handed_on; };
  EXPECT_FALSE(parse_json_streaming(R"({"layers": [{"a": 1, "a": 2}]})", "layers", count));
  EXPECT_FALSE(parse_json_streaming(R"({"x": 1, "layers": [], "x": 2})", "layers", count));
}

// Issue 46: after a NUL byte the rest of a file went unread, whatever it held.
TEST(JsonTest, BytesAfterTheDocumentAreRefusedNamingTheOffset) {
  using namespace std::string_literals;
  EXPECT_EQ(error_of([] { parse_json("{\"a\": 1}\0\0garbage"s, "p.json"); }),
            "p.json: not valid JSON (error at byte 9: a NUL byte)");
  EXPECT_EQ(error_of([] { parse_json("{\"a\": 1}\n x", "p.json"); }),
            "p.json: not valid JSON (error at byte 11)");
  EXPECT_EQ(error_of([] { parse_json("{\"a\": 1} {}", "p.json"); }),
            "p.json: not valid JSON (error at byte 10)");
  EXPECT_NO_THROW(parse_json("{\"a\": 1}\n\t \r\n", "p.json"));
  const auto count = [](Json&&) {};
  EXPECT_FALSE(parse_json_streaming("{\"layers\": []}\0x"s, "layers", count));
}

// Issue 46: a 500 MB file was read whole before failing at its first byte. The file here is
// sparse (no disk used); reading it whole takes more memory than the child may have.
TEST(JsonTest, AFileThatIsNoJsonFromItsStartFailsBeforeItIsReadWhole) {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / "pipeplan_json_test_sparse.json";
  {
    std::ofstream(path) << "MZ\x90 not json";
  }
  fs::resize_file(path, kMaxJsonFileBytes / 2);
  EXPECT_EXIT(
      {
        rlimit limit{};
        ::getrlimit(RLIMIT_AS, &limit);
        limit.rlim_cur = rlim_t{256} << 20;  // far below the file's 512 MiB
        ::setrlimit(RLIMIT_AS, &limit);
        const std::string message = error_of([&] { read_json_file(path.string()); });
        std::fprintf(stderr, "%s\n", message.c_str());
        std::exit(message == path.string() + ": not valid JSON (error at byte 1)" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  // A file bad after its start is refused as ever, once read.
  {
    std::ofstream(path) << R"({"a": [)" << std::string(3 << 20, ' ') << "1, ]}";
  }
  EXPECT_NE(error_of([&] { read_json_file(path.string()); }).find("not valid JSON (error at byte"),
            std::string::npos);
  // A number beyond a double where the start is cut (1 MiB), back within one with its exponent.
  const std::string number = "1" + std::string(400, '0');
  {
    std::ofstream(path) << R"({"a": )" << std::string((1 << 20) - 6 - number.size(), ' ')
                        << number << "e-400}";
  }
  EXPECT_EQ(read_json_file(path.string()).at("a").get<double>(), 1.0);
  fs::remove(path);
}

// Issue 46: a device was read until memory ran out, and a loop of links ended with a raw
// filesystem error.
TEST(JsonTest, DevicesAndLinkLoopsAreRefusedAsBadInput) {
  namespace fs = std::filesystem;
  EXPECT_EQ(error_of([] { read_json_file("/dev/zero"); }),
            "/dev/zero: not a regular file (a device or socket); expected a file");
  const fs::path loop = fs::temp_directory_path() / "pipeplan_json_test_loop.json";
  fs::remove(loop);
  fs::create_symlink(loop, loop);
  EXPECT_EQ(error_of([&] { read_json_file(loop.string()); }),
            loop.string() + ": cannot read: Too many levels of symbolic links");
  fs::remove(loop);
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
