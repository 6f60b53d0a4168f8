// Tests for planner/predict.h: the planning context's bounds, the warnings of numbers that
// mislead, plans that predict no compute, predictions beyond what a plan file may hold, and
// re-predicting a mean-times plan with the draws, and plans past the draw budget.
#include "planner/predict.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include "common/error.h"
#include "planner/bounds.h"
#include "planner/interleaved_partition.h"
#include "planner/search.h"
#include "tests/common/error_of.h"
#include "tests/planner/test_profiles.h"
#include "tests/plans/test_plan.h"

namespace pipeplan {
namespace {

using testing::error_of;

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
      EXPECT_EQ(predict_variation(&stepwise), simulated.variability_draws > 0);
      EXPECT_EQ(to_json(stepwise), to_json(direct)) << "case " << case_idx;
      EXPECT_EQ(direct.predictions.iteration_estimate == IterationEstimate::kDraws,
                simulated.variability_draws > 0);
      varied += simulated.variability_draws > 0;
    }
  }
  EXPECT_GT(varied, 10);
}

// A plan whose varying action times are drawn says so; one whose draws pass the budget is the
// mean-times play and says that, once, in iteration_estimate and in a note.
TEST(PredictTest, PlansPastTheDrawBudgetArePredictedWithMeanTimes) {
  std::vector<testing::LayerSpec> layers = testing::equal_layers(8, 1.0, 2.0);
  Profile profile = testing::make_profile(layers, {1, 2, 4}, 32, 1000, 0.02, 5e6);
  for (LayerProfile& layer : profile.layers)
    for (LayerPoint& point : layer.points) point.fwd_ms_p90 = point.fwd_ms * 1.1;
  const LayerTable table(profile, 1, OptimizerKind::kSgd);
  auto plan_for = [&](int dp) {  // pp = 8, b = 1, m = 128
    const PlanningContext context = context_for(profile, dp * 8, int64_t{1} << 30, dp * 128);
    const Candidate candidate{dp, 8, 1, 128, Schedule::kOneFOneB};
    const PartitionResult split = run_partition(
        PartitionSpec{}, StageEvaluator(table, partition_problem(context, candidate)));
    Plan plan = build_plan(context, table, candidate, split, "optimal");
    predict_timing(&plan, SimulationOptions{/*record_timeline=*/false});
    return plan;
  };
  auto budget_notes = [](const Plan& plan) {
    return std::count_if(
        plan.predictions.notes.begin(), plan.predictions.notes.end(),
        [](const std::string& note) { return note.find("draw budget") != note.npos; });
  };
  // 32 draws × 2 replicas × 8 stages × 128 micro-batches × 2 actions = 131,072 actions.
  const Plan drawn = plan_for(2);
  EXPECT_EQ(drawn.predictions.iteration_estimate, IterationEstimate::kDraws);
  EXPECT_EQ(budget_notes(drawn), 0);
  // With 64 replicas, 4.2 million: past the budget.
  Plan steady = plan_for(64);
  EXPECT_EQ(steady.predictions.iteration_estimate, IterationEstimate::kMeanTimes);
  EXPECT_EQ(budget_notes(steady), 1);
  EXPECT_FALSE(predict_variation(&steady));
  predict_timing(&steady, SimulationOptions{/*record_timeline=*/false});
  EXPECT_EQ(budget_notes(steady), 1);
  EXPECT_EQ(
      steady.predictions.iteration_ms,
      simulate(simulation_input(steady), {false, true, /*variability_draws=*/0}).iteration_ms);
  EXPECT_NO_THROW(steady.validate("plan.json"));
}

