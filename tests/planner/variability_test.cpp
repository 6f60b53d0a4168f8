// Tests for planner/variability.h (and the player it builds on, planner/pipeline_player.h):
// replicas played alone end as they do together, the every-replica draws are a full-rank
// simulation of the same draws bit for bit, the folded draws agree with them within a stated
// tolerance, and the expected maximum of normal variables.
#include "planner/variability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "planner/lognormal.h"
#include "planner/pipeline_player.h"

namespace pipeplan {
namespace {

// dp replicas of a pp-stage pipeline with uneven stages (stage 1 recomputes), every replica
// with its own transfer times.
SimulationInput replicas(Schedule schedule, int pp, int m, int dp, double cv) {
  SimulationInput in;
  in.schedule = schedule;
  in.pp = pp;
  in.dp = dp;
  in.num_micro_batches = m;
  for (int stage = 0; stage < pp; ++stage)
    in.stages.push_back({1.0 + 0.1 * stage, 2.0 - 0.1 * stage, stage == 1 ? 0.5 : 0.0, 0.3,
                         0.1 + 0.05 * stage, cv, cv});
  for (int replica = 0; replica < dp; ++replica) {
    in.activation_ms.emplace_back(pp - 1, 0.05 * (1 + replica % 3));
    in.gradient_ms.emplace_back(pp - 1, 0.05);
    std::vector<int> ranks;
    for (int stage = 0; stage < pp; ++stage) ranks.push_back(replica * pp + stage);
    in.ranks.push_back(ranks);
  }
  return in;
}

// Each rank's own times: the stage's times scaled by random factors in [0.5, 1.5].
std::vector<RankStepTimes> random_times(const SimulationInput& in, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> factor(0.5, 1.5);
  std::vector<RankStepTimes> times(static_cast<size_t>(in.dp) * in.pp);
  for (int replica = 0; replica < in.dp; ++replica)
    for (int stage = 0; stage < in.pp; ++stage) {
      const StageCosts& costs = in.stages[stage];
      RankStepTimes& rank = times[in.ranks[replica][stage]];
      for (int mb = 0; mb < in.num_micro_batches; ++mb) {
        rank.fwd_ms.push_back(costs.fwd_ms * factor(rng));
        rank.bwd_ms.push_back(costs.bwd_ms * factor(rng));
        if (costs.recompute_ms > 0) rank.recompute_ms.push_back(costs.recompute_ms * factor(rng));
      }
      rank.optimizer_ms = costs.optimizer_ms;  // as every replica of the stage
    }
  return times;
}

// Replicas meet only at the all-reduces, after which each rank steps its optimizer as long as
// the stage's other replicas: the iteration of all replicas played together is the largest of
// each played alone, exactly.
// This is what lets the draws play one replica at a time and fold replicas in.
TEST(VariabilityTest, ReplicasPlayedAloneEndAsTheyDoTogether) {
  std::mt19937_64 rng(7);
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB})
    for (bool occupies : {false, true}) {
      SimulationInput in = replicas(schedule, 3, 5, 3, 0);
      in.send_occupies_sender = occupies;
      const std::vector<RankStepTimes> times = random_times(in, rng);
      PipelinePlayer together(in, {0, 1, 2}, /*record_timeline=*/false);
      double slowest_alone_ms = 0;
      for (int replica = 0; replica < in.dp; ++replica) {
        PipelinePlayer alone(in, {replica}, /*record_timeline=*/false);
        for (int stage = 0; stage < in.pp; ++stage) {
          together.set_times(replica, stage, &times[in.ranks[replica][stage]]);
          alone.set_times(0, stage, &times[in.ranks[replica][stage]]);
        }
        slowest_alone_ms = std::max(slowest_alone_ms, alone.play());
      }
      EXPECT_EQ(together.play(), slowest_alone_ms) << to_string(schedule) << " " << occupies;
    }
}

