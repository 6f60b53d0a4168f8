// Tests for `pipeplan profile` (cli/profile_cmd.cpp), run as the built binary: bad input ends
// with one line and exit code 2 before anything is measured; a good run writes a valid profile.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "profiler/report.h"

namespace pipeplan {
namespace {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `pipeplan profile ARGS`, started at once; result() waits for it.
class ProfileRun {
 public:
  explicit ProfileRun(const std::string& args)
      : pipe_(::popen(
            (std::string(PIPEPLAN_BINARY_DIR) + "/cli/pipeplan profile " + args + " 2>&1").c_str(),
            "r")) {}
  ProfileRun(const ProfileRun&) = delete;
  ProfileRun& operator=(const ProfileRun&) = delete;
  ~ProfileRun() {
    if (pipe_ != nullptr) ::pclose(pipe_);
  }
  Result result() {
    Result result;
    if (pipe_ == nullptr) return result;
    char buffer[4096];
    size_t read = 0;
    while ((read = std::fread(buffer, 1, sizeof(buffer), pipe_)) > 0)
      result.output.append(buffer, read);
    const int status = ::pclose(pipe_);
    pipe_ = nullptr;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }

 private:
  FILE* pipe_;
};

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

// Runs every case at once (most of each run is LibTorch loading) and expects exit code 2 and
// exactly one line "pipeplan: error: ..." containing the case's message.
void expect_bad_input(const std::vector<std::pair<std::string, std::string>>& cases) {
  std::vector<std::unique_ptr<ProfileRun>> runs;
  for (const auto& [args, message] : cases) runs.push_back(std::make_unique<ProfileRun>(args));
  for (size_t case_idx = 0; case_idx < cases.size(); ++case_idx) {
    const Result result = runs[case_idx]->result();
    const auto& [args, message] = cases[case_idx];
    EXPECT_EQ(result.exit_code, 2) << args << "\n" << result.output;
    EXPECT_EQ(result.output.rfind("pipeplan: error: ", 0), 0u) << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << args << "\n" << result.output;
  }
}

const std::string kOutput = " -o " + temp_path("pipeplan_profile_cmd_bad.json");

TEST(ProfileCommandTest, BadModelDeviceOrOutputExitsTwoWithOneLine) {
  std::vector<std::pair<std::string, std::string>> cases = {
      {"--model no_such_model" + kOutput, "unknown model 'no_such_model'"},
      {"--model mlp_tiny --device tpu" + kOutput, "--device: 'tpu' is not cpu, cuda or cuda:N"},
      {"--model mlp_tiny --precision amp-bf16" + kOutput, "needs --device cuda"},
      {"--model mlp_tiny -o /no/such/folder/p.json", "-o: cannot write '/no/such/folder/p.json'"},
      {"-o x.json", "--model is required"},
  };
#ifndef PIPEPLAN_HAS_CUDA
  cases.emplace_back("--model mlp_tiny --device cuda" + kOutput,
                     "needs a pipeplan built with CUDA");
#endif
  expect_bad_input(cases);
  EXPECT_FALSE(std::filesystem::exists(temp_path("pipeplan_profile_cmd_bad.json")));
}

TEST(ProfileCommandTest, BadNumbersExitTwoWithOneLine) {
  expect_bad_input({
      {"--model mlp_tiny --batch-sizes ''" + kOutput, "--batch-sizes: empty list"},
      {"--model mlp_tiny --batch-sizes 1,0" + kOutput, "--batch-sizes: '0' must be at least 1"},
      {"--model mlp_tiny --warmup=-1" + kOutput, "--warmup: -1 is negative"},
      {"--model mlp_tiny --repeats 0" + kOutput, "--repeats: 0 is below 1"},
      {"--model mlp_tiny --threads 0" + kOutput, "--threads: 0 is below 1"},
  });
  EXPECT_FALSE(std::filesystem::exists(temp_path("pipeplan_profile_cmd_bad.json")));
}

TEST(ProfileCommandTest, WritesAValidProfileQuietlyWhenNotOnATerminal) {
  const std::string path = temp_path("pipeplan_profile_cmd_ok.json");
  const Result result = ProfileRun(
                            "--model mlp_tiny --model-arg layers=2 --batch-sizes 4,2 "
                            "--warmup 0 --repeats 2 --threads 1 --seed 5 -o " +
                            path)
                            .result();
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "");  // no progress line: stderr is a pipe
  const Profile profile = read_profile(path);
  std::filesystem::remove(path);
  EXPECT_EQ(profile.model.name, "mlp_tiny");
  EXPECT_EQ(profile.layers.size(), 3u);
  EXPECT_EQ(profile.settings.batch_sizes, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(profile.settings.repeats, 2);
  EXPECT_EQ(profile.settings.seed, 5u);
  EXPECT_EQ(profile.device.threads, 1);
}

}  // namespace
}  // namespace pipeplan
