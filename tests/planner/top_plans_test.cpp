// Tests for planner/top_plans.h: the best plans kept in rank order, each predicted with its
// draws on background threads exactly as predict_variation predicts it alone.
#include "planner/top_plans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "planner/predict.h"
#include "planner/search.h"
#include "planner/search_space.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

bool faster(const Plan& a, const Plan& b) {
  return a.predictions.iteration_ms < b.predictions.iteration_ms;
}

// Eight random layers whose forward and backward times vary (p90 30 % above the median).
Profile varying_profile(std::mt19937_64& rng) {
  Profile profile = testing::make_profile(testing::random_layers(rng, 8), {1, 2, 4}, 32);
  for (LayerProfile& layer : profile.layers) {
    for (LayerPoint& point : layer.points) {
      point.fwd_ms_p90 = point.fwd_ms * 1.3;
      point.bwd_ms_p90 = point.bwd_ms * 1.3;
    }
    layer.fits = fit_points(layer.points);
  }
  profile.validate("test profile");
  return profile;
}

// Plans of an eight-layer model on 4 devices, predicted with mean action times only: every
// plan of an exhaustive search, its draws undone.
std::vector<Plan> mean_time_plans(const Profile& profile) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.cluster =
      make_cluster(profile, 4, int64_t{1} << 30, 4, kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = 16;
  SearchOptions options;
  options.prune = false;
  options.top_k = 40;
  std::vector<Plan> plans = search(context, options).plans;
  for (Plan& plan : plans)
    predict_timing(&plan, SimulationOptions{/*record_timeline=*/false,
                                            /*merge_identical_replicas=*/true,
                                            /*variability_draws=*/0});
  // One plan per iteration time, so that the ranking below has no ties.
  std::stable_sort(plans.begin(), plans.end(), faster);
  plans.erase(std::unique(plans.begin(), plans.end(),
                          [](const Plan& a, const Plan& b) {
                            return a.predictions.iteration_ms == b.predictions.iteration_ms;
                          }),
              plans.end());
  return plans;
}

Plan drawn(Plan plan) {
  predict_variation(&plan);
  return plan;
}

TEST(TopPlansTest, KeepsTheBestInRankOrderEachDrawnAsAlone) {
  std::mt19937_64 rng(7);
  const Profile profile = varying_profile(rng);
  std::vector<Plan> plans = mean_time_plans(profile);
  ASSERT_GE(plans.size(), 10u);
  std::shuffle(plans.begin(), plans.end(), rng);  // offered in no particular order

  constexpr int kKept = 5;
  TopPlans top(kKept, faster);
  for (const Plan& plan : plans) top.offer(plan);
  EXPECT_TRUE(top.full());
  const std::vector<Plan> result = top.finish();

  std::vector<Plan> expected = plans;
  std::stable_sort(expected.begin(), expected.end(), faster);
  expected.resize(kKept);
  ASSERT_EQ(result.size(), expected.size());
  int changed = 0;  // plans whose draws moved the prediction: the draws did run
  for (size_t idx = 0; idx < result.size(); ++idx) {
    EXPECT_EQ(to_json(result[idx]), to_json(drawn(expected[idx]))) << "plan " << idx;
    changed += result[idx].predictions.iteration_ms != expected[idx].predictions.iteration_ms;
  }
  EXPECT_GT(changed, 0);
}

TEST(TopPlansTest, AWorsePlanIsNotKeptOnceFull) {
  std::mt19937_64 rng(8);
  const Profile profile = varying_profile(rng);
  const std::vector<Plan> plans = mean_time_plans(profile);  // fastest first
  ASSERT_GE(plans.size(), 4u);
  TopPlans top(2, faster);
  top.offer(plans[2]);
  top.offer(plans[0]);
  EXPECT_EQ(top.worst().predictions.iteration_ms, plans[2].predictions.iteration_ms);
  top.offer(plans.back());  // no better than the worst kept: not kept
  top.offer(plans[1]);      // pushes plans[2] out
  EXPECT_EQ(top.size(), 2);
  EXPECT_EQ(top.worst().predictions.iteration_ms, plans[1].predictions.iteration_ms);
  const std::vector<Plan> result = top.finish();
  ASSERT_EQ(result.size(), 2u);
  EXPECT_EQ(to_json(result[0]), to_json(drawn(plans[0])));
  EXPECT_EQ(to_json(result[1]), to_json(drawn(plans[1])));
}

TEST(TopPlansTest, PredictWithDrawsKeepsTheOrder) {
  std::mt19937_64 rng(9);
  const Profile profile = varying_profile(rng);
  std::vector<Plan> plans = mean_time_plans(profile);
  plans.resize(std::min<size_t>(plans.size(), 9));
  std::reverse(plans.begin(), plans.end());
  std::vector<Plan> result = plans;
  predict_with_draws(&result);
  ASSERT_EQ(result.size(), plans.size());
  for (size_t idx = 0; idx < plans.size(); ++idx)
    EXPECT_EQ(to_json(result[idx]), to_json(drawn(plans[idx]))) << "plan " << idx;
}

}  // namespace
}  // namespace pipeplan
