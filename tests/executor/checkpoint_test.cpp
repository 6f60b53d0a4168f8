// Tests for executor/checkpoint.h: a failed write leaves the last complete checkpoint and no
// temporary file; resuming and serving refuse flipped bytes, a stage file of another step, a FIFO
// and an edited manifest, naming the file; stray folders are ignored, incomplete ones removed.
#include "executor/checkpoint.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/hash.h"
#include "models/model.h"
#include "tests/common/file_size_limit.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::executor {
namespace {

namespace fs = std::filesystem;

// The message of the Error `fn` throws, with its kind; "" when it throws none.
std::pair<std::string, ErrorKind> error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {e.what(), e.kind()};
  }
  return {"", ErrorKind::kInternal};
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Flips 16 bytes of the first parameter where the stage file at `path` holds them.
void flip_first_parameter(const std::string& path, StageRuntime& stage) {
  std::string bytes = read_bytes(path);
  const torch::Tensor first = stage.parameters().slice(0, 0, 4).contiguous();
  const size_t at = bytes.find(std::string(static_cast<const char*>(first.data_ptr()), 16));
  ASSERT_NE(at, std::string::npos);
  for (size_t idx = at; idx < at + 16; ++idx) bytes[idx] = static_cast<char>(~bytes[idx]);
  write_bytes(path, bytes);
}

using testing::FileSizeLimit;

// One stage of mlp_tiny with its optimizer, saved to and loaded from a fresh folder.
class CheckpointTest : public ::testing::Test {
 protected:
  CheckpointTest()
      : plan_(testing::make_test_plan(testing::TestPlanSpec())),
        model_(models::make_model("mlp_tiny")),
        stage_(model_, plan_, 0, torch::kCPU, /*seed=*/1),
        optimizer_(plan_.optimizer, stage_.parameters(), stage_.gradients()),
        dir_(testing::fresh_dir("checkpoints")) {}

  // Saves the stage file and the manifest of `step`; returns the manifest.
  CheckpointManifest save(int64_t step) {
    CheckpointManifest manifest;
    manifest.plan_hash = "plan";
    manifest.step = step;
    manifest.total_steps = 10;
    manifest.data = "synthetic";
    manifest.stage_checksums = {save_stage_checkpoint(dir_, step, "plan", stage_, &optimizer_)};
    write_checkpoint_manifest(dir_, manifest, /*keep=*/3);
    return manifest;
  }

  // The error of resuming the stage from the checkpoint of `step`; "" when it loads.
  std::string resume_error(int64_t step) {
    return error_of([&] {
             const CheckpointManifest m = read_checkpoint_manifest(dir_, step);
             load_stage_checkpoint(dir_, step, "plan", m.stage_checksums.at(0), stage_,
                                   &optimizer_);
           }).first;
  }

  std::string manifest_path(int64_t step) const {
    return checkpoint_step_dir(dir_, step) + "/checkpoint.json";
  }

  Plan plan_;
  models::Model model_;
  StageRuntime stage_;
  runtime::FlatOptimizer optimizer_;
  std::string dir_;
};

TEST_F(CheckpointTest, AFullDiskFailsNamingTheFileAndKeepsTheLastCompleteCheckpoint) {
  save(1);
  stage_.parameters().add_(1);
  std::pair<std::string, ErrorKind> error;
  {
    const FileSizeLimit limit(/*bytes=*/1024);
    error = error_of([&] { save_stage_checkpoint(dir_, 2, "plan", stage_, &optimizer_); });
  }
  EXPECT_EQ(error.second, ErrorKind::kRuntime);
  EXPECT_EQ(error.first, "cannot write '" + checkpoint_stage_path(dir_, 2, 0) + "': File too large");
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  EXPECT_EQ(latest_complete_checkpoint(dir_), 1);
  EXPECT_EQ(resume_error(1), "");
}

TEST_F(CheckpointTest, ResumeRefusesFlippedBytesInTheWeights) {
  save(1);
  const std::string path = checkpoint_stage_path(dir_, 1, 0);
  flip_first_parameter(path, stage_);
  const torch::Tensor before = stage_.parameters().clone();
  const std::string error = resume_error(1);
  EXPECT_NE(error.find("checkpoint '" + path + "': its tensors hash to"), std::string::npos) << error;
  EXPECT_NE(error.find("(the file is corrupt)"), std::string::npos) << error;
  EXPECT_TRUE(torch::equal(stage_.parameters(), before)) << "a refused file changed the stage";
}

