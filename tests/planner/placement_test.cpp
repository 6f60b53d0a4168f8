// Tests for planner/placement.h and the search's use of it: rank numbering, node membership,
// the rule that keeps the heavier traffic inside a node, and the links transfers then cross.
#include "planner/placement.h"

#include <gtest/gtest.h>

#include "planner/search.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

TEST(PlacementTest, ReplicaMajorKeepsPipelinesTogether) {
  const std::vector<RankAssignment> ranks = place_ranks(Layout::kReplicaMajor, 2, 4, 4, "cuda");
  ASSERT_EQ(ranks.size(), 8u);
  EXPECT_EQ(ranks[5].replica, 1);
  EXPECT_EQ(ranks[5].stage, 1);
  EXPECT_EQ(ranks[5].node, 1);
  EXPECT_EQ(ranks[5].local_rank, 1);
  EXPECT_EQ(ranks[5].device, "cuda:1");
  EXPECT_EQ(inter_node_boundaries(Layout::kReplicaMajor, 2, 4, 4),
            (std::vector<bool>{false, false, false}));
  EXPECT_EQ(stages_spanning_nodes(Layout::kReplicaMajor, 2, 4, 4),
            (std::vector<bool>{true, true, true, true}));
}

TEST(PlacementTest, InterNodeBoundariesLookAtEveryReplica) {
  // Against the rank map itself: a boundary crosses nodes when it does for some replica.
  int crossing = 0;
  for (Layout layout : {Layout::kReplicaMajor, Layout::kStageMajor})
    for (int devices_per_node : {1, 2, 3, 4, 8})
      for (int pp = 1; pp <= 12; ++pp)
        for (int dp = 1; dp <= 20; ++dp) {
          const std::vector<RankAssignment> ranks =
              place_ranks(layout, dp, pp, devices_per_node, "cpu");
          auto node = [&](int stage_idx, int replica) {
            return ranks[layout_rank(layout, dp, pp, stage_idx, replica)].node;
          };
          std::vector<bool> expected(pp - 1, false);
          for (int boundary = 0; boundary + 1 < pp; ++boundary)
            for (int replica = 0; replica < dp; ++replica)
              expected[boundary] =
                  expected[boundary] || node(boundary, replica) != node(boundary + 1, replica);
          EXPECT_EQ(inter_node_boundaries(layout, dp, pp, devices_per_node), expected)
              << to_string(layout) << " dp=" << dp << " pp=" << pp << " n=" << devices_per_node;
          bool wrap = false;
          for (int replica = 0; replica < dp; ++replica)
            wrap = wrap || node(pp - 1, replica) != node(0, replica);
          std::vector<bool> chunks;  // two chunks per stage
          for (int boundary = 0; boundary + 1 < 2 * pp; ++boundary)
            chunks.push_back(boundary % pp == pp - 1 ? wrap : expected[boundary % pp]);
          EXPECT_EQ(chunk_inter_node_boundaries(layout, dp, pp, 2, devices_per_node), chunks);
          for (bool inter : expected) crossing += inter;
        }
  EXPECT_GT(crossing, 1000);
}

TEST(PlacementTest, StageMajorKeepsReplicasTogether) {
  const std::vector<RankAssignment> ranks = place_ranks(Layout::kStageMajor, 2, 4, 4, "cpu");
  EXPECT_EQ(ranks[5].stage, 2);
  EXPECT_EQ(ranks[5].replica, 1);
  EXPECT_EQ(ranks[5].node, 1);
  EXPECT_EQ(ranks[5].device, "cpu");
  // Ranks 0-3 (stages 0, 1) on node 0, ranks 4-7 (stages 2, 3) on node 1.
  EXPECT_EQ(inter_node_boundaries(Layout::kStageMajor, 2, 4, 4),
            (std::vector<bool>{false, true, false}));
  EXPECT_EQ(stages_spanning_nodes(Layout::kStageMajor, 2, 4, 4),
            (std::vector<bool>{false, false, false, false}));
  // Three ranks per node: stage 1's replicas (ranks 2, 3) straddle nodes 0 and 1.
  EXPECT_EQ(stages_spanning_nodes(Layout::kStageMajor, 2, 4, 3),
            (std::vector<bool>{false, true, false, false}));
}

