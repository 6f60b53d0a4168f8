// Tests for common/error.h: the check macros and their exit codes.
#include "common/error.h"

#include <gtest/gtest.h>

namespace pipeplan {
namespace {

TEST(ErrorTest, CheckThrowsBadInputWithMessage) {
  try {
    PIPEPLAN_CHECK(1 + 1 == 3, "--devices: ", quote("0"), " must be at least 1");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_STREQ(e.what(), "--devices: '0' must be at least 1");
  }
}

TEST(ErrorTest, RuntimeCheckAndAssertExitOne) {
  try {
    PIPEPLAN_RUNTIME_CHECK(false, "rank ", 1, " died");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_EQ(e.exit_code(), 1);
  }
  try {
    PIPEPLAN_ASSERT(2 < 1, "detail ", 7);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find("2 < 1"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("detail 7"), std::string::npos);
  }
}

TEST(ErrorTest, QuoteShortensLongValuesAndEscapesControlCharacters) {
  EXPECT_EQ(quote("plan.json"), "'plan.json'");
  EXPECT_EQ(quote("a\nb\t"), "'a\\nb\\x09'");
  const std::string quoted = quote(std::string(50, 'a') + std::string(100, 'b') + "end.json");
  // Its start and its end (which names a file in a path), and its length.
  EXPECT_EQ(quoted, "'" + std::string(50, 'a') + "bbb..." + std::string(16, 'b') +
                        "end.json' (158 characters)");
  EXPECT_EQ(shorten(std::string(1000, 'x')).size(),
            kQuotedChars + std::string(" (1000 characters)").size());
  // A path is shown whole, up to PATH_MAX: shortened, it would name no file.
  const std::string path = "/work/build/test_runs/" + std::string(150, 'd') + "/stage-0.pt";
  EXPECT_EQ(quote(path), "'" + path + "'");
  EXPECT_EQ(shorten(std::string(5000, '/')).size(),
            kQuotedChars + std::string(" (5000 characters)").size());
  EXPECT_EQ(shorten("a/b " + std::string(100, 'c')).size(),
            kQuotedChars + std::string(" (104 characters)").size());
}

TEST(ErrorTest, PassingChecksDoNotThrow) {
  EXPECT_NO_THROW(PIPEPLAN_CHECK(true, "x"));
  EXPECT_NO_THROW(PIPEPLAN_ASSERT(true));
}

}  // namespace
}  // namespace pipeplan
