// Tests for planner/variability.h (and the player it builds on, planner/pipeline_player.h):
// replicas played alone end as they do together, the draws are a full-rank simulation of the
// same draws bit for bit, and simulate() draws only within the budget.
#include "planner/variability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "planner/lognormal.h"
#include "planner/pipeline_player.h"
#include "planner/simulator.h"

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
// This is what lets the draws play one replica at a time.
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

// The draws equal, bit for bit, simulating all ranks at once with times drawn replica by
// replica, stage by stage, micro-batch by micro-batch from the same generator.
TEST(VariabilityTest, DrawsAreAFullRankSimulationOfTheSameDraws) {
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
    EXPECT_EQ(drawn_iteration_ms(in, kDraws), total_ms / kDraws) << to_string(schedule);
  }
}

// simulate() draws while draws × dp × compute actions stay within kDrawBudgetActions and plays
// the mean times above it, saying which in variability_draws.
TEST(VariabilityTest, SimulateDrawsOnlyWithinTheBudget) {
  // 4 stages × 8 micro-batches × 2 actions = 64 actions a pipeline.
  const SimulationInput small = replicas(Schedule::kOneFOneB, 4, 8, 4, 0.05);
  EXPECT_EQ(compute_actions(small), 64);
  EXPECT_TRUE(draws_fit_budget(small, kVariabilityDraws));
  const SimulationResult drawn = simulate(small, {/*record_timeline=*/false});
  EXPECT_EQ(drawn.variability_draws, kVariabilityDraws);
  EXPECT_EQ(drawn.iteration_ms, drawn_iteration_ms(small, kVariabilityDraws));
  EXPECT_GT(drawn.iteration_ms, drawn.mean_times_iteration_ms);
  // 32 draws × 512 replicas × (4 × 64 × 2) actions = 8.4e6 > 4e6.
  const SimulationInput large = replicas(Schedule::kOneFOneB, 4, 64, 512, 0.05);
  EXPECT_FALSE(draws_fit_budget(large, kVariabilityDraws));
  EXPECT_TRUE(draws_fit_budget(large, 1));  // 1 draw: 2.6e5 actions
  const SimulationResult steady = simulate(large, {/*record_timeline=*/false});
  EXPECT_EQ(steady.variability_draws, 0);
  EXPECT_EQ(steady.iteration_ms, steady.mean_times_iteration_ms);
  SimulationOptions one_draw{/*record_timeline=*/false};
  one_draw.variability_draws = 1;
  EXPECT_EQ(simulate(large, one_draw).variability_draws, 1);
}

// The budget counts compute actions: V chunks per stage play V times a stage's, zb-h1's split
// backwards 1.5 times 1f1b's, a forward-only pipeline half of it.
TEST(VariabilityTest, ComputeActionsCountEveryForwardAndBackward) {
  SimulationInput in = replicas(Schedule::kOneFOneB, 4, 8, 1, 0.05);
  EXPECT_EQ(compute_actions(in), 4 * 8 * 2);
  in.schedule = Schedule::kZeroBubbleH1;
  EXPECT_EQ(compute_actions(in), 4 * 8 * 3);
  in.schedule = Schedule::kInterleaved1F1B;
  in.virtual_stages = 3;
  EXPECT_EQ(compute_actions(in), 4 * 3 * 8 * 2);
  in.schedule = Schedule::kGpipe;
  in.virtual_stages = 1;
  in.forward_only = true;
  EXPECT_EQ(compute_actions(in), 4 * 8);
}

}  // namespace
}  // namespace pipeplan
