// Tests for `pipeplan profile` (cli/profile_cmd.cpp), run as the built binary: bad input ends
// with one line and exit code 2 before anything is measured; a good run writes a valid profile,
// and a co-located one is written once, by one of its processes.
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plans/profile.h"
#include "tests/models/torchscript_files.h"

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
      {"--model mlp_tiny --co-located 0" + kOutput, "--co-located: 0 is below 1"},
  });
  EXPECT_FALSE(std::filesystem::exists(temp_path("pipeplan_profile_cmd_bad.json")));
}

// Issue 46: these ended in allocation errors (exit 1), or in 48 s of 1,000 threads on 2 cores.
TEST(ProfileCommandTest, SizesBeyondTheirBoundsExitTwoBeforeAnythingIsBuilt) {
  expect_bad_input({
      {"--model mlp_tiny --batch-sizes 2,16777217" + kOutput,
       "--batch-sizes: 16777217 is out of range; expected sizes from 1 to 16777216"},
      {"--model mlp_tiny --model-arg layers=1000000000000" + kOutput,
       "model 'mlp_tiny': layers=1000000000000 is out of range; expected an integer in [1, 65534]"},
      {"--model gpt_tiny --model-arg layers=70000" + kOutput, "layers=70000 is out of range"},
      {"--model vit_tiny --model-arg layers=70000" + kOutput, "layers=70000 is out of range"},
      {"--model mlp_tiny --threads 100000" + kOutput, "--threads: 100000 is more than the "},
      {"--model mlp_tiny --seed=-1" + kOutput, "--seed: '-1' is not a decimal integer"},
  });
}

// Issue 46: a model without parameters was profiled and planned, and refused only by `train`; a
// huge TorchScript input shape ended in an allocation error; a FIFO as the model blocked.
TEST(ProfileCommandTest, TorchScriptModelsNoRunCouldUseAreRefused) {
  std::string error;
  const std::string dir = testing::test_models_dir(/*mlp_seed=*/1, &error);
  if (dir.empty()) GTEST_SKIP() << error;
  const std::string fifo = temp_path("pipeplan_profile_cmd_model.pt");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_bad_input({
      {"--model " + dir + "/no_parameters.pt --no-comm" + kOutput,
       "the model has no parameters; expected a model with weights to train"},
      {"--model " + dir + "/mlp.pt --model-arg input_shape=65536x65536 --no-comm" + kOutput,
       "input_shape='65536x65536' has more than 67108864 elements in one sample"},
      {"--model " + fifo + " --no-comm" + kOutput, fifo + ": not a regular file (a FIFO)"},
      {"--model /dev/zero --no-comm" + kOutput, "/dev/zero: not a regular file (a device"},
  });
  std::filesystem::remove(fifo);
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
  EXPECT_TRUE(profile.has_backward_split());  // B and W of every layer
  // Two local ranks timed the link with Gloo; the fit goes through its own points' scale.
  ASSERT_TRUE(profile.interconnect.has_value());
  EXPECT_EQ(profile.interconnect->backend, "gloo");
  EXPECT_EQ(profile.interconnect->ranks, 2);
  for (const CommProfile* comm : {&profile.interconnect->p2p, &profile.interconnect->allreduce}) {
    ASSERT_EQ(comm->points.size(), 8u);
    EXPECT_EQ(comm->points.front().bytes, 4096);
    EXPECT_EQ(comm->points.back().bytes, 64 << 20);
    EXPECT_GT(comm->bandwidth_bytes_per_s, 0);
    // 64 MiB takes longer than 4 KiB, whatever else the machine is doing.
    EXPECT_GT(comm->points.back().time_ms, comm->points.front().time_ms);
  }
}

TEST(ProfileCommandTest, NoCommLeavesTheInterconnectOut) {
  const std::string path = temp_path("pipeplan_profile_cmd_no_comm.json");
  const Result result = ProfileRun("--model mlp_tiny --model-arg layers=2 --batch-sizes 2 "
                                   "--warmup 0 --repeats 1 --threads 1 --no-comm -o " + path)
                            .result();
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const Profile profile = read_profile(path);
  std::filesystem::remove(path);
  EXPECT_FALSE(profile.interconnect.has_value());
}

// Watches one folder for files created in it or renamed into it (inotify).
class FolderWatch {
 public:
  explicit FolderWatch(const std::string& folder) : fd_(::inotify_init1(IN_NONBLOCK)) {
    if (fd_ >= 0) ::inotify_add_watch(fd_, folder.c_str(), IN_CREATE | IN_MOVED_TO);
  }
  FolderWatch(const FolderWatch&) = delete;
  FolderWatch& operator=(const FolderWatch&) = delete;
  ~FolderWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // Names created and names renamed into the folder since the watch began or the last call.
  std::pair<std::vector<std::string>, std::vector<std::string>> take() {
    std::vector<std::string> created;
    std::vector<std::string> renamed;
    alignas(inotify_event) char buffer[4096];
    ssize_t length = 0;
    while ((length = ::read(fd_, buffer, sizeof buffer)) > 0) {
      for (ssize_t offset = 0; offset < length;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
        if (event->len > 0) (event->mask & IN_CREATE ? created : renamed).push_back(event->name);
        offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      }
    }
    return {created, renamed};
  }

 private:
  int fd_;
};

TEST(ProfileCommandTest, SerialCoLocatedProfileIsWrittenOnceAndMatchesTheSoloProfile) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / "pipeplan_profile_cmd_co_located";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const std::string args = "--model mlp_tiny --batch-sizes 2,4 --warmup 0 --repeats 2";
  const std::string solo_path = (folder / "solo.json").string();
  const Result solo = ProfileRun(args + " --threads 1 -o " + solo_path).result();
  ASSERT_EQ(solo.exit_code, 0) << solo.output;
  FolderWatch watch(folder.string());
  ASSERT_TRUE(watch.ok());
  const std::string co_located_path = (folder / "co_located.json").string();
  const Result co_located = ProfileRun(args + " --co-located 2 -o " + co_located_path).result();
  ASSERT_EQ(co_located.exit_code, 0) << co_located.output;
  // One atomic write (a temporary file renamed into place): one process wrote the profile.
  const auto [created, renamed] = watch.take();
  EXPECT_EQ(created.size(), 1u);
  EXPECT_EQ(renamed, std::vector<std::string>{"co_located.json"});
  const Profile expected = read_profile(solo_path);
  const Profile profile = read_profile(co_located_path);
  std::filesystem::remove_all(folder);
  EXPECT_EQ(expected.settings.co_located, 1);
  EXPECT_EQ(profile.settings.co_located, 2);
  // Threads per process: usable cores / 2, at least 1.
  EXPECT_GE(profile.device.threads, 1);
  EXPECT_LE(profile.device.threads, std::max(1, profile.device.cores / 2));
  ASSERT_EQ(profile.layers.size(), expected.layers.size());
  for (size_t layer_idx = 0; layer_idx < profile.layers.size(); ++layer_idx) {
    const LayerProfile& layer = profile.layers[layer_idx];
    ASSERT_EQ(layer.points.size(), expected.layers[layer_idx].points.size()) << layer.name;
    for (size_t point_idx = 0; point_idx < layer.points.size(); ++point_idx)
      EXPECT_EQ(layer.points[point_idx].output_shape,
                expected.layers[layer_idx].points[point_idx].output_shape)
          << layer.name;
  }
}

}  // namespace
}  // namespace pipeplan