// interleaved-1f1b, pp = 2, V = 2, 8 equal layers (1 ms forward, 2 ms backward each), every chunk
// checkpointed: 4 chunks of 2 layers, stage s holding global chunks s and s + 2.
TEST(PredictTest, InterleavedStagesPredictEachChunkAndTheirSums) {
  const Profile profile = testing::make_profile(testing::equal_layers(8, 1.0, 2.0), {1, 2, 4}, 5,
                                                1000, /*p2p_latency_ms=*/0.02, 5e6);
  const PlanningContext context = context_for(profile, 2, int64_t{1} << 30, 4);
  const Candidate candidate{1, 2, 1, 4, Schedule::kInterleaved1F1B, CheckpointPolicy::kAll,
                            Layout::kReplicaMajor, /*virtual_stages=*/2};
  const LayerTable table(profile, 1, OptimizerKind::kSgd);
  const PartitionResult split =
      interleaved_partition(PartitionSpec{}, table, partition_problem(context, candidate));
  ASSERT_TRUE(split.feasible) << split.reason;
  EXPECT_EQ(split.boundaries, (std::vector<int>{0, 2, 4, 6, 8}));
  EXPECT_EQ(split.checkpoint, (std::vector<bool>(4, true)));
  Plan plan = build_plan(context, table, candidate, split, "optimal");
  EXPECT_EQ(plan.virtual_stages, 2);
  ASSERT_EQ(plan.stages.size(), 4u);
  EXPECT_EQ(plan.stages[2].first, 4);
  EXPECT_TRUE(plan.stages[3].checkpoint);
  ASSERT_EQ(plan.predictions.stages.size(), 2u);
  for (const StagePrediction& stage : plan.predictions.stages) {
    ASSERT_EQ(stage.chunks.size(), 2u);
    for (const ChunkPrediction& chunk : stage.chunks) {
      EXPECT_NEAR(chunk.fwd_ms, 2.0, 1e-9);
      EXPECT_NEAR(chunk.bwd_ms, 4.0, 1e-9);
      EXPECT_NEAR(chunk.recompute_ms, 2.0, 1e-9);
    }
    EXPECT_NEAR(stage.fwd_ms, 4.0, 1e-9);
    EXPECT_NEAR(stage.recompute_ms, 4.0, 1e-9);
    EXPECT_NEAR(stage.p2p_ms, stage.chunks[0].p2p_ms + stage.chunks[1].p2p_ms, 1e-12);
    EXPECT_NEAR(stage.compute_ms, 4 * (4.0 + 8.0 + 4.0), 1e-9);
    EXPECT_EQ(stage.memory.total_bytes, stage.peak_memory_bytes);
  }
  // The model's first chunk sends only its output, a middle chunk its input gradient too, the
  // last only its input gradient: each send one 4-byte boundary over the same link.
  const std::vector<ChunkPrediction>& s0 = plan.predictions.stages[0].chunks;
  const std::vector<ChunkPrediction>& s1 = plan.predictions.stages[1].chunks;
  EXPECT_GT(s0[0].p2p_ms, 0);
  EXPECT_NEAR(s0[1].p2p_ms, 2 * s0[0].p2p_ms, 1e-12);
  EXPECT_NEAR(s1[0].p2p_ms, 2 * s0[0].p2p_ms, 1e-12);
  EXPECT_NEAR(s1[1].p2p_ms, s0[0].p2p_ms, 1e-12);
  predict_timing(&plan, SimulationOptions{/*record_timeline=*/false});
  EXPECT_NO_THROW(plan.validate("plan.json"));
  EXPECT_GE(plan.predictions.iteration_ms, iteration_lower_bound_ms(simulation_input(plan)));
  // The rank holds w + 1 chunk micro-batches at its peak, shared among its chunks.
  EXPECT_EQ(plan.predictions.stages[0].memory.in_flight,
            interleaved_rank_in_flight(2, 2, 0, /*num_micro_batches=*/4));
}

