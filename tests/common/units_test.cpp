// Tests for common/units.h: size parsing and printing, integer lists.
#include "common/units.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace pipeplan {
namespace {

TEST(UnitsTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_size("24GiB", "--device-memory"), 24 * kGiB);
  EXPECT_EQ(parse_size("512MiB", "x"), 512 * kMiB);
  EXPECT_EQ(parse_size("1.5GB", "x"), 1500000000);
  EXPECT_EQ(parse_size("4096", "x"), 4096);
  EXPECT_EQ(parse_size("7b", "x"), 7);
  EXPECT_EQ(parse_size("2kib", "x"), 2048);
  EXPECT_EQ(parse_size("1.5 GiB", "x"), 3 * kGiB / 2);
}

TEST(UnitsTest, RejectsNegativeEmptyAndUnknownUnits) {
  for (const char* bad : {"", "-1GiB", "-5", "12XB", "GiB", "1.2.3GB", ".", "abc"}) {
    try {
      parse_size(bad, "--device-memory");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find("--device-memory"), std::string::npos) << e.what();
    }
  }
}

TEST(UnitsTest, FormatsWithBinaryUnits) {
  EXPECT_EQ(format_size(17), "17 B");
  EXPECT_EQ(format_size(512 * kMiB), "512.0 MiB");
  EXPECT_EQ(format_size(static_cast<int64_t>(22.6 * kGiB)), "22.6 GiB");
  EXPECT_EQ(format_size(2048), "2.0 KiB");
}

TEST(UnitsTest, ParsesPositiveLists) {
  EXPECT_EQ(parse_positive_list("1,2,4,8", "--batch-sizes"), (std::vector<int64_t>{1, 2, 4, 8}));
  for (const char* bad : {"", "1,,2", "0", "1,-2", "a", "1,2,"})
    EXPECT_THROW(parse_positive_list(bad, "--batch-sizes"), Error) << bad;
}

}  // namespace
}  // namespace pipeplan
