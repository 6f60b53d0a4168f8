// Tests for executor/stage.h.
#include "executor/stage.h"

#include <gtest/gtest.h>

#include "models/model.h"
#include "tests/executor/train_harness.h"
#include "tests/models/torchscript_files.h"

namespace pipeplan::executor {
namespace {

TEST(StageTest, ParametersAreViewsOfOneFlatBuffer) {
  const Plan plan = testing::make_test_plan(testing::TestPlanSpec());
  const models::Model model = models::make_model("mlp_tiny");
  StageRuntime stage(model, plan, 0, torch::kCPU, /*seed=*/1);
  EXPECT_EQ(stage.parameters().numel(), models::parameter_count(model));
  stage.parameters().fill_(0.5);
  for (const models::LayerPtr& layer : stage.layers())
    for (const torch::Tensor& parameter : layer->parameters())
      EXPECT_TRUE(torch::all(parameter == 0.5).item<bool>());
}

// Forward and backward of the same micro-batches with and without checkpointing.
TEST(StageTest, CheckpointingGivesTheSameLossAndGradients) {
  testing::TestPlanSpec spec;
  const Plan plain_plan = testing::make_test_plan(spec);
  spec.checkpoint = {true};
  const Plan checkpoint_plan = testing::make_test_plan(spec);
  const models::Model model = models::make_model("mlp_tiny");
  StageRuntime plain(model, plain_plan, 0, torch::kCPU, /*seed=*/1);
  StageRuntime checkpointed(model, checkpoint_plan, 0, torch::kCPU, /*seed=*/1);
  const auto [input, target] = models::random_batch(model, 4, /*seed=*/2);
  plain.begin_iteration(2);
  checkpointed.begin_iteration(2);
  for (int mb = 0; mb < 2; ++mb) {
    const torch::Tensor a = plain.forward(mb, input, target, /*rng_seed=*/mb);
    const torch::Tensor b = checkpointed.forward(mb, input, target, /*rng_seed=*/mb);
    EXPECT_TRUE(torch::equal(a, b));
  }
  for (int mb = 0; mb < 2; ++mb) {
    plain.backward(mb, torch::Tensor(), 0.5);
    checkpointed.recompute(mb);
    checkpointed.backward(mb, torch::Tensor(), 0.5);
  }
  EXPECT_GT(plain.gradients().abs().sum().item<double>(), 0);
  EXPECT_TRUE(torch::equal(plain.gradients(), checkpointed.gradients()));
}

// One stage of a split for the B-and-W test.
struct SplitCase {
  std::string model;
  std::vector<std::string> model_args;
  int pp = 1;
  int stage = 0;
  bool checkpoint = false;
};

std::string describe(const SplitCase& split) {
  return split.model + " pp=" + std::to_string(split.pp) + " stage " + std::to_string(split.stage) +
         (split.checkpoint ? " checkpointed" : "");
}

constexpr int kSplitMicroBatches = 2;
constexpr int64_t kSplitRows = 4;
constexpr double kSplitLossFactor = 0.5;
constexpr double kSplitRelativeTolerance = 1e-6;
constexpr double kSplitAbsoluteTolerance = 1e-6;

// zb-h1's B then W (in its order: every B, then every W) against one whole backward per
// micro-batch on the same stage from the same weights, inputs and output gradients: the same
// input gradients and the same accumulated parameter gradients; B alone touches no weight.
void expect_split_backward_matches(const SplitCase& split) {
  const std::string what = describe(split);
  testing::TestPlanSpec spec;
  spec.model = split.model;
  spec.model_args = split.model_args;
  spec.pp = split.pp;
  spec.micro_batch_size = kSplitRows;
  spec.num_micro_batches = kSplitMicroBatches;
  spec.checkpoint.assign(static_cast<size_t>(split.pp), split.checkpoint);
  const Plan whole_plan = testing::make_test_plan(spec);
  spec.schedule = Schedule::kZeroBubbleH1;
  const Plan split_plan = testing::make_test_plan(spec);
  const models::Model model = models::make_model(split.model, split.model_args);
  StageRuntime whole(model, whole_plan, split.stage, torch::kCPU, /*seed=*/1);
  StageRuntime halves(model, split_plan, split.stage, torch::kCPU, /*seed=*/1);
  ASSERT_FALSE(whole.split_backward());
  ASSERT_TRUE(halves.split_backward());
  const StagePlan& stage = whole_plan.stages[split.stage];
  const auto with_rows = [](std::vector<int64_t> shape) {
    shape.insert(shape.begin(), kSplitRows);
    return shape;
  };
  whole.begin_iteration(kSplitMicroBatches);
  halves.begin_iteration(kSplitMicroBatches);
  std::vector<torch::Tensor> output_gradients;
  for (int mb = 0; mb < kSplitMicroBatches; ++mb) {
    auto [input, target] = models::random_batch(model, kSplitRows, /*seed=*/10 + mb);
    torch::manual_seed(20 + mb);
    if (!whole.is_first())
      input = torch::randn(with_rows(stage.input_sample_shape),
                           boundary_dtype(stage.input_dtype, "input_dtype"));
    output_gradients.push_back(whole.is_last() ? torch::Tensor()
                                               : torch::randn(with_rows(stage.output_sample_shape)));
    const torch::Tensor a = whole.forward(mb, input, target, /*rng_seed=*/mb);
    const torch::Tensor b = halves.forward(mb, input, target, /*rng_seed=*/mb);
    EXPECT_TRUE(torch::equal(a, b)) << what << ": forward of micro-batch " << mb;
  }
  std::vector<torch::Tensor> whole_input_gradients, split_input_gradients;
  for (int mb = 0; mb < kSplitMicroBatches; ++mb) {
    if (split.checkpoint) whole.recompute(mb);
    whole_input_gradients.push_back(whole.backward(mb, output_gradients[mb], kSplitLossFactor));
  }
  for (int mb = 0; mb < kSplitMicroBatches; ++mb) {
    if (split.checkpoint) halves.recompute(mb);
    split_input_gradients.push_back(halves.backward_input(mb, output_gradients[mb], kSplitLossFactor));
  }
  EXPECT_EQ(halves.gradients().abs().sum().item<double>(), 0) << what << ": B touched a weight";
  for (int mb = 0; mb < kSplitMicroBatches; ++mb) halves.backward_weight(mb);
  EXPECT_GT(whole.gradients().abs().sum().item<double>(), 0) << what;
  EXPECT_TRUE(torch::allclose(halves.gradients(), whole.gradients(), kSplitRelativeTolerance,
                              kSplitAbsoluteTolerance))
      << what << ": parameter gradients differ by "
      << (halves.gradients() - whole.gradients()).abs().max().item<double>();
  for (int mb = 0; mb < kSplitMicroBatches; ++mb) {
    const torch::Tensor& expected = whole_input_gradients[mb];
    const torch::Tensor& actual = split_input_gradients[mb];
    ASSERT_EQ(actual.defined(), expected.defined()) << what << ": micro-batch " << mb;
    if (!expected.defined()) continue;
    EXPECT_TRUE(torch::allclose(actual, expected, kSplitRelativeTolerance, kSplitAbsoluteTolerance))
        << what << ": input gradient of micro-batch " << mb << " differs by "
        << (actual - expected).abs().max().item<double>();
  }
}

TEST(StageTest, BackwardInputThenWeightEqualsOneBackward) {
  const std::vector<std::string> eight_layers = {"layers=8"};
  for (const SplitCase& split : {SplitCase{"mlp_tiny", eight_layers, 1, 0, false},
                                 SplitCase{"mlp_tiny", eight_layers, 3, 0, false},
                                 SplitCase{"mlp_tiny", eight_layers, 3, 1, false},
                                 SplitCase{"mlp_tiny", eight_layers, 3, 2, false},
                                 SplitCase{"mlp_tiny", eight_layers, 3, 1, true},
                                 SplitCase{"mlp_tiny", eight_layers, 3, 2, true},
                                 SplitCase{"gpt_tiny", {}, 2, 0, false},
                                 SplitCase{"gpt_tiny", {}, 2, 1, false},
                                 SplitCase{"gpt_tiny", {}, 2, 0, true}})
    expect_split_backward_matches(split);
}

// tied_gpt.pt's embedding and head share one weight: on one stage, W must add both uses.
TEST(StageTest, BackwardWeightSumsATiedParametersUsesInOneStage) {
  if (testing::torch_python().empty()) GTEST_SKIP() << testing::kNoTorchPython;
  std::string error;
  const std::string dir = testing::test_models_dir(testing::kTrainSeed, &error);
  ASSERT_TRUE(error.empty()) << error;
  const std::string file = dir + "/tied_gpt.pt";
  ASSERT_EQ(models::make_model(file).ties.size(), 1u);
  expect_split_backward_matches(SplitCase{file, {}, 1, 0, false});
}

// interleaved-1f1b, pp=2, V=2 over mlp_tiny's 8 layers: stage 0 holds chunks 0 and 2 (layers
// 0-1 and 4-5) in one flat buffer; only the model's first chunk takes data, only its last (on
// stage 1) computes the loss; a chunk's activation goes through the next chunk's stage.
TEST(StageTest, AnInterleavedStageHoldsItsChunksInOneFlatBuffer) {
  testing::TestPlanSpec spec;
  spec.model_args = {"layers=8"};
  spec.pp = 2;
  spec.schedule = Schedule::kInterleaved1F1B;
  spec.virtual_stages = 2;
  const Plan plan = testing::make_test_plan(spec);
  const models::Model model = models::make_model("mlp_tiny", spec.model_args);
  StageRuntime first(model, plan, 0, torch::kCPU, /*seed=*/1);
  StageRuntime second(model, plan, 1, torch::kCPU, /*seed=*/1);
  ASSERT_EQ(first.num_chunks(), 2);
  ASSERT_EQ(first.layers().size(), 4u);
  std::vector<int> indices;
  for (size_t position = 0; position < first.layers().size(); ++position)
    indices.push_back(first.layer_index(position));
  EXPECT_EQ(indices, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(first.parameters().numel() + second.parameters().numel(),
            models::parameter_count(model));
  EXPECT_TRUE(first.is_first(0));
  EXPECT_FALSE(first.is_first(1));
  EXPECT_FALSE(first.is_last());
  EXPECT_FALSE(second.is_last(0));
  EXPECT_TRUE(second.is_last(1));
  EXPECT_TRUE(second.is_last());
  // One micro-batch through chunks 0, 1, 2, 3 (stages 0, 1, 0, 1) gives the one-stage loss.
  testing::TestPlanSpec whole_spec;
  whole_spec.model_args = spec.model_args;
  const Plan whole_plan = testing::make_test_plan(whole_spec);
  StageRuntime whole(model, whole_plan, 0, torch::kCPU, /*seed=*/1);
  const auto [input, target] = models::random_batch(model, 4, /*seed=*/2);
  for (StageRuntime* stage : {&first, &second, &whole}) stage->begin_iteration(1);
  torch::Tensor x = input;
  for (int chunk = 0; chunk < 4; ++chunk)
    x = (chunk % 2 == 0 ? first : second).forward(chunk / 2, 0, x, target, /*rng_seed=*/3);
  EXPECT_TRUE(torch::allclose(x, whole.forward(0, input, target, /*rng_seed=*/3)));
}

TEST(StageTest, MicroBatchSeedsDifferByStepAndMicroBatch) {
  // Fixed across builds and versions (a resumed run draws the same dropout masks): the value of
  // mix_seed(mix_seed(1, 2), 3) from a Python transcription of SplitMix64's finalizer.
  EXPECT_EQ(micro_batch_seed(1, 2, 3), 0x0ee3bb459e9e297bULL);
  EXPECT_NE(micro_batch_seed(1, 2, 3), micro_batch_seed(1, 3, 3));
  EXPECT_NE(micro_batch_seed(1, 2, 3), micro_batch_seed(1, 2, 4));
}

}  // namespace
}  // namespace pipeplan::executor
