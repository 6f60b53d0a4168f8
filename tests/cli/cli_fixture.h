// The fixture of the CLI tests: each test runs the built `pipeplan` in a fresh folder of its
// own and checks exit codes, stdout, and the one-line errors on stderr.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace pipeplan::testing {

inline const std::string kBinary = std::string(PIPEPLAN_BINARY_DIR) + "/cli/pipeplan";
/// A profile written by hand: plausible numbers for the 10-layer resnet_tiny on a 2-core CPU.
inline const std::string kFixture =
    std::string(PIPEPLAN_SOURCE_DIR) + "/tests/data/resnet_tiny_cpu_profile_fixture.json";

/// How one `pipeplan` command ended.
struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// The whole file, or "" when it cannot be read.
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// A fresh folder per test, so that tests may run in parallel.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() / (std::string("pipeplan_cli_") + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Runs `pipeplan args` in the test's folder.
  Outcome run(const std::string& args) const {
    const std::string command =
        "cd '" + dir_.string() + "' && '" + kBinary + "' " + args + " > out.txt 2> err.txt";
    const int status = std::system(command.c_str());
    Outcome result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = slurp(dir_ / "out.txt");
    result.err = slurp(dir_ / "err.txt");
    return result;
  }

  /// Expects exit 2 and exactly one line "pipeplan: error: ..." containing `expected`.
  void expect_bad_input(const std::string& args, const std::string& expected) const {
    const Outcome result = run(args);
    EXPECT_EQ(result.exit_code, 2) << args << "\n" << result.err;
    EXPECT_EQ(result.err.rfind("pipeplan: error: ", 0), 0u) << args << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_NE(result.err.find(expected), std::string::npos) << args << ": " << result.err;
  }

  /// `pipeplan plan` on the fixture profile for 2 devices of 4 GiB and a batch of 32.
  std::string plan_args(const std::string& extra) const {
    return "plan --profile '" + kFixture + "' --devices 2 --device-memory 4GiB --global-batch 32 " +
           extra;
  }

  std::filesystem::path dir_;
};

}  // namespace pipeplan::testing
