// Tests for planner/time_model.h and the stage costs of planner/stage_cost.h, by hand on the
// 3-layer profile (per sample fwd 1/2/0.5 ms, bwd 2/3/1 ms, SGD step 0.5/1/0.25 ms).
#include "planner/time_model.h"

#include <gtest/gtest.h>

#include "common/limits.h"
#include "planner/predict.h"
#include "planner/stage_cost.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

TEST(TimeModelTest, StageTimesSumTheLayersAtTheMicroBatchSize) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  const StageTimes plain = stage_times(table, 0, 2, /*checkpoint=*/false);
  EXPECT_EQ(plain.fwd_ns, 6'000'000);
  EXPECT_EQ(plain.bwd_ns, 10'000'000);
  EXPECT_EQ(plain.recompute_ns, 0);
  EXPECT_EQ(plain.optimizer_ns, 1'500'000);
  const StageTimes checkpointed = stage_times(table, 0, 2, /*checkpoint=*/true);
  EXPECT_EQ(checkpointed.recompute_ns, 6'000'000);  // one extra forward per backward
  EXPECT_EQ(compute_ns(checkpointed), 22'000'000);
  const LayerTable adamw(profile, 2, OptimizerKind::kAdamw);
  EXPECT_EQ(stage_times(adamw, 1, 3, false).optimizer_ns, 1'800'000);
}