TEST(PlacementTest, RuleKeepsTheHeavierTrafficInsideANode) {
  EXPECT_EQ(choose_layout(/*p2p_bytes=*/10, /*allreduce_bytes=*/9), Layout::kReplicaMajor);
  EXPECT_EQ(choose_layout(10, 10), Layout::kReplicaMajor);
  EXPECT_EQ(choose_layout(9, 10), Layout::kStageMajor);
}

// 4 devices, 2 per node, forced dp = 2, pp = 2.
Plan best_plan(const Profile& profile) {
  PlanningContext context;
  context.profile = &profile;
  context.cluster = make_cluster(profile, 4, int64_t{1} << 40, /*devices_per_node=*/2, 1e6);
  context.global_batch = 8;
  SearchOptions options;
  options.dp = 2;
  options.zero = {0};  // the all-reduce's placement; ZeRO-1's collectives have their own tests
  const SearchResult result = search(context, options);
  EXPECT_FALSE(result.plans.empty());
  return result.plans.front();
}

TEST(PlacementTest, SearchPlacesByTrafficAndCostsTheLinksCrossed) {
  // Large activations, few parameters: pipeline traffic dominates -> replica-major.
  std::vector<testing::LayerSpec> chatty = testing::equal_layers(4, 1, 1);
  for (testing::LayerSpec& layer : chatty) {
    layer.output_floats = 100000;
    layer.param_count = 10;
  }
  const Plan pipeline_heavy =
      best_plan(testing::make_profile(chatty, {1, 2}, 8, 0, 0.01, /*bandwidth=*/1e8));
  EXPECT_EQ(pipeline_heavy.ranks[1].stage, 1);  // rank 1 = replica 0, stage 1, same node
  EXPECT_EQ(pipeline_heavy.ranks[1].replica, 0);
  EXPECT_EQ(pipeline_heavy.ranks[1].node, 0);
  EXPECT_EQ(pipeline_heavy.ranks[2].node, 1);
  EXPECT_EQ(pipeline_heavy.ranks[3].local_rank, 1);
  const SimulationInput in = simulation_input(pipeline_heavy);
  const double bytes = activation_bytes(pipeline_heavy.stages[0].output_sample_shape, "float32",
                                        pipeline_heavy.micro_batch_size);
  EXPECT_DOUBLE_EQ(in.activation_ms[0][0], 0.01 + bytes / 1e8 * 1000);  // intra-node
  EXPECT_GT(pipeline_heavy.predictions.stages[0].allreduce_ms, 0);
  // Many parameters, tiny activations: all-reduce traffic dominates -> stage-major.
  std::vector<testing::LayerSpec> heavy = testing::equal_layers(4, 1, 1);
  for (testing::LayerSpec& layer : heavy) {
    layer.output_floats = 1;
    layer.param_count = 1'000'000;
  }
  const Plan allreduce_heavy =
      best_plan(testing::make_profile(heavy, {1, 2}, 8, 0, 0.01, /*bandwidth=*/1e8));
  EXPECT_EQ(allreduce_heavy.ranks[1].stage, 0);  // rank 1 = replica 1, stage 0, same node
  EXPECT_EQ(allreduce_heavy.ranks[1].replica, 1);
  const SimulationInput crossing = simulation_input(allreduce_heavy);
  const double tiny = activation_bytes(allreduce_heavy.stages[0].output_sample_shape, "float32",
                                       allreduce_heavy.micro_batch_size);
  EXPECT_DOUBLE_EQ(crossing.activation_ms[0][0], 0.01 + tiny / 1e6 * 1000);  // inter-node
  // Its all-reduce stays inside a node: at the intra-node bandwidth.
  const double gradient_bytes = allreduce_heavy.predictions.stages[0].memory.gradients_bytes;
  EXPECT_DOUBLE_EQ(allreduce_heavy.predictions.stages[0].allreduce_ms,
                   2 * 0.01 + gradient_bytes / 1e8 * 1000);
}

}  // namespace
}  // namespace pipeplan
