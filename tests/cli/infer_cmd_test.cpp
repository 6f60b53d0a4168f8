// `pipeplan infer`'s flags through the built binary: bad values end in one line, exit 2, before
// any plan is read or rank waits (the runs themselves: tests/executor/infer_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "tests/cli/cli_fixture.h"

namespace pipeplan {
namespace {

using testing::CliTest;

TEST_F(CliTest, InferRefusesBadFlagsInOneLine) {
  expect_bad_input("infer -o run.json", "--plan is required");
  expect_bad_input("infer --plan p.json --requests 0 -o run.json", "--requests");
  expect_bad_input("infer --plan p.json --requests 3 --warmup 3 -o run.json",
                   "--warmup: 3 leaves no request measured of --requests 3");
  expect_bad_input("infer --plan p.json --save-outputs run.json -o run.json", "run.json");
  expect_bad_input("infer --plan missing.json -o run.json", "missing.json: cannot read");
}

TEST_F(CliTest, InferHidesItsTestFlag) {
  const testing::Outcome help = run("infer --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--requests"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--checkpoint"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("--save-outputs"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace pipeplan
