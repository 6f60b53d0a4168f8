// Tests for planner/partial_checkpoint.h: the bytes a stage keeps when some of its layers are
// recomputed, worked out by hand for the 3-layer profile (memory_model_test.cpp gives its
// numbers) and against the definition on random layers; the layers the search takes; the search
// choosing them over checkpointing the whole stage.
#include "planner/partial_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "planner/search.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

// A'(R) from its definition: each layer's own bytes (its input when recomputed, else what it
// retains) less the storage two neighbours share.
int64_t kept_by_definition(const LayerTable& table, int first, int last,
                           const std::vector<bool>& recomputed) {
  auto in_set = [&](int layer_idx) { return recomputed[static_cast<size_t>(layer_idx - first)]; };
  int64_t kept = 0;
  for (int layer_idx = first; layer_idx < last; ++layer_idx)
    kept +=
        in_set(layer_idx) ? table.boundary_bytes(layer_idx) : table.layer(layer_idx).retained_bytes;
  if (in_set(last - 1))  // the stage's output, kept for the backward
    kept += std::min(table.layer(last - 1).saved_output_bytes, table.boundary_bytes(last));
  for (int layer_idx = first; layer_idx + 1 < last; ++layer_idx) {
    if (in_set(layer_idx)) continue;
    const int64_t output = table.layer(layer_idx).saved_output_bytes;
    kept -= in_set(layer_idx + 1) ? std::min(output, table.boundary_bytes(layer_idx + 1))
                                  : std::min(output, table.layer(layer_idx + 1).saved_input_bytes);
  }
  return kept;
}

MemorySettings gpipe_settings(int num_micro_batches) {
  MemorySettings settings;
  settings.schedule = Schedule::kGpipe;
  settings.num_micro_batches = num_micro_batches;
  settings.runtime_overhead_bytes = 1000;
  return settings;
}

// At b = 2: retained 200/400/160, saved input 0/80/48, saved output 80/48/0, inputs X_0..X_3 =
// 40/80/48/16 bytes.
TEST(PartialCheckpointTest, KeptAndRecomputedBytesByHand) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, /*micro_batch_size=*/2, OptimizerKind::kSgd);
  EXPECT_EQ(recomputed_activations(table, 0, 3, {}).per_micro_batch_bytes, 632);
  EXPECT_EQ(recomputed_activations(table, 0, 3, {}).recompute_bytes, 0);
  // Layer 1 keeps X_1 = 80, which layer 0's saved output (80) already holds: 200 + 160.
  // Its recompute rebuilds 400 − 80 beside the kept input; its output is layer 2's saved input.
  const RecomputedActivations middle = recomputed_activations(table, 0, 3, {1});
  EXPECT_EQ(middle.per_micro_batch_bytes, 200 + 80 + 160 - 80);
  EXPECT_EQ(middle.recompute_bytes, 400 - 80);
  // Layer 2 keeps X_2 = 48, shared with layer 1's saved output; it rebuilds 160 − 48 and its
  // 16-byte output, which it does not save.
  const RecomputedActivations last = recomputed_activations(table, 0, 3, {2});
  EXPECT_EQ(last.per_micro_batch_bytes, 200 + 400 + 48 - 80 - 48);
  EXPECT_EQ(last.recompute_bytes, 160 - 48 + 16);
  const RecomputedActivations two = recomputed_activations(table, 0, 3, {0, 2});
  EXPECT_EQ(two.per_micro_batch_bytes, 40 + 400 + 48 - 48);
  EXPECT_EQ(two.recompute_bytes, 200 + 128);
  EXPECT_EQ(recompute_ns(table, {0, 2}), table.fwd_ns(0, 1) + table.fwd_ns(2, 3));
  // The last layer of stage [0, 2): its saved output (48), the stage's output, stays kept.
  EXPECT_EQ(recomputed_activations(table, 0, 2, {1}).per_micro_batch_bytes, 200 + 80 - 80 + 48);
}

TEST(PartialCheckpointTest, MatchesTheDefinitionForEverySetOnRandomLayers) {
  std::mt19937_64 rng(11);
  const Profile profile = testing::make_profile(testing::random_layers(rng, 7));
  const LayerTable table(profile, /*micro_batch_size=*/4, OptimizerKind::kSgd);
  for (const auto& [first, last] : {std::pair{0, 7}, std::pair{2, 6}}) {
    const int size = last - first;
    for (int mask = 0; mask < (1 << size); ++mask) {
      std::vector<bool> in_set(static_cast<size_t>(size));
      std::vector<int> layers;
      for (int bit = 0; bit < size; ++bit)
        if ((mask >> bit) & 1) {
          in_set[static_cast<size_t>(bit)] = true;
          layers.push_back(first + bit);
        }
      const int64_t expected = kept_by_definition(table, first, last, in_set);
      EXPECT_EQ(recomputed_activations(table, first, last, layers).per_micro_batch_bytes, expected)
          << "[" << first << ", " << last << ") mask " << mask;
      // Taken last first, as the search's order may: each layer joins beside recomputed ones.
      std::reverse(layers.begin(), layers.end());
      EXPECT_EQ(recomputed_activations(table, first, last, layers).per_micro_batch_bytes, expected)
          << "[" << first << ", " << last << ") mask " << mask << " last first";
    }
  }
}

