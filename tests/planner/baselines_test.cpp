// Tests for planner/baselines.h: the baseline splits, --partition parsing and validation, and
// that baselines are checked for memory like any other split.
#include "planner/baselines.h"

#include <gtest/gtest.h>

#include "tests/common/error_of.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

using testing::error_of;

TEST(BaselinesTest, UniformGivesEqualLayerCounts) {
  EXPECT_EQ(uniform_boundaries(10, 3), (std::vector<int>{0, 3, 6, 10}));
  EXPECT_EQ(uniform_boundaries(4, 4), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(uniform_boundaries(7, 1), (std::vector<int>{0, 7}));
}

TEST(BaselinesTest, ParametersBalanceCumulativeParameterCounts) {
  std::vector<testing::LayerSpec> layers = testing::equal_layers(4, 1, 1);
  for (int idx = 0; idx < 3; ++idx) layers[idx].param_count = 100;
  layers[3].param_count = 700;
  const Profile profile = testing::make_profile(layers);
  const LayerTable table(profile, 1, OptimizerKind::kSgd);
  // Cumulative 0, 100, 200, 300, 1000: 300 is closest to half of 1000.
  EXPECT_EQ(parameter_boundaries(table, 2), (std::vector<int>{0, 3, 4}));
  // Every stage keeps at least one layer even when the parameters sit in the last one.
  EXPECT_EQ(parameter_boundaries(table, 4), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(BaselinesTest, GreedyTimeFillsEachStageUpToTheAverage) {
  std::vector<testing::LayerSpec> layers = testing::equal_layers(5, 0.5, 0.5);  // 1 ms each
  layers[4].fwd_ms = 2;
  layers[4].bwd_ms = 2;  // 4 ms; total 8 ms, target 4 ms for pp = 2
  const Profile profile = testing::make_profile(layers);
  const LayerTable table(profile, 1, OptimizerKind::kSgd);
  EXPECT_EQ(greedy_time_boundaries(table, 2), (std::vector<int>{0, 4, 5}));
  // Target 8/3 ms: two layers per stage, the rest to the last.
  EXPECT_EQ(greedy_time_boundaries(table, 3), (std::vector<int>{0, 2, 4, 5}));
  EXPECT_EQ(greedy_time_boundaries(table, 5), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(BaselinesTest, ParsesMethodsAndExplicitRanges) {
  EXPECT_EQ(parse_partition("optimal", 12, "--partition").method, PartitionMethod::kOptimal);
  EXPECT_EQ(parse_partition("uniform", 12, "--partition").name(), "uniform");
  EXPECT_EQ(parse_partition("parameters", 12, "--partition").name(), "parameters");
  EXPECT_EQ(parse_partition("greedy-time", 12, "--partition").name(), "greedy-time");
  const PartitionSpec ranges = parse_partition("0:3,3:8,8:12", 12, "--partition");
  EXPECT_EQ(ranges.method, PartitionMethod::kExplicit);
  EXPECT_EQ(ranges.boundaries, (std::vector<int>{0, 3, 8, 12}));
  EXPECT_EQ(ranges.name(), "explicit");
}

TEST(BaselinesTest, RejectsBadRangesWithOneLineErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"0:3,4:12", "range '4:12' starts at 4 but must start at 3"},
      {"1:3,3:12", "range '1:3' starts at 1 but must start at 0"},
      {"0:0,0:12", "range '0:0' is empty"},
      {"0:3,3:10", "cover layers [0, 10) but the model has 12 layers"},
      {"0:3,3:14", "cover layers [0, 14) but the model has 12 layers"},
      {"0-3", "'0-3' is not a range FIRST:LAST"},
      {"a:b", "'a:b' is not a range FIRST:LAST"},
      {"0:3,", "'' is not a range FIRST:LAST"},
      {"balanced", "'balanced' is not a range FIRST:LAST"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = error_of([&] { parse_partition(text, 12, "--partition"); });
    EXPECT_NE(message.find(expected), std::string::npos) << text << ": " << message;
    EXPECT_EQ(message.rfind("--partition: ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

TEST(BaselinesTest, BaselinesAreCheckedForMemory) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  PartitionProblem problem;
  problem.pp = 2;
  problem.memory.pp = 2;
  problem.memory.schedule = Schedule::kGpipe;
  problem.memory.num_micro_batches = 4;
  problem.memory.runtime_overhead_bytes = 1000;
  problem.inter_node_boundaries = {false};
  problem.device_memory_bytes = 39476;  // stage [0, 2) fits exactly (memory_model_test)
  const StageEvaluator evaluator(table, problem);
  PartitionSpec spec;
  spec.method = PartitionMethod::kExplicit;
  spec.boundaries = {0, 2, 3};
  const PartitionResult fits = run_partition(spec, evaluator);
  EXPECT_TRUE(fits.feasible);
  EXPECT_EQ(fits.peak_memory_bytes, 39476);
  EXPECT_EQ(fits.bottleneck_ns, 16'000'000);
  problem.device_memory_bytes = 39475;
  const StageEvaluator tight(table, problem);
  const PartitionResult does_not = run_partition(spec, tight);
  EXPECT_FALSE(does_not.feasible);
  EXPECT_EQ(does_not.reason, "stage 0 needs 38.6 KiB > 38.5 KiB (split 0:2,2:3)");
  spec.method = PartitionMethod::kUniform;  // [0,1) [1,3)
  EXPECT_EQ(run_partition(spec, tight).boundaries, (std::vector<int>{0, 1, 3}));
}

}  // namespace
}  // namespace pipeplan
