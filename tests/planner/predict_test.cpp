// Tests for planner/predict.h: re-predicting a mean-times plan with the draws gives what
// predicting it with the draws from the start gives; folded draws are noted.
#include "planner/predict.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "planner/search.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

TEST(PredictTest, VariationOnMeanTimesEqualsPredictingWithTheDraws) {
  std::mt19937_64 rng(21);
  int varied = 0;
  for (int case_idx = 0; case_idx < 6; ++case_idx) {
    Profile profile = testing::make_profile(testing::random_layers(rng, 6 + case_idx), {1, 2, 4},
                                            32, 1000, 0.02, 5e6);
    for (LayerProfile& layer : profile.layers)  // p90 above the median: times vary
      for (LayerPoint& point : layer.points) {
        point.fwd_ms_p90 = point.fwd_ms * (1 + 0.05 * case_idx);
        point.bwd_ms_p90 = point.bwd_ms * (1 + 0.05 * case_idx);
      }
    PlanningContext context;
    context.profile = &profile;
    context.profile_path = "profile.json";
    const int devices = 2 << (case_idx % 3);
    context.cluster =
        make_cluster(profile, devices, int64_t{1} << 30, 2, kDefaultInterNodeBandwidthBytesPerS);
    context.global_batch = 32;
    for (const Plan& found : search(context, SearchOptions{}).plans) {
      Plan direct = found;
      const SimulationResult simulated =
          predict_timing(&direct, SimulationOptions{/*record_timeline=*/false});
      Plan stepwise = found;
      predict_timing(&stepwise, SimulationOptions{/*record_timeline=*/false,
                                                  /*merge_identical_replicas=*/true,
                                                  /*variability_draws=*/0});
      predict_variation(&stepwise);
      EXPECT_EQ(to_json(stepwise), to_json(direct)) << "case " << case_idx;
      varied += simulated.variability_draws > 0;
    }
  }
  EXPECT_GT(varied, 10);
}

// A plan whose draws folded its replicas in says so in its notes, once.
TEST(PredictTest, FoldedDrawsAreNoted) {
  std::mt19937_64 rng(4);
  Profile profile =
      testing::make_profile(testing::random_layers(rng, 6), {1, 2, 4}, 32, 1000, 0.02, 5e6);
  for (LayerProfile& layer : profile.layers)
    for (LayerPoint& point : layer.points) point.fwd_ms_p90 = point.fwd_ms * 1.1;
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.cluster =
      make_cluster(profile, 8, int64_t{1} << 30, 2, kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = 32;
  const SearchResult result = search(context, SearchOptions{});
  ASSERT_FALSE(result.plans.empty());
  auto folded_notes = [](const Plan& plan) {
    return std::count_if(
        plan.predictions.notes.begin(), plan.predictions.notes.end(),
        [](const std::string& note) { return note.find("normal fit") != note.npos; });
  };
  EXPECT_EQ(folded_notes(result.plans.front()), 0);  // small: every replica is played
  Plan plan = result.plans.front();
  SimulationOptions fold{/*record_timeline=*/false};
  fold.replica_draws = ReplicaDraws::kFold;
  predict_timing(&plan, fold);
  predict_timing(&plan, fold);
  EXPECT_EQ(folded_notes(plan), 1);
}

}  // namespace
}  // namespace pipeplan
