// Tests for planner/bounds.h: the whole-layer path bound against every split, and the refined
// candidate bound against the simulated plans of a search.
#include "planner/bounds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "common/limits.h"
#include "planner/search.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

// min over every split of max_k (Σ_{s<k} c_s + k·boundary_ns + m·c_k), by enumerating the splits.
int64_t brute_force_path_ns(const LayerTable& table, int pp, int64_t m, bool recompute,
                            int64_t boundary_ns = 0) {
  const int layers = table.num_layers();
  auto cost = [&](int first, int last) {
    return table.path_compute_ns(first, last) + (recompute ? table.fwd_ns(first, last) : 0);
  };
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<int> bounds(pp + 1, 0);  // bounds[0] = 0, bounds[pp] = layers
  bounds[pp] = layers;
  auto visit = [&](auto&& self, int stage_idx) -> void {
    if (stage_idx == pp - 1) {
      int64_t worst = 0;
      for (int k = 0; k < pp; ++k)
        worst = std::max(worst, cost(0, bounds[k]) + k * boundary_ns +
                                    m * cost(bounds[k], bounds[k + 1]));
      best = std::min(best, worst);
      return;
    }
    for (int end = bounds[stage_idx] + 1; end <= layers - (pp - stage_idx - 1); ++end) {
      bounds[stage_idx + 1] = end;
      self(self, stage_idx + 1);
    }
  };
  visit(visit, 0);
  return best;
}

TEST(BoundsTest, MinPathMatchesEverySplit) {
  std::mt19937_64 rng(11);
  for (int case_idx = 0; case_idx < 40; ++case_idx) {
    const int layers = 1 + case_idx % 9;
    // Odd cases: zb-h1's split table, whose paths run forward and B.
    const bool split = case_idx % 2 == 1;
    const Profile profile = testing::with_backward_split(
        testing::make_profile(testing::random_layers(rng, layers)), 0.4, 0.7);
    const LayerTable table(profile, 1 + case_idx % 3, OptimizerKind::kSgd, split);
    for (int pp = 1; pp <= layers; ++pp)
      for (int m : {1, 2, 5})
        for (bool recompute : {false, true})
          for (int64_t boundary_ns : {int64_t{0}, int64_t{1'300'000}})
            EXPECT_EQ(min_path_ns(table, pp, m, recompute, boundary_ns),
                      brute_force_path_ns(table, pp, m, recompute, boundary_ns))
                << "case " << case_idx << " pp=" << pp << " m=" << m
                << " recompute=" << recompute << " boundary_ns=" << boundary_ns;
  }
}

// Every plan an exhaustive search simulates lies at or above its candidate's refined bound.
TEST(BoundsTest, RefinedBoundNeverExceedsTheSimulation) {
  std::mt19937_64 rng(5);
  int checked = 0;
  int zero_bubble_plans = 0;
  int interleaved_plans = 0;
  for (int case_idx = 0; case_idx < 12; ++case_idx) {
    // zb-h1 and interleaved-1f1b are searched too: B + W is 1.1 of the whole backward, B a third of it.
    const Profile profile = testing::with_backward_split(
        testing::make_profile(testing::random_layers(rng, 4 + case_idx % 5), {1, 2, 4}, 64, 1000,
                              0.02, 2e6),
        0.35, 0.75);
    PlanningContext context;
    context.profile = &profile;
    context.profile_path = "profile.json";
    const int devices = 1 << (case_idx % 4);
    context.cluster = make_cluster(profile, devices, int64_t{1} << 30, std::max(devices / 2, 1),
                                   kDefaultInterNodeBandwidthBytesPerS);
    context.global_batch = 16;
    SearchOptions options;
    options.top_k = kMaxTopK;  // with prune off: every feasible plan of these small searches
    options.prune = false;
    for (const Plan& plan : search(context, options).plans) {
      const LayerTable table(profile, plan.micro_batch_size, context.optimizer,
                             plan.schedule == Schedule::kZeroBubbleH1);
      zero_bubble_plans += plan.schedule == Schedule::kZeroBubbleH1;
      bool all_checkpointed = true;
      for (const StagePlan& stage : plan.stages) all_checkpointed &= stage.checkpoint;
      const Candidate candidate{plan.dp,
                                plan.pp,
                                plan.micro_batch_size,
                                plan.num_micro_batches,
                                plan.schedule,
                                all_checkpointed ? CheckpointPolicy::kAll : CheckpointPolicy::kNone,
                                Layout::kReplicaMajor,
                                plan.virtual_stages,
                                plan.data_parallel.zero};
      interleaved_plans += plan.virtual_stages > 1;
      const int64_t path_ns =
          min_path_ns(table, plan.pp * plan.virtual_stages, plan.num_micro_batches,
                      all_checkpointed, least_boundary_ns(context.cluster, table));
      EXPECT_LE(refined_iteration_lower_bound_ms(context, table, candidate, path_ns),
                plan.predictions.iteration_ms * (1 + 1e-9))
          << "case " << case_idx << " dp=" << plan.dp << " pp=" << plan.pp;
      EXPECT_LE(iteration_lower_bound_ms(simulation_input(plan)),
                plan.predictions.iteration_ms * (1 + 1e-9))
          << "case " << case_idx << " dp=" << plan.dp << " pp=" << plan.pp << " V="
          << plan.virtual_stages;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
  EXPECT_GT(zero_bubble_plans, 10);
  EXPECT_GT(interleaved_plans, 10);
}

}  // namespace
}  // namespace pipeplan