TEST(PredictTest, ReplicasPredictBucketsInTheOrderTheirGradientsCompleteAndZeroOneShards) {
  // 4 layers of 1,000 parameters (4,000 gradient bytes) each, backward 2 ms per sample; a
  // measured all-reduce, reduce-scatter and all-gather over 2 ranks.
  std::vector<testing::LayerSpec> layers = testing::equal_layers(4, 1.0, 2.0);
  for (testing::LayerSpec& layer : layers) {
    layer.param_count = 1000;
    layer.sgd_step_ms = 0.5;
  }
  Profile profile = testing::make_profile(layers, {1, 2}, 5, 0, 0.01, 1e9);
  profile.interconnect->allreduce = {0.2, 1e8, 0, {}};
  profile.interconnect->reduce_scatter = {0.1, 1e8, 0, {}};
  profile.interconnect->all_gather = {0.05, 2e8, 0, {}};
  PlanningContext context = context_for(profile, 2, int64_t{1} << 30, 4);
  context.data_parallel.bucket_bytes = 8000;  // two layers a bucket
  const LayerTable table(profile, 1, OptimizerKind::kSgd);
  Candidate candidate{2, 1, 1, 2, Schedule::kOneFOneB, CheckpointPolicy::kNone,
                      Layout::kReplicaMajor, 1};
  PartitionResult split;
  split.feasible = true;
  split.boundaries = {0, 4};
  split.checkpoint = {false};
  const Plan plan = build_plan(context, table, candidate, split, "optimal");
  EXPECT_TRUE(plan.data_parallel.overlap);
  EXPECT_EQ(plan.data_parallel.bucket_bytes, 8000);
  const StagePrediction& stage = plan.predictions.stages[0];
  ASSERT_EQ(stage.buckets.size(), 2u);
  // Layers 3 and 2 first, ready half-way through the backward; layers 1 and 0 at its end.
  EXPECT_EQ(stage.buckets[0].bytes, 8000);
  EXPECT_DOUBLE_EQ(stage.buckets[0].ready_fraction, 0.5);
  EXPECT_DOUBLE_EQ(stage.buckets[1].ready_fraction, 1.0);
  EXPECT_DOUBLE_EQ(stage.buckets[0].comm_ms, 0.2 + 8000 / 1e8 * 1e3);
  EXPECT_DOUBLE_EQ(stage.allreduce_ms, 2 * (0.2 + 0.08));
  EXPECT_DOUBLE_EQ(stage.optimizer_ms, 2.0);
  EXPECT_EQ(stage.allgather_ms, 0);
  const std::string& note = plan.predictions.notes.back();
  EXPECT_NE(note.find("all-reduce time is the profile's measured fit over 2 ranks"),
            std::string::npos)
      << note;

  candidate.zero = 1;
  const Plan sharded = build_plan(context, table, candidate, split, "optimal");
  EXPECT_EQ(sharded.data_parallel.zero, 1);
  const StagePrediction& shard = sharded.predictions.stages[0];
  EXPECT_DOUBLE_EQ(shard.allreduce_ms, 2 * (0.1 + 0.08));   // reduce-scatters
  EXPECT_DOUBLE_EQ(shard.allgather_ms, 2 * (0.05 + 0.04));  // all-gathers
  EXPECT_DOUBLE_EQ(shard.optimizer_ms, 1.0);                // half the parameters
  // SGD momentum of 4,000 parameters, half of it per replica.
  EXPECT_EQ(stage.memory.optimizer_state_bytes, 16000);
  EXPECT_EQ(shard.memory.optimizer_state_bytes, 8000);
  EXPECT_EQ(shard.memory.total_bytes, stage.memory.total_bytes - 8000);
  EXPECT_NO_THROW(sharded.validate("plan.json"));
  // Without a reduce-scatter fit, the ring formula on the point-to-point link, said so.
  profile.interconnect->reduce_scatter = {};
  const Plan ring = build_plan(context, table, candidate, split, "optimal");
  EXPECT_DOUBLE_EQ(ring.predictions.stages[0].buckets[0].comm_ms, 0.01 + 8000 / 1e9 * 1e3 / 2);
  EXPECT_NE(ring.predictions.notes.back().find(
                "all-gather time is the profile's measured fit over 2 ranks; the reduce-scatter "
                "time comes from the ring formula"),
            std::string::npos)
      << ring.predictions.notes.back();
}

}  // namespace
}  // namespace pipeplan
