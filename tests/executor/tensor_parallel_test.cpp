// Tensor parallelism in the executor: transformer blocks split over tp ranks train as one
// process does, alone, beside pipeline stages and beside replicas, and resume exactly.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "executor/checkpoint.h"
#include "executor/stage.h"
#include "models/blocks.h"
#include "models/model.h"
#include "plans/plan.h"
#include "plans/profile.h"
#include "plans/run.h"
#include "tests/executor/train_harness.h"
#include "tests/models/torchscript_files.h"

namespace pipeplan::testing {
namespace {

constexpr int kSteps = 3;
constexpr double kLossRelativeTolerance = 1e-5;

// The block shape of a zoo transformer's configuration.
models::BlockShape block_shape(const Plan& plan) {
  const Json& config = plan.model.config;
  models::BlockShape shape;
  shape.hidden = config.at("hidden").get<int64_t>();
  shape.heads = config.at("heads").get<int64_t>();
  shape.mlp_dim = config.at("mlp_dim").get<int64_t>();
  return shape;
}

// What tp rank `tp_rank` of a group of `tp` should hold of one process's parameters `whole`
// ("layerN.NAME"): the blocks' shards, every other layer whole.
std::map<std::string, torch::Tensor> shards_of(const std::map<std::string, torch::Tensor>& whole,
                                               const Plan& plan, int tp_rank, int tp) {
  const models::Model model = models::make_model_from_config(plan.model.name, plan.model.config);
  std::map<std::string, torch::Tensor> shards;
  for (const auto& [name, tensor] : whole) {
    const size_t dot = name.find('.');
    const int layer_idx = std::stoi(name.substr(5, dot - 5));  // after "layer"
    const bool splits = model.layers.at(static_cast<size_t>(layer_idx)).kind == "block";
    shards[name] = splits ? models::block_parameter_shard(name.substr(dot + 1), tensor,
                                                          block_shape(plan), tp_rank, tp)
                          : tensor;
  }
  return shards;
}

// The parameters of tp rank `tp_rank` at the checkpoint of `step`, from all `pp` stage files.
std::map<std::string, torch::Tensor> rank_parameters(const TrainRun& run, int pp, int tp_rank,
                                                     int64_t step) {
  std::map<std::string, torch::Tensor> all;
  for (int stage = 0; stage < pp; ++stage)
    for (auto& [name, tensor] : executor::read_checkpoint_parameters(
             executor::checkpoint_stage_path(run.checkpoints, step, stage, tp_rank)))
      all[name] = tensor;
  return all;
}

// The parameters ("layerN.NAME") of one stage holding the whole model of `whole_plan` (one
// process, one stage), loaded by name from `run`'s checkpoint of kSteps as infer loads them.
std::map<std::string, torch::Tensor> served_whole(const TrainRun& run, const Plan& whole_plan) {
  const models::Model model =
      models::make_model_from_config(whole_plan.model.name, whole_plan.model.config);
  executor::StageRuntime stage(model, whole_plan, 0, torch::kCPU, /*seed=*/99);
  executor::load_stage_weights_by_name(
      run.checkpoints, kSteps, executor::read_checkpoint_manifest(run.checkpoints, kSteps), stage);
  std::map<std::string, torch::Tensor> loaded;
  for (size_t position = 0; position < stage.layers().size(); ++position)
    for (const auto& item : stage.layers()[position]->named_parameters())
      loaded["layer" + std::to_string(stage.layer_index(position)) + "." + item.key()] =
          item.value();
  return loaded;
}

struct Case {
  std::string model;
  int dp, tp, pp, virtual_stages;
  Schedule schedule;
};

// tp = 2 alone, beside two stages under each schedule, and beside two replicas: the losses and
// every tp rank's parameters after kSteps equal one process's (its parameters cut the same way).
TEST(SerialTensorParallelTest, SplitBlocksTrainAsOneProcess) {
  const std::vector<Case> cases = {
      {"gpt_tiny", 1, 2, 1, 1, Schedule::kOneFOneB},
      {"gpt_tiny", 1, 2, 2, 1, Schedule::kOneFOneB},
      {"gpt_tiny", 1, 2, 2, 1, Schedule::kGpipe},
      {"gpt_tiny", 1, 2, 2, 1, Schedule::kZeroBubbleH1},
      {"gpt_tiny", 1, 2, 2, 2, Schedule::kInterleaved1F1B},
      {"gpt_tiny", 2, 2, 1, 1, Schedule::kOneFOneB},
      {"vit_tiny", 1, 2, 2, 1, Schedule::kOneFOneB},
  };
  std::map<std::string, TrainRun> references;
  for (const Case& test : cases) {
    TestPlanSpec reference_spec;
    reference_spec.model = test.model;
    reference_spec.num_micro_batches = 4;
    if (references.count(test.model) == 0) {
      references[test.model] = train_new(make_test_plan(reference_spec), "reference", kSteps);
      expect_success(references[test.model]);
    }
    const TrainRun& reference = references[test.model];
    TestPlanSpec spec = reference_spec;
    spec.dp = test.dp;
    spec.tp = test.tp;
    spec.pp = test.pp;
    spec.virtual_stages = test.virtual_stages;
    spec.schedule = test.schedule;
    spec.num_micro_batches = reference_spec.num_micro_batches / test.dp;
    const Plan plan = make_test_plan(spec);
    const std::string what = test.model + " " + plan_configuration(plan);
    const TrainRun run = train_new(plan, "tensor-parallel", kSteps);
    expect_success(run);
    expect_same_losses(step_losses(run.log), step_losses(reference.log), kLossRelativeTolerance,
                       what);
    const std::map<std::string, torch::Tensor> whole = final_parameters(reference, 1, kSteps);
    for (int tp_rank = 0; tp_rank < test.tp; ++tp_rank)
      expect_same_parameters(rank_parameters(run, test.pp, tp_rank, kSteps),
                             shards_of(whole, plan, tp_rank, test.tp),
                             what + " tp rank " + std::to_string(tp_rank));
  }
}

// The shards really are halves: a block's split weights on tp rank 1 are not rank 0's.
TEST(SerialTensorParallelTest, EachRankHoldsItsOwnShard) {
  TestPlanSpec spec;
  spec.model = "gpt_tiny";
  spec.tp = 2;
  const Plan plan = make_test_plan(spec);
  const TrainRun run = train_new(plan, "shards", /*steps=*/1);
  expect_success(run);
  const auto first = rank_parameters(run, 1, /*tp_rank=*/0, 1);
  const auto second = rank_parameters(run, 1, /*tp_rank=*/1, 1);
  const models::BlockShape shape = block_shape(plan);
  EXPECT_EQ(first.at("layer1.fc1.weight").size(0), shape.mlp_dim / 2);
  EXPECT_EQ(first.at("layer1.in_proj.weight").size(0), 3 * shape.hidden / 2);
  EXPECT_FALSE(torch::equal(first.at("layer1.fc1.weight"), second.at("layer1.fc1.weight")));
  EXPECT_TRUE(torch::equal(first.at("layer1.ln_1.weight"), second.at("layer1.ln_1.weight")));
  EXPECT_TRUE(torch::equal(first.at("layer0.token.weight"), second.at("layer0.token.weight")));
}

// A checkpoint of tp = 2 × pp = 2 serves whole: infer's loader joins each split block's shards
// from every tp rank's file, giving one process's weights after the same steps.
TEST(SerialTensorParallelTest, ATensorParallelCheckpointLoadsWhole) {
  TestPlanSpec reference_spec;
  reference_spec.model = "gpt_tiny";
  reference_spec.num_micro_batches = 4;
  const Plan reference_plan = make_test_plan(reference_spec);
  const TrainRun reference = train_new(reference_plan, "reference", kSteps);
  expect_success(reference);
  TestPlanSpec spec = reference_spec;
  spec.tp = 2;
  spec.pp = 2;
  const TrainRun run = train_new(make_test_plan(spec), "tensor-parallel", kSteps);
  expect_success(run);
  expect_same_parameters(served_whole(run, reference_plan), final_parameters(reference, 1, kSteps),
                         "served whole");
}

// A run stopped after a checkpoint resumes from each tp rank's own file to the same numbers.
TEST(SerialTensorParallelTest, ResumingReproducesTheUninterruptedRun) {
  TestPlanSpec spec;
  spec.model = "gpt_tiny";
  spec.tp = 2;
  spec.pp = 2;
  const Plan plan = make_test_plan(spec);
  const int steps = 4;
  const TrainRun full = train_new(plan, "uninterrupted", steps);
  expect_success(full);
  TrainRun broken = in_dir(fresh_dir("interrupted"));
  train(&broken, plan, steps, {"--checkpoint-every", "2"}, {{"PIPEPLAN_TEST_FAIL_AT_STEP", "4"}});
  for (const RankExit& exit : broken.exits) expect_one_line_error(exit, 1, "before step 4");
  train(&broken, plan, steps, {"--checkpoint-every", "2", "--resume"});
  expect_success(broken);
  expect_same_losses(step_losses(broken.log), step_losses(full.log), 0, "resumed");
  for (int tp_rank = 0; tp_rank < 2; ++tp_rank)
    expect_same_parameters(rank_parameters(broken, 2, tp_rank, steps),
                           rank_parameters(full, 2, tp_rank, steps), "resumed");
}

// Profiled with its shards, planned at tp = 2 × pp = 2 and trained on four ranks: each stage's
// measured peak is the predicted one within 5%. The plan refuses a tp that does not divide the
// heads, naming them.
TEST(SerialTensorParallelTest, PlannedRunsPeakAsPredicted) {
  const std::string dir = fresh_dir("planned");
  expect_success(
      run_ranks(0, {"profile", "--model", "gpt_tiny", "--batch-sizes", "4,8", "--warmup", "1",
                    "--repeats", "3", "--tp-sizes", "2,3,8", "-o", dir + "/profile.json"}));
  // Sizes that do not divide gpt_tiny's 4 heads are skipped; each block has its tp = 2 shard,
  // with 25,184 of the block's 49,984 parameters (layer norms and two biases stay whole) and
  // fewer bytes kept for the backward; the embedding and head have none.
  const Profile profile = read_profile(dir + "/profile.json");
  EXPECT_EQ(profile.settings.tp_sizes, std::vector<int>{2});
  for (const LayerProfile& layer : profile.layers) {
    ASSERT_EQ(layer.tp_shards.size(), layer.kind == "block" ? 1u : 0u) << layer.name;
    if (layer.kind != "block") continue;
    const LayerProfile& shard = layer.tp_shards[0];
    EXPECT_EQ(layer.param_count, 49984);
    EXPECT_EQ(shard.param_count, 25184);
    EXPECT_LT(shard.points[0].retained_bytes, layer.points[0].retained_bytes);
    EXPECT_EQ(layer.tp_divides.at("heads"), 4);
  }
  const std::vector<std::string> plan_args = {"plan",
                                              "--profile",
                                              dir + "/profile.json",
                                              "--devices",
                                              "4",
                                              "--device-memory",
                                              "1GiB",
                                              "--global-batch",
                                              "16",
                                              "--pp",
                                              "2",
                                              "--micro-batch-size",
                                              "4",
                                              "--schedule",
                                              "1f1b",
                                              "-o",
                                              dir + "/plan.json"};
  std::vector<std::string> with_tp = plan_args;
  with_tp.insert(with_tp.end(), {"--tp", "2"});
  expect_success(run_ranks(0, with_tp));
  const Plan plan = read_plan(dir + "/plan.json");
  ASSERT_EQ(plan.tp(), 2);
  ASSERT_EQ(plan.ranks.size(), 4u);
  expect_success(run_ranks(4, {"train", "--plan", dir + "/plan.json", "--data", "synthetic",
                               "--steps", "6", "-o", dir + "/run.json"}));
  expect_memory_predicted(dir, 2, 5.0);
  // compare shows the tp all-reduces of each stage, predicted and measured.
  std::ifstream compare_file(dir + "/compare.json");
  const Json compare = Json::parse(compare_file);
  for (int stage = 0; stage < 2; ++stage) {
    const Json& tp_allreduce = compare.at("stages").at(stage).at("tp_allreduce_ms");
    EXPECT_GT(tp_allreduce.at("predicted").get<double>(), 0) << tp_allreduce.dump();
    EXPECT_GT(tp_allreduce.at("measured").get<double>(), 0) << tp_allreduce.dump();
  }
  std::vector<std::string> indivisible = plan_args;
  indivisible.insert(indivisible.end(), {"--tp", "3"});
  const std::vector<RankExit> refused = run_ranks(0, indivisible);
  ASSERT_EQ(refused.size(), 1u);
  expect_one_line_error(refused[0], 2, "--tp: 3: does not divide heads = 4 of layer 'block0'");
}

// What tp rank `tp_rank` of `tp` should hold of tied_gpt.pt's parameters `whole`: each block's
// MLP (mlp.0: Linear, mlp.1: GELU, mlp.2: Linear) cut as Megatron cuts it, every other
// parameter whole (attention is not a pattern pipeplan proves: it stays replicated).
std::map<std::string, torch::Tensor> mlp_slices(const std::map<std::string, torch::Tensor>& whole,
                                                int tp_rank, int tp) {
  std::map<std::string, torch::Tensor> slices;
  for (const auto& [name, tensor] : whole) {
    const bool first = name.find(".mlp.0.") != std::string::npos;
    const bool second = name.find(".mlp.2.weight") != std::string::npos;
    const int64_t dim = first ? 0 : 1;
    const int64_t size = tensor.dim() > dim ? tensor.size(dim) / tp : 0;
    slices[name] = first || second ? tensor.narrow(dim, tp_rank * size, size) : tensor;
  }
  return slices;
}

// A TorchScript GPT's blocks split their MLPs: tp = 2 alone, beside two stages (1f1b, zb-h1)
// and beside two replicas train as one process does (losses, and each rank's slices of its
// parameters); the tp = 2 × pp = 2 checkpoint serves whole, its slices joined by shape.
TEST(SerialTensorParallelTest, TorchScriptMlpsSplitAndTrainAsOneProcess) {
  if (torch_python().empty()) GTEST_SKIP() << kNoTorchPython;
  std::string error;
  const std::string file = test_models_dir(kTrainSeed, &error) + "/tied_gpt.pt";
  ASSERT_TRUE(error.empty()) << error;
  TestPlanSpec reference_spec;
  reference_spec.model = file;
  reference_spec.micro_batch_size = 2;
  reference_spec.num_micro_batches = 4;
  const Plan reference_plan = make_test_plan(reference_spec);
  const TrainRun reference = train_new(reference_plan, "script-reference", kSteps);
  expect_success(reference);
  const std::map<std::string, torch::Tensor> whole = final_parameters(reference, 1, kSteps);
  const std::vector<Case> cases = {{file, 1, 2, 1, 1, Schedule::kOneFOneB},
                                   {file, 1, 2, 2, 1, Schedule::kZeroBubbleH1},
                                   {file, 2, 2, 1, 1, Schedule::kOneFOneB},
                                   {file, 1, 2, 2, 1, Schedule::kOneFOneB}};
  TrainRun run;
  for (const Case& test : cases) {
    TestPlanSpec spec = reference_spec;
    spec.dp = test.dp;
    spec.tp = test.tp;
    spec.pp = test.pp;
    spec.schedule = test.schedule;
    spec.num_micro_batches = reference_spec.num_micro_batches / test.dp;
    const Plan plan = make_test_plan(spec);
    const std::string what = "tied_gpt.pt " + plan_configuration(plan);
    run = train_new(plan, "script-tensor-parallel", kSteps);
    expect_success(run);
    expect_same_losses(step_losses(run.log), step_losses(reference.log), kLossRelativeTolerance,
                       what);
    for (int tp_rank = 0; tp_rank < test.tp; ++tp_rank)
      expect_same_parameters(rank_parameters(run, test.pp, tp_rank, kSteps),
                             mlp_slices(whole, tp_rank, test.tp),
                             what + " tp rank " + std::to_string(tp_rank));
  }
  // The last run's (tp = 2 × pp = 2) checkpoint, loaded into one whole stage.
  expect_same_parameters(served_whole(run, reference_plan), whole, "tied_gpt.pt served whole");
}

// A group size that does not divide the heads is refused before any rank waits, naming both.
TEST(SerialTensorParallelTest, RefusesAGroupThatDoesNotDivideTheHeads) {
  TestPlanSpec spec;
  spec.model = "gpt_tiny";
  spec.tp = 3;  // gpt_tiny has 4 heads
  const Plan plan = make_test_plan(spec);
  const TrainRun run = train_new(plan, "indivisible", /*steps=*/1);
  ASSERT_EQ(run.exits.size(), 3u);
  for (const RankExit& exit : run.exits)
    expect_one_line_error(exit, 2, "tensor_parallel.tp: 3: does not divide heads = 4");
}

}  // namespace
}  // namespace pipeplan::testing