// A layer's p90 above its median, relative, carries over to any micro-batch size; a stage's
// spread is the sum of its layers' (they vary together), and its coefficient of variation
// takes the time as normal: p90 = mean + 1.2816 standard deviations.
TEST(TimeModelTest, SpreadComesFromTheProfilesP90) {
  Profile profile = testing::three_layer_profile();
  for (LayerPoint& point : profile.layers[0].points) point.fwd_ms_p90 = 1.25 * point.fwd_ms;
  for (LayerPoint& point : profile.layers[1].points) point.bwd_ms_p90 = 1.5 * point.bwd_ms;
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  EXPECT_EQ(table.fwd_spread_ns(0, 2), 500'000);    // 0.25 · 2 ms of layer 0
  EXPECT_EQ(table.bwd_spread_ns(0, 3), 3'000'000);  // 0.5 · 6 ms of layer 1
  EXPECT_EQ(table.fwd_spread_ns(1, 3), 0);
  EXPECT_NEAR(coefficient_of_variation(1'281'552, 10'000'000), 0.1, 1e-6);
  EXPECT_EQ(coefficient_of_variation(5, 0), 0.0);
  // A p90 far above the median (a profile taken under load) is capped where plan.json's reader
  // stops: a plan that predicted 22.3 was refused by train (issue 25's smoke runs).
  EXPECT_EQ(coefficient_of_variation(int64_t{100} * 1'000'000, 3'500'000), kMaxCoefficientOfVariation);
}

TEST(TimeModelTest, TransferIsLatencyPlusBytesOverBandwidthAndFreeWhenUnmeasured) {
  EXPECT_DOUBLE_EQ(transfer_ms(48, 1e6, 0.5), 0.548);
  EXPECT_DOUBLE_EQ(transfer_ms(48, 0, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(transfer_ms(0, 1e9, 0.25), 0.25);
}

TEST(TimeModelTest, AllReduceFollowsTheRingFormula) {
  // 2(dp−1)/dp · bytes / bandwidth + 2(dp−1) · latency.
  EXPECT_DOUBLE_EQ(allreduce_ms(1'000'000, 4, 1e9, 0.01), 1.5 + 0.06);
  EXPECT_DOUBLE_EQ(allreduce_ms(1'000'000, 2, 1e9, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(allreduce_ms(1'000'000, 1, 1e9, 0.01), 0.0);
  EXPECT_DOUBLE_EQ(allreduce_ms(1'000'000, 8, 0, 0.01), 0.0);
}

TEST(TimeModelTest, CollectivesUseTheMeasuredFitOfTheirGroupElseTheRingOnTheLink) {
  Profile profile = testing::make_profile(testing::equal_layers(2, 1, 1), {1, 2}, 5, 0,
                                          /*p2p_latency_ms=*/0.1, /*bandwidth=*/1e9);
  profile.interconnect->allreduce = {/*latency_ms=*/0.3, /*bandwidth=*/5e8, 0, {}};
  profile.interconnect->all_gather = {/*latency_ms=*/0.2, /*bandwidth=*/2e9, 0, {}};
  const CollectiveCosts costs = collective_costs(profile);
  const LinkCosts links{/*latency_ms=*/0.1, /*intra=*/1e9, /*inter=*/1e8};
  // Measured over 2 ranks within a node: latency + bytes / bandwidth.
  EXPECT_DOUBLE_EQ(collective_ms(costs, Collective::kAllReduce, 1'000'000, 2, links, false),
                   0.3 + 2.0);
  EXPECT_DOUBLE_EQ(collective_ms(costs, Collective::kAllGather, 1'000'000, 2, links, false),
                   0.2 + 0.5);
  // No reduce-scatter fit: half the ring all-reduce on the link, (g−1)/g·bytes/bw + (g−1)·lat.
  EXPECT_FALSE(costs.measured(Collective::kReduceScatter, 2, false));
  EXPECT_DOUBLE_EQ(collective_ms(costs, Collective::kReduceScatter, 1'000'000, 2, links, false),
                   0.5 + 0.1);
  // 4 ranks, or a group across nodes: the ring formula, as allreduce_ms.
  EXPECT_DOUBLE_EQ(collective_ms(costs, Collective::kAllReduce, 1'000'000, 4, links, false),
                   allreduce_ms(1'000'000, 4, 1e9, 0.1));
  EXPECT_DOUBLE_EQ(collective_ms(costs, Collective::kAllReduce, 1'000'000, 2, links, true),
                   allreduce_ms(1'000'000, 2, 1e8, 0.1));
  EXPECT_DOUBLE_EQ(collective_ms(costs, Collective::kAllGather, 1'000'000, 1, links, false), 0.0);
  // Without an interconnect nothing is measured.
  EXPECT_EQ(collective_costs(testing::make_profile(testing::equal_layers(2, 1, 1))).measured_ranks,
            0);
}

TEST(TimeModelTest, StageCostAddsTheSendsOfItsBoundaryTensorsOverTheirLinks) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  PartitionProblem problem;
  problem.pp = 3;
  problem.device_memory_bytes = int64_t{1} << 40;
  problem.links = {/*latency_ms=*/0.5, /*intra=*/1e6, /*inter=*/1e5};
  problem.inter_node_boundaries = {false, true};
  problem.memory.pp = 3;
  const StageEvaluator evaluator(table, problem);
  // Stage 0 = layer 0 sends its 10-float output (80 bytes at b = 2) over an intra link.
  EXPECT_EQ(evaluator.evaluate(0, 0, 1).cost_ns, 6'000'000 + 580'000);
  // Stage 1 = layer 1: gradient of its 80-byte input back (intra), 48-byte output on (inter).
  EXPECT_EQ(evaluator.p2p_ns(1, 1, 2), 580'000 + 980'000);
  EXPECT_EQ(evaluator.evaluate(1, 1, 2).cost_ns, 10'000'000 + 580'000 + 980'000);
  // The last stage only sends its input gradient.
  EXPECT_EQ(evaluator.evaluate(2, 2, 3).cost_ns, 3'000'000 + 980'000);
  problem.policy = CheckpointPolicy::kAll;
  const StageEvaluator checkpointing(table, problem);
  EXPECT_EQ(checkpointing.evaluate(2, 2, 3).cost_ns, 3'000'000 + 1'000'000 + 980'000);
}

TEST(TimeModelTest, ClusterTakesTheProfilesLinkAndNotesFreeCommunication) {
  const Profile measured = testing::make_profile(testing::equal_layers(2, 1, 1), {1, 2}, 5, 0,
                                                 /*p2p_latency_ms=*/0.02, /*bandwidth=*/2e9);
  const Cluster cluster = make_cluster(measured, 4, int64_t{1} << 30, 2, 1e9);
  EXPECT_DOUBLE_EQ(cluster.intra_node_bandwidth_bytes_per_s, 2e9);
  EXPECT_DOUBLE_EQ(cluster.latency_ms, 0.02);
  EXPECT_DOUBLE_EQ(cluster.inter_node_bandwidth_bytes_per_s, 1e9);
  EXPECT_TRUE(planning_notes(measured, cluster, /*inter_node_bandwidth_given=*/true).empty());
  const Profile unmeasured = testing::make_profile(testing::equal_layers(2, 1, 1));
  const Cluster free = make_cluster(unmeasured, 4, int64_t{1} << 30, 4, 1e9);
  EXPECT_DOUBLE_EQ(free.intra_node_bandwidth_bytes_per_s, 0);
  const std::vector<std::string> notes = planning_notes(unmeasured, free, true);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("communication is predicted to be free"), std::string::npos);
  const Cluster two_nodes = make_cluster(measured, 4, int64_t{1} << 30, 2, 1.25e10);
  const std::vector<std::string> assumed = planning_notes(measured, two_nodes, false);
  ASSERT_EQ(assumed.size(), 1u);
  EXPECT_NE(assumed[0].find("assumed"), std::string::npos);
}

}  // namespace
}  // namespace pipeplan