// Issue 46: `infer --checkpoint` compared the checksums the files record with the manifest's but
// never hashed the tensors, and served corrupted weights.
TEST_F(CheckpointTest, ServingRefusesFlippedBytesInTheWeightsAsResumeDoes) {
  save(1);
  const std::string path = checkpoint_stage_path(dir_, 1, 0);
  flip_first_parameter(path, stage_);
  const torch::Tensor before = stage_.parameters().clone();
  const auto [error, kind] = error_of([&] {
    load_stage_weights_by_name(dir_, 1, read_checkpoint_manifest(dir_, 1), stage_);
  });
  EXPECT_EQ(kind, ErrorKind::kBadInput);
  EXPECT_NE(error.find("checkpoint '" + path + "': its tensors hash to"), std::string::npos) << error;
  EXPECT_NE(error.find("(the file is corrupt)"), std::string::npos) << error;
  EXPECT_TRUE(torch::equal(stage_.parameters(), before)) << "a refused file changed the stage";
  // An intact checkpoint serves.
  save(2);
  EXPECT_EQ(error_of([&] {
              load_stage_weights_by_name(dir_, 2, read_checkpoint_manifest(dir_, 2), stage_);
            }).first,
            "");
}

// Runs `load` in a child process that an alarm kills if it waits; the child exits 0 when `load`
// fails as bad input with a message containing `expected`.
void expect_refused_without_waiting(const std::function<void()>& load, const std::string& expected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // LibTorch has threads: re-run, not fork alone
  EXPECT_EXIT(
      {
        ::alarm(20);
        const auto outcome = error_of(load);  // no comma: this is a macro argument
        std::fprintf(stderr, "%s\n", outcome.first.c_str());
        const bool refused = outcome.second == ErrorKind::kBadInput;
        std::exit(refused && outcome.first.find(expected) != std::string::npos ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Issue 46: a FIFO as a stage file made `train --resume` and `infer --checkpoint` wait forever.
TEST_F(CheckpointTest, AFifoAsAStageFileIsRefusedNotWaitedFor) {
  save(1);
  const std::string path = checkpoint_stage_path(dir_, 1, 0);
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const std::string expected = path + ": not a regular file (a FIFO); expected a file";
  expect_refused_without_waiting(
      [&] {
        load_stage_checkpoint(dir_, 1, "plan", read_checkpoint_manifest(dir_, 1).stage_checksums[0],
                              stage_, &optimizer_);
      },
      expected);
  expect_refused_without_waiting(
      [&] { load_stage_weights_by_name(dir_, 1, read_checkpoint_manifest(dir_, 1), stage_); },
      expected);
}

// Issue 46: a manifest edited to loss_scale 0 and checksummed again was accepted.
TEST_F(CheckpointTest, ResumeRefusesManifestValuesNoRunWrites) {
  save(3);
  const Json saved = read_json_file(manifest_path(3));
  const auto error_with = [&](const char* key, const Json& value) {
    Json json = saved;
    json[key] = value;
    json.erase("checksum");
    json["checksum"] = content_hash(json.dump());
    write_json_file(manifest_path(3), json);
    return resume_error(3);
  };
  const std::string path = manifest_path(3);
  EXPECT_EQ(error_with("loss_scale", 0),
            path + ": loss_scale: 0: expected a power of two (1 without amp-fp16)");
  EXPECT_EQ(error_with("loss_scale", 3.5),
            path + ": loss_scale: 3.5: expected a power of two (1 without amp-fp16)");
  EXPECT_EQ(error_with("optimizer_steps", 4), path + ": optimizer_steps: 4: expected an integer in [0, 3]");
  EXPECT_EQ(error_with("step", 11), path + ": step: 11: expected an integer in [0, 10]");
  EXPECT_EQ(error_with("loss", -1), path + ": loss: -1: expected a value >= 0");
  EXPECT_EQ(error_with("data", "mnist"),
            path + ": data: \"mnist\": expected fashion-mnist, cifar10 or synthetic");
  EXPECT_EQ(error_with("pp", 4294967297), path + ": pp: 4294967297: expected an integer in [1, 16384]");
  EXPECT_EQ(error_with("test_accuracy", Json::parse(R"([{"epoch": 1, "step": 3, "test_accuracy": 2}])")),
            path + ": test_accuracy[0].test_accuracy: 2: expected a number in [0, 1]");
  const std::string long_value(100000, 'z');
  const std::string checksum_error = error_with("stage_checksums", Json::array({long_value}));
  EXPECT_LT(checksum_error.size(), path.size() + 200) << checksum_error.substr(0, 300);
  EXPECT_NE(checksum_error.find(": stage_checksums: \"zzz"), std::string::npos) << checksum_error.substr(0, 300);
  EXPECT_EQ(error_with("loss_scale", 65536), "");
}

// Issue 46 (found by bench/fuzz_inputs.py): a manifest replaced by a link that loops counted as
// no manifest, so `infer` served the step before it with exit 0. It is the newest checkpoint
// still, and reading it fails naming it.
TEST_F(CheckpointTest, AManifestThatCannotBeReadIsNotSkipped) {
  save(2);
  save(4);
  const std::string path = manifest_path(4);
  fs::remove(path);
  fs::create_symlink(path, path);  // a link to itself
  EXPECT_EQ(latest_complete_checkpoint(dir_), 4);
  const std::string error = resume_error(4);
  EXPECT_EQ(error.rfind(path + ":", 0), 0u) << error;
  save(6);  // the next checkpoint keeps it: it is no incomplete folder
  EXPECT_TRUE(fs::is_symlink(path));
}

// Issue 46: folders a killed run left without a manifest stayed forever.
TEST_F(CheckpointTest, TheNextCheckpointRemovesIncompleteFolders) {
  save(2);
  save_stage_checkpoint(dir_, 4, "plan", stage_, &optimizer_);  // killed before its manifest
  fs::create_directories(checkpoint_step_dir(dir_, 9));
  fs::create_directories(fs::path(dir_) / "other");
  save(6);
  EXPECT_TRUE(fs::exists(checkpoint_step_dir(dir_, 2)));
  EXPECT_TRUE(fs::exists(checkpoint_step_dir(dir_, 6)));
  EXPECT_FALSE(fs::exists(checkpoint_step_dir(dir_, 4)));
  EXPECT_FALSE(fs::exists(checkpoint_step_dir(dir_, 9)));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "other"));
}

TEST_F(CheckpointTest, ResumeRefusesAStageFileOfAnotherStep) {
  save(1);
  stage_.parameters().add_(1);
  save(2);
  fs::copy_file(checkpoint_stage_path(dir_, 1, 0), checkpoint_stage_path(dir_, 2, 0),
                fs::copy_options::overwrite_existing);
  const std::string error = resume_error(2);
  EXPECT_NE(error.find("checkpoint '" + checkpoint_stage_path(dir_, 2, 0) +
                       "' holds step '1', not step 2"),
            std::string::npos)
      << error;
}

TEST_F(CheckpointTest, ResumeRefusesAnEditedManifestOrAWrongStep) {
  save(3);
  Json json = read_json_file(manifest_path(3));
  json["optimizer_steps"] = 7;
  write_json_file(manifest_path(3), json);
  EXPECT_NE(resume_error(3).find(manifest_path(3) + ": checksum: "), std::string::npos)
      << resume_error(3);
  // A step that disagrees with the folder, the checksum made to match.
  json = read_json_file(manifest_path(3));
  json["optimizer_steps"] = 0;  // as saved: only the step disagrees
  json["step"] = 4;
  json.erase("checksum");
  json["checksum"] = content_hash(json.dump());
  write_json_file(manifest_path(3), json);
  EXPECT_NE(resume_error(3).find("step: 4 is not the step of its folder (3)"), std::string::npos)
      << resume_error(3);
}

TEST_F(CheckpointTest, IgnoresStrayFoldersInTheCheckpointFolder) {
  save(2);
  for (const char* stray : {"step-abc", "step-", "step-99999999999999999999", "other"}) {
    fs::create_directories(fs::path(dir_) / stray);
    write_bytes((fs::path(dir_) / stray / "checkpoint.json").string(), "{}");
  }
  EXPECT_EQ(latest_complete_checkpoint(dir_), 2);
  EXPECT_NO_THROW(save(3));
  EXPECT_EQ(latest_complete_checkpoint(dir_), 3);
  EXPECT_EQ(resume_error(3), "");
}

}  // namespace
}  // namespace pipeplan::executor