// Freed bytes per forward ms: layers 0 (160 / 2 ms) and 1 (320 / 4 ms), tied, by index; never
// layer 2, the model's last (its profile holds the loss). Under gpipe with m = 4, recomputing
// layer 0 saves 4 · 80 − 200 = 120 bytes, adding layer 1 another 4 · 272 − 320 = 768.
TEST(PartialCheckpointTest, TakesTheFewestLayersThatFitBestFirst) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, /*micro_batch_size=*/2, OptimizerKind::kSgd);
  EXPECT_EQ(recompute_order(table, 0, 3), (std::vector<int>{0, 1}));
  const MemorySettings settings = gpipe_settings(/*num_micro_batches=*/4);
  const int64_t plain = stage_memory(table, settings, 0, 0, 3, false).total_bytes;
  EXPECT_EQ(fewest_recomputed_layers(table, settings, 0, 0, 3, plain - 1), std::vector<int>{0});
  EXPECT_EQ(fewest_recomputed_layers(table, settings, 0, 0, 3, plain - 120), std::vector<int>{0});
  EXPECT_EQ(fewest_recomputed_layers(table, settings, 0, 0, 3, plain - 121),
            (std::vector<int>{0, 1}));
  EXPECT_EQ(fewest_recomputed_layers(table, settings, 0, 0, 3, plain - 888),
            (std::vector<int>{0, 1}));
  EXPECT_EQ(fewest_recomputed_layers(table, settings, 0, 0, 3, plain - 889), std::nullopt);
  EXPECT_EQ(stage_memory(table, settings, 0, 0, 3, false, {0, 1}).total_bytes, plain - 888);
  // A parameter layers 0 and 1 share: neither is recomputed where both are in the stage.
  Profile tied = testing::three_layer_profile();
  tied.ties = {TiedProfile{{0, 1}, /*param_count=*/100}};
  const LayerTable tied_table(tied, /*micro_batch_size=*/2, OptimizerKind::kSgd);
  EXPECT_EQ(recompute_order(tied_table, 0, 3), std::vector<int>{});
  EXPECT_EQ(recompute_order(tied_table, 1, 3), std::vector<int>{1});
  // Layers 0 and 1 alone: recomputing both is checkpointing the stage, not offered.
  const int64_t pair = stage_memory(table, settings, 0, 0, 2, false).total_bytes;
  EXPECT_EQ(fewest_recomputed_layers(table, settings, 0, 0, 2, pair - 120), std::vector<int>{0});
  EXPECT_EQ(fewest_recomputed_layers(table, settings, 0, 0, 2, pair - 121), std::nullopt);
}

PlanningContext one_device(const Profile& profile, int64_t memory_bytes) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.profile_hash = "fnv1a64:0000000000000003";
  context.cluster = make_cluster(profile, 1, memory_bytes, 1, kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = 8;
  return context;
}

// A device 1 byte short of the plain stage: the search recomputes layer 0 alone, which costs
// its forward (2 ms at b = 2) per micro-batch instead of the whole forward (7 ms) and lowers
// the peak by 120 bytes; the plan says so and validates.
TEST(PartialCheckpointTest, TheSearchRecomputesTheFewestLayersInsteadOfTheWholeStage) {
  const Profile profile = testing::three_layer_profile();
  SearchOptions options;
  options.pp = 1;
  options.micro_batch_size = 2;
  options.schedules = {Schedule::kGpipe};
  options.policies = {CheckpointPolicy::kNone};
  const SearchResult plain = search(one_device(profile, int64_t{1} << 30), options);
  ASSERT_FALSE(plain.plans.empty());
  const Plan& unconstrained = plain.plans.front();
  const int64_t plain_bytes = unconstrained.predictions.peak_memory_bytes();
  options.policies = {CheckpointPolicy::kNone, CheckpointPolicy::kAll, CheckpointPolicy::kNeeded};
  const SearchResult tight = search(one_device(profile, plain_bytes - 1), options);
  ASSERT_FALSE(tight.plans.empty()) << ::testing::PrintToString(tight.infeasible);
  const Plan& best = tight.plans.front();
  EXPECT_NO_THROW(best.validate("plan.json"));
  ASSERT_EQ(best.stages.size(), 1u);
  EXPECT_FALSE(best.stages[0].checkpoint);
  EXPECT_EQ(best.stages[0].recompute_layers, std::vector<int>{0});
  const StagePrediction& stage = best.predictions.stages[0];
  EXPECT_DOUBLE_EQ(stage.recompute_ms, 2.0);
  EXPECT_EQ(stage.peak_memory_bytes, plain_bytes - 120);
  EXPECT_NEAR(best.predictions.iteration_ms,
              unconstrained.predictions.iteration_ms + best.num_micro_batches * 2.0, 1e-6);
  EXPECT_NE(plan_configuration(best).find("stages 0:3r0"), std::string::npos)
      << plan_configuration(best);
  // The whole stage checkpointed is slower, so it ranks after.
  for (size_t idx = 1; idx < tight.plans.size(); ++idx)
    EXPECT_GT(tight.plans[idx].predictions.iteration_ms, best.predictions.iteration_ms);
}

}  // namespace
}  // namespace pipeplan