// The every-replica draws equal, bit for bit, simulating all ranks at once with times drawn
// replica by replica, stage by stage, micro-batch by micro-batch from the same generator.
TEST(VariabilityTest, EveryReplicaDrawsAreAFullRankSimulationOfTheSameDraws) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    const SimulationInput in = replicas(schedule, 3, 6, 4, 0.2);
    constexpr int kDraws = 8;
    Multipliers multipliers;
    SimulationInput drawn = in;
    drawn.rank_times.assign(static_cast<size_t>(in.dp) * in.pp, {});
    double total_ms = 0;
    for (int draw = 0; draw < kDraws; ++draw) {
      for (int replica = 0; replica < in.dp; ++replica)
        for (int stage = 0; stage < in.pp; ++stage) {
          const StageCosts& costs = in.stages[stage];
          RankStepTimes& rank = drawn.rank_times[in.ranks[replica][stage]];
          rank = {{}, {}, {}, 0, costs.optimizer_ms};
          for (int mb = 0; mb < in.num_micro_batches; ++mb) {
            rank.fwd_ms.push_back(costs.fwd_ms * multipliers.draw(log_normal(costs.fwd_cv)));
            rank.bwd_ms.push_back(costs.bwd_ms * multipliers.draw(log_normal(costs.bwd_cv)));
            if (costs.recompute_ms > 0)
              rank.recompute_ms.push_back(costs.recompute_ms *
                                          multipliers.draw(log_normal(costs.fwd_cv)));
          }
        }
      total_ms += simulate(drawn, {/*record_timeline=*/false}).iteration_ms;
    }
    const DrawnIteration every = drawn_iteration(in, kDraws, ReplicaDraws::kEvery);
    EXPECT_EQ(every.iteration_ms, total_ms / kDraws) << to_string(schedule);
    EXPECT_FALSE(every.folded);
    EXPECT_EQ(every.draws, kDraws);
  }
}

// Folding replicas in through a normal fit of each kind's iteration agrees with playing every
// replica, both with many draws, within 0.5 % for coefficients of variation up to 0.1 (the
// fit misses the right skew of the iteration, most on short pipelines of many replicas).
TEST(VariabilityTest, FoldedDrawsAgreeWithEveryReplica) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB})
    for (int dp : {8, 64})
      for (double cv : {0.04, 0.1}) {
        const SimulationInput in = replicas(schedule, 4, 8, dp, cv);
        const DrawnIteration every = drawn_iteration(in, 256, ReplicaDraws::kEvery);
        const DrawnIteration folded = drawn_iteration(in, 256, ReplicaDraws::kFold);
        EXPECT_TRUE(folded.folded);
        EXPECT_GE(folded.draws, kMinFoldDraws);
        EXPECT_NEAR(folded.iteration_ms / every.iteration_ms, 1, 0.005)
            << to_string(schedule) << " dp=" << dp << " cv=" << cv;
      }
}

// kAuto plays every replica while the work is within kEveryReplicaDrawBudget (then the result
// is kEvery's, bit for bit) and folds above it; simulate() reports which.
TEST(VariabilityTest, AutoFoldsOnlyAboveTheBudget) {
  const SimulationInput small = replicas(Schedule::kOneFOneB, 4, 8, 4, 0.05);
  const DrawnIteration automatic = drawn_iteration(small, kVariabilityDraws, ReplicaDraws::kAuto);
  EXPECT_FALSE(automatic.folded);
  EXPECT_EQ(automatic.iteration_ms,
            drawn_iteration(small, kVariabilityDraws, ReplicaDraws::kEvery).iteration_ms);
  // 32 draws × 512 replicas × 4 stages × 64 micro-batches × 2 actions > 4e6.
  const SimulationInput large = replicas(Schedule::kOneFOneB, 4, 64, 512, 0.05);
  const SimulationResult result = simulate(large, {/*record_timeline=*/false});
  EXPECT_TRUE(result.replicas_folded);
  EXPECT_GE(result.variability_draws, kMinFoldDraws);
  EXPECT_GT(result.iteration_ms, result.mean_times_iteration_ms);
  EXPECT_EQ(simulate(large, {/*record_timeline=*/false}).iteration_ms, result.iteration_ms);
  const SimulationResult steady = simulate(replicas(Schedule::kOneFOneB, 4, 64, 512, 0));
  EXPECT_EQ(steady.variability_draws, 0);
  EXPECT_FALSE(steady.replicas_folded);
}

