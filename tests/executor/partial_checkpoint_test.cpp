// Partial checkpointing in the executor: stages recomputing some of their layers train as one
// process does, and lower their measured peak by what the memory model predicts.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "executor/checkpoint.h"
#include "plans/plan.h"
#include "plans/run.h"
#include "tests/executor/train_harness.h"

namespace pipeplan::testing {
namespace {

constexpr int kSteps = 5;
constexpr double kLossRelativeTolerance = 1e-5;

// Partial checkpointing: stages that recompute some of their layers (the model's first layer,
// whose input needs no gradient; a block between two that keep their graphs; the head under
// the loss) train as one process of the same micro-batches, under 1f1b, gpipe with two
// replicas overlapping their all-reduce with the backward, and interleaved-1f1b, and measure a
// recompute.
TEST(SerialPartialCheckpointTest, RecomputingSomeLayersOfAStageMatchesTheSingleProcessRun) {
  struct Case {
    std::string model;
    int dp, pp, virtual_stages;
    Schedule schedule;
    std::vector<std::vector<int>> positions;  // per plan.stages entry
  };
  const std::vector<Case> cases = {
      {"gpt_tiny", 1, 2, 1, Schedule::kOneFOneB, {{1}, {0, 2}}},
      {"mlp_tiny", 2, 2, 1, Schedule::kGpipe, {{0}, {1}}},
      {"gpt_tiny", 1, 2, 2, Schedule::kInterleaved1F1B, {{}, {0}, {}, {1}}}};
  for (const Case& test : cases) {
    TestPlanSpec reference_spec;
    reference_spec.model = test.model;
    reference_spec.num_micro_batches = 4;
    const TrainRun reference = train_new(make_test_plan(reference_spec), "reference", kSteps);
    expect_success(reference);
    TestPlanSpec spec = reference_spec;
    spec.dp = test.dp;
    spec.pp = test.pp;
    spec.virtual_stages = test.virtual_stages;
    spec.schedule = test.schedule;
    spec.num_micro_batches = reference_spec.num_micro_batches / test.dp;
    spec.recompute_positions = test.positions;
    Plan plan = make_test_plan(spec);
    // With replicas: one bucket per stage, whose all-reduce starts once the gradient
    // accumulators' hooks have counted every parameter of it: a recomputed layer between two
    // others must count each of its parameters once, not start the bucket early.
    if (test.dp > 1) plan.data_parallel = {/*overlap=*/true, kDefaultBucketBytes, /*zero=*/0};
    const std::string what = test.model + " " + plan_configuration(plan);
    const TrainRun run = train_new(plan, "partial", kSteps);
    expect_success(run);
    expect_same_losses(step_losses(run.log), step_losses(reference.log), kLossRelativeTolerance,
                       what);
    expect_same_parameters(final_parameters(run, test.pp, kSteps),
                           final_parameters(reference, 1, kSteps), what);
    const std::vector<StageMeasurement> measured = read_run(run.run_json).measured.stages;
    for (size_t chunk = 0; chunk < plan.stages.size(); ++chunk) {
      const double recompute_ms = measured.at(chunk % static_cast<size_t>(test.pp)).recompute_ms;
      if (!plan.stages[chunk].recompute_layers.empty()) {
        EXPECT_GT(recompute_ms, 0) << what << ": stage " << chunk % test.pp;
      } else if (test.virtual_stages == 1) {
        EXPECT_EQ(recompute_ms, 0) << what << ": stage " << chunk;
      }
    }
  }
}

// Every buffer ("bufferN.NAME": batch-norm running statistics and counts) of the checkpoint of
// `step`, from all `pp` stage files.
std::map<std::string, torch::Tensor> final_buffers(const TrainRun& run, int pp, int64_t step) {
  std::map<std::string, torch::Tensor> all;
  for (int stage = 0; stage < pp; ++stage) {
    torch::serialize::InputArchive archive;
    archive.load_from(executor::checkpoint_stage_path(run.checkpoints, step, stage));
    for (const std::string& key : archive.keys()) {
      if (key.rfind("buffer", 0) != 0) continue;
      torch::Tensor tensor;
      archive.read(key, tensor);
      all[key] = tensor.to(torch::kFloat64);
    }
  }
  return all;
}

// resnet_tiny's batch norms: a stage checkpointed whole and a stage recomputing one block update
// their running statistics once per forward, as one process does (a recompute that updated them
// again moved them further).
TEST(SerialPartialCheckpointTest, RecomputesLeaveBatchNormStatisticsAsOneProcess) {
  TestPlanSpec spec;
  spec.model = "resnet_tiny";
  const TrainRun reference = train_new(make_test_plan(spec), "reference", kSteps);
  expect_success(reference);
  spec.pp = 2;
  spec.schedule = Schedule::kGpipe;
  spec.checkpoint = {true, false};
  spec.recompute_positions = {{}, {1}};
  const Plan plan = make_test_plan(spec);
  const TrainRun run = train_new(plan, "recomputed", kSteps);
  expect_success(run);
  const std::string what = "resnet_tiny " + plan_configuration(plan);
  expect_same_losses(step_losses(run.log), step_losses(reference.log), kLossRelativeTolerance,
                     what);
  const auto buffers = final_buffers(run, 2, kSteps);
  ASSERT_FALSE(buffers.empty());
  expect_same_parameters(buffers, final_buffers(reference, 1, kSteps), what + " buffers");
  expect_same_parameters(final_parameters(run, 2, kSteps), final_parameters(reference, 1, kSteps),
                         what);
}

// gpt_tiny on two stages split 0:3,3:6 (1f1b, b = 4, m = 8), planned once with memory to spare
// and once with a device 1 byte short of stage 0's plain peak: the search recomputes the fewest
// of stage 0's layers that fit. Both plans trained, the measured drop of stage 0's peak is the
// predicted one within 5%, and its recompute takes about the recomputed layers' share of the
// stage's forward, as the profile predicts it.
TEST(SerialPartialCheckpointTest, LowersTheMeasuredPeakByThePredictedBytes) {
  const std::string dir = fresh_dir("partial");
  expect_success(run_ranks(0, {"profile", "--model", "gpt_tiny", "--batch-sizes", "4,8", "--warmup",
                               "1", "--repeats", "3", "-o", dir + "/profile.json"}));
  const auto plan_with = [&](const std::string& memory, const std::string& name) {
    const std::string sub = dir + "/" + name;
    std::filesystem::create_directories(sub);
    expect_success(run_ranks(
        0, {"plan", "--profile", dir + "/profile.json", "--devices", "2", "--device-memory", memory,
            "--global-batch", "32", "--pp", "2", "--micro-batch-size", "4", "--schedule", "1f1b",
            "--partition", "0:3,3:6", "-o", sub + "/plan.json"}));
    return read_plan(sub + "/plan.json");
  };
  const Plan plain = plan_with("1GiB", "plain");
  ASSERT_FALSE(plain.stages[0].checkpoint);
  ASSERT_TRUE(plain.stages[0].recompute_layers.empty());
  const int64_t plain_peak = plain.predictions.stages[0].peak_memory_bytes;
  const Plan partial = plan_with(std::to_string(plain_peak - 1), "partial");
  const std::vector<int>& recomputed = partial.stages[0].recompute_layers;
  ASSERT_FALSE(recomputed.empty()) << plan_configuration(partial);
  ASSERT_LT(recomputed.size(), 3u);
  const StagePrediction& predicted = partial.predictions.stages[0];
  const int64_t predicted_drop = plain_peak - predicted.peak_memory_bytes;
  ASSERT_GT(predicted_drop, 0);
  for (const std::string name : {"plain", "partial"}) {
    const std::string sub = dir + "/" + name;
    expect_success(run_ranks(2, {"train", "--plan", sub + "/plan.json", "--data", "synthetic",
                                 "--steps", "6", "-o", sub + "/run.json"}));
    expect_memory_predicted(sub, 2, 5.0);
  }
  const pipeplan::Run plain_run = read_run(dir + "/plain/run.json");
  const pipeplan::Run partial_run = read_run(dir + "/partial/run.json");
  const double measured_drop =
      static_cast<double>(plain_run.measured.stages[0].peak_memory_bytes -
                          partial_run.measured.stages[0].peak_memory_bytes);
  EXPECT_NEAR(measured_drop, static_cast<double>(predicted_drop), 0.05 * predicted_drop);
  // Time: the stage's recompute against its own forward, a ratio of one run, against the
  // profile's (the host's speed drifts between runs; the shares stay).
  const StageMeasurement& measured = partial_run.measured.stages[0];
  ASSERT_GT(measured.fwd_ms, 0);
  const double predicted_share = predicted.recompute_ms / predicted.fwd_ms;
  const double measured_share = measured.recompute_ms / measured.fwd_ms;
  EXPECT_GT(measured_share, 0.5 * predicted_share)
      << measured.recompute_ms << " ms of " << measured.fwd_ms;
  EXPECT_LT(measured_share, 2.0 * predicted_share)
      << measured.recompute_ms << " ms of " << measured.fwd_ms;
  EXPECT_EQ(plain_run.measured.stages[0].recompute_ms, 0);
}

}  // namespace
}  // namespace pipeplan::testing
