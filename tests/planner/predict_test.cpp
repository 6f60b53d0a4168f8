// Tests for planner/predict.h: the planning context's bounds, the warnings of numbers that
// mislead, plans that predict no compute, and predictions beyond what a plan file may hold.
#include "planner/predict.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error.h"
#include "planner/search.h"
#include "tests/planner/test_profiles.h"
#include "tests/plans/test_plan.h"

namespace pipeplan {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
    return e.what();
  }
  return "";
}

PlanningContext context_for(const Profile& profile, int devices, int64_t memory_bytes,
                            int64_t global_batch) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.cluster = make_cluster(profile, devices, memory_bytes, devices,
                                 kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = global_batch;
  return context;
}

TEST(PredictTest, ContextNamesTheProfileWhenAnOptimizerStepIsMissing) {
  Profile profile = testing::make_profile(testing::equal_layers(3, 1, 2));
  profile.layers[2].optimizer_step_ms.erase("adamw");
  PlanningContext context = context_for(profile, 2, int64_t{1} << 30, 8);
  EXPECT_NO_THROW(context.validate());
  context.optimizer = OptimizerKind::kAdamw;
  EXPECT_EQ(error_of([&] { context.validate(); }),
            "profile.json: layers[2].optimizer_step_ms: no 'adamw' entry: expected one for "
            "--optimizer adamw (profile again, or choose another --optimizer)");
}

// Issue 18: numbers that mislead are reported with the layer and the fit.
TEST(PredictTest, WarnsOfFallingFitsClampedTimesAndACpuProfileForGpus) {
  Profile profile = testing::make_profile(testing::equal_layers(3, 1, 2), {2, 4});
  LayerProfile& layer = profile.layers[1];
  layer.points[0].fwd_ms = layer.points[0].fwd_ms_p90 = 3;  // 3 ms at 2, 2 ms at 4
  layer.points[1].fwd_ms = layer.points[1].fwd_ms_p90 = 2;
  layer.fits = fit_points(layer.points);
  PlanningContext context = context_for(profile, 2, int64_t{1} << 30, 16);
  const std::vector<std::string> at_16 = planning_warnings(context, 16);
  ASSERT_EQ(at_16.size(), 2u) << ::testing::PrintToString(at_16);
  EXPECT_EQ(at_16[0],
            "profile.json: layers[1] ('layer1'): the fwd_ms fit falls as the batch grows (4 + -0.5 "
            "per sample): its values between and beyond the profiled batch sizes are guesses");
  EXPECT_EQ(at_16[1],
            "profile.json: layers[1] ('layer1'): its fwd_ms at micro-batch 16 is clamped to 0 (the "
            "fit gives -4 ms outside the profiled batch sizes)");
  EXPECT_EQ(planning_warnings(context, std::nullopt).size(), 1u);
  context.cluster.device_memory_bytes = kGpuSizedMemoryBytes;
  EXPECT_EQ(planning_warnings(context, 4).front().rfind(
                "profile.json: planning devices of 16.0 GiB from a CPU profile ('test cpu'): every "
                "time is that CPU's, not a GPU's",
                0),
            0u);
}

// Issue 18: a plan whose stages predict no compute made `simulate` and `compare` print
// iterations of 0 ms and throughputs of 0.
TEST(PredictTest, APlanPredictingNoComputeIsRefused) {
  const Plan plan = testing::make_test_plan(1, 2, 4, Schedule::kOneFOneB);
  EXPECT_EQ(error_of([&] { check_predicts_compute(plan, "plan.json"); }),
            "plan.json: predictions.stages: every stage predicts 0 ms of compute: expected a plan "
            "made by pipeplan plan from a profile with measured times");
  Plan measured = plan;
  measured.predictions.stages[1].compute_ms = 4;
  EXPECT_NO_THROW(check_predicts_compute(measured, "plan.json"));
}

// Issue 18: a link so slow that a transfer passes the planner's limits is bad input, not an
// overflow inside the partitioner.
TEST(PredictTest, TransfersBeyondThePlannersLimitAreRefused) {
  std::vector<testing::LayerSpec> layers = testing::equal_layers(4, 1, 2);
  for (testing::LayerSpec& layer : layers) layer.output_floats = 1 << 20;  // 4 MiB per sample
  const Profile profile = testing::make_profile(layers, {1, 2, 4}, 5, 0, 0, /*bandwidth=*/1);
  SearchOptions options;
  options.pp = 2;
  EXPECT_NE(error_of([&] { search(context_for(profile, 2, int64_t{1} << 40, 8), options); })
                .find("a transfer between stages takes"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