// Both budgets count compute actions: an interleaved pipeline of V chunks per stage and zb-h1's
// split backwards get as many fewer draws as they play more actions per draw.
TEST(VariabilityTest, DrawCountsFollowTheComputeActions) {
  const double one_f_one_b = pipeline_actions(Schedule::kOneFOneB, 64, 1, 256);  // 32,768
  const double interleaved = pipeline_actions(Schedule::kInterleaved1F1B, 64, 4, 256);
  const double zero_bubble = pipeline_actions(Schedule::kZeroBubbleH1, 64, 1, 256);
  EXPECT_EQ(interleaved, 4 * one_f_one_b);
  EXPECT_EQ(zero_bubble, 1.5 * one_f_one_b);
  const DrawCount plain = draw_count(one_f_one_b, 8, kVariabilityDraws, ReplicaDraws::kAuto);
  EXPECT_TRUE(plain.folded);   // 32 × 8 × 32,768 actions > 4e6
  EXPECT_EQ(plain.draws, 30);  // 1e6 / 32,768
  EXPECT_EQ(draw_count(interleaved, 8, kVariabilityDraws, ReplicaDraws::kAuto).draws, 7);
  EXPECT_EQ(draw_count(zero_bubble, 8, kVariabilityDraws, ReplicaDraws::kAuto).draws, 20);
  // Below the budget every replica is played, as many times as asked.
  const DrawCount every = draw_count(one_f_one_b, 2, 32, ReplicaDraws::kAuto);
  EXPECT_FALSE(every.folded);
  EXPECT_EQ(every.draws, 32);
  EXPECT_FALSE(draw_count(one_f_one_b, 2, 32, ReplicaDraws::kEvery).folded);
  // A pipeline too long for two draws within the budget still gets two.
  EXPECT_EQ(draw_count(1e7, 1, 1, ReplicaDraws::kFold).draws, kMinFoldDraws);
}

// Each folded draw has its own generator: the pieces give the same iteration whatever order
// and threads play them in, bit for bit, and every draw of a kind is a draw of its own.
TEST(VariabilityTest, PiecesPlayedInAnyOrderGiveTheSameIteration) {
  // 3 kinds (activation times by replica % 3) of 2 × 8 stages × 64 micro-batches = 1,024
  // actions: 976 draws each, 245 to a piece (2.5e5 actions), so 4 pieces a kind.
  const SimulationInput in = replicas(Schedule::kOneFOneB, 8, 64, 6, 0.05);
  const DrawnIteration whole = drawn_iteration(in, kVariabilityDraws, ReplicaDraws::kFold);
  IterationDraws pieces(in, kVariabilityDraws, ReplicaDraws::kFold);
  ASSERT_EQ(pieces.num_pieces(), 12);
  EXPECT_EQ(pieces.piece_actions(0), 245 * 1024.0);
  EXPECT_EQ(pieces.piece_actions(3), (976 - 3 * 245) * 1024.0);
  std::vector<std::thread> threads;
  for (int first : {0, 1})  // the odd pieces and the even ones, each backwards
    threads.emplace_back([&pieces, first] {
      for (int piece = pieces.num_pieces() - 2 + first; piece >= 0; piece -= 2) pieces.play(piece);
    });
  for (std::thread& thread : threads) thread.join();
  const DrawnIteration shared = pieces.result();
  EXPECT_EQ(shared.iteration_ms, whole.iteration_ms);
  EXPECT_EQ(shared.draws, whole.draws);
  EXPECT_TRUE(shared.folded);
  // One generator for all draws would repeat one draw's iteration; these differ.
  FastMultipliers first(0), second(1);
  EXPECT_NE(first.standard_normal(), second.standard_normal());
  // The every-replica draws, one sequence over all of them, are one piece.
  EXPECT_EQ(IterationDraws(in, kVariabilityDraws, ReplicaDraws::kEvery).num_pieces(), 1);
}

TEST(VariabilityTest, ExpectedMaximumOfNormals) {
  EXPECT_NEAR(expected_maximum({{3, 2, 1}}), 3, 1e-6);
  EXPECT_NEAR(expected_maximum({{3, 2, 2}}), 3 + 2 / std::sqrt(M_PI), 1e-6);
  EXPECT_NEAR(expected_maximum({{0, 1, 10}}), 1.5387527308, 1e-6);  // tabulated
  EXPECT_NEAR(expected_maximum({{0, 1, 5}, {0, 1, 5}}), 1.5387527308, 1e-6);
  EXPECT_DOUBLE_EQ(expected_maximum({{1, 0, 4}, {2.5, 0, 1}}), 2.5);
  // A constant far above a narrow kind: the constant.
  EXPECT_NEAR(expected_maximum({{10, 0, 1}, {0, 1, 100}}), 10, 1e-6);
}

}  // namespace
}  // namespace pipeplan
