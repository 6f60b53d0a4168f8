// Tests for planner/search.h: narrowing flags, equivalence of the pruned and the exhaustive
// search, infeasible families with reasons, and bad input.
#include "planner/search.h"

#include <gtest/gtest.h>

#include <random>

#include "common/limits.h"
#include "tests/common/error_of.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

PlanningContext context_for(const Profile& profile, int devices, int64_t memory_bytes,
                            int64_t global_batch, int devices_per_node = 0) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.profile_hash = "fnv1a64:0000000000000002";
  context.cluster = make_cluster(profile, devices, memory_bytes,
                                 devices_per_node > 0 ? devices_per_node : devices,
                                 kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = global_batch;
  context.notes = planning_notes(profile, context.cluster, false);
  return context;
}

using testing::error_of;

TEST(SearchTest, BestPlanIsValidSimulatedAndRankedFirst) {
  const Profile profile = testing::eight_layer_profile(1);
  const PlanningContext context = context_for(profile, 4, int64_t{1} << 30, 16);
  const SearchResult result = search(context, SearchOptions{});
  ASSERT_FALSE(result.plans.empty());
  EXPECT_LE(result.plans.size(), 5u);
  // Ranked by whole nanoseconds of iteration: plans within one nanosecond tie (then memory).
  for (size_t idx = 1; idx < result.plans.size(); ++idx)
    EXPECT_GE(result.plans[idx - 1].predictions.samples_per_s * (1 + 1e-9),
              result.plans[idx].predictions.samples_per_s);
  const Plan& best = result.plans.front();
  EXPECT_NO_THROW(best.validate("plan.json"));
  EXPECT_GT(best.predictions.iteration_ms, 0);
  EXPECT_DOUBLE_EQ(best.predictions.samples_per_s, 16 / best.predictions.iteration_ms * 1000);
  for (const StagePrediction& stage : best.predictions.stages) {
    EXPECT_NEAR(stage.busy_ms + stage.idle_ms, best.predictions.iteration_ms, 1e-9);
    EXPECT_EQ(stage.peak_memory_bytes, stage.memory.total_bytes);
    EXPECT_GT(stage.memory.total_bytes, 0);
  }
  EXPECT_EQ(best.profile_hash, "fnv1a64:0000000000000002");
  EXPECT_LE(result.evaluated, result.candidates);
  EXPECT_LE(result.simulated, result.evaluated);
  EXPECT_GE(result.simulated, static_cast<int>(result.plans.size()));
}

TEST(SearchTest, FlagsNarrowTheSearch) {
  const Profile profile = testing::eight_layer_profile(2);
  const PlanningContext context = context_for(profile, 4, int64_t{1} << 30, 16);
  SearchOptions options;
  options.pp = 2;
  options.micro_batch_size = 2;
  options.schedules = {Schedule::kGpipe};
  options.policies = {CheckpointPolicy::kAll};
  options.top_k = 10;
  const SearchResult result = search(context, options);
  ASSERT_FALSE(result.plans.empty());
  for (const Plan& plan : result.plans) {
    EXPECT_EQ(plan.pp, 2);
    EXPECT_EQ(plan.dp, 2);
    EXPECT_EQ(plan.micro_batch_size, 2);
    EXPECT_EQ(plan.num_micro_batches, 4);
    EXPECT_EQ(plan.schedule, Schedule::kGpipe);
    for (const StagePlan& stage : plan.stages) EXPECT_TRUE(stage.checkpoint);
  }
  SearchOptions by_dp;
  by_dp.dp = 4;
  by_dp.top_k = 50;
  const std::vector<Plan> dp4 = search(context, by_dp).plans;
  ASSERT_FALSE(dp4.empty());
  for (const Plan& plan : dp4) EXPECT_EQ(plan.dp, 4);
  SearchOptions uniform;
  uniform.partition = parse_partition("uniform", 8, "--partition");
  uniform.pp = 4;
  const std::vector<Plan> uniform_plans = search(context, uniform).plans;
  ASSERT_FALSE(uniform_plans.empty());
  for (const Plan& plan : uniform_plans) {
    EXPECT_EQ(plan.partition, "uniform");
    EXPECT_EQ(plan.stages[1].first, 8 / (4 * plan.virtual_stages));  // interleaved: 4·V chunks
  }
  SearchOptions ranges;
  ranges.partition = parse_partition("0:1,1:8", 8, "--partition");
  const std::vector<Plan> range_plans = search(context, ranges).plans;
  ASSERT_FALSE(range_plans.empty());
  for (const Plan& plan : range_plans) {
    EXPECT_EQ(plan.pp, 2);
    EXPECT_EQ(plan.stages[0].last, 1);
  }
}

TEST(SearchTest, PrunedSearchEqualsExhaustiveSearch) {
  std::mt19937_64 rng(99);
  int pruned = 0;
  int interleaved = 0;
  size_t reported = 0;
  int unsearched = 0;
  int rivalled_outside = 0;
  for (int case_idx = 0; case_idx < 30; ++case_idx) {
    Profile profile = testing::make_profile(testing::random_layers(rng, 3 + case_idx % 6),
                                            {1, 2, 4}, 64, 1000, 0.02, 2e6);
    // Half the profiles have the B/W split, so that zb-h1 is searched and pruned too.
    if (case_idx % 2 == 0) profile = testing::with_backward_split(profile, 0.4, 0.7);
    const int devices = 1 << (case_idx % 4);
    const int64_t batch = int64_t{8} << (case_idx % 3);
    const int64_t memory = (case_idx % 5 == 0) ? 300'000 : int64_t{1} << 30;  // sometimes tight
    const PlanningContext context =
        context_for(profile, devices, memory, batch, case_idx % 2 ? 2 : 0);
    SearchOptions options;
    options.top_k = 1 + case_idx % 4;
    options.prune = true;
    const SearchResult fast = search(context, options);
    options.prune = false;
    const SearchResult full = search(context, options);
    EXPECT_EQ(full.pruned, 0);
    ASSERT_EQ(fast.plans.size(), full.plans.size()) << "case " << case_idx;
    for (size_t idx = 0; idx < fast.plans.size(); ++idx)
      EXPECT_EQ(to_json(fast.plans[idx]), to_json(full.plans[idx])) << "case " << case_idx;
    // Families reported infeasible with pruning are infeasible (the reasons may differ).
    auto family = [](const std::string& line) { return line.substr(0, line.find(':')); };
    for (const std::string& line : fast.infeasible) {
      const bool also =
          std::any_of(full.infeasible.begin(), full.infeasible.end(),
                      [&](const std::string& other) { return family(other) == family(line); });
      EXPECT_TRUE(also) << line;
    }
    reported += fast.infeasible.size();
    pruned += fast.pruned;
    for (const Plan& plan : full.plans) interleaved += plan.virtual_stages > 1;
    if (full.plans.empty()) continue;
    // With a rival (search_tensor_parallel's): the best plan and those that reach the rival
    // are the exhaustive search's, or, when no candidate could, its bound.
    options.prune = true;
    for (const double rival : {full.plans.front().predictions.samples_per_s * 1.5,
                               full.plans.front().predictions.samples_per_s,
                               full.plans.back().predictions.samples_per_s}) {
      options.rival_samples_per_s = rival;
      const SearchResult rivalled = search(context, options);
      const Plan& best = full.plans.front();
      if (rivalled.unsearched_bound_ms) {
        ++unsearched;
        EXPECT_TRUE(rivalled.plans.empty());
        EXPECT_LE(*rivalled.unsearched_bound_ms, best.predictions.iteration_ms * (1 + 1e-9));
        EXPECT_LT(best.predictions.samples_per_s, rival);
        continue;
      }
      ASSERT_FALSE(rivalled.plans.empty()) << "case " << case_idx;
      for (size_t idx = 0; idx < full.plans.size(); ++idx) {
        if (idx > 0 && full.plans[idx].predictions.samples_per_s < rival) break;
        ASSERT_LT(idx, rivalled.plans.size()) << "case " << case_idx;
        EXPECT_EQ(to_json(rivalled.plans[idx]), to_json(full.plans[idx])) << "case " << case_idx;
      }
      rivalled_outside += best.predictions.samples_per_s < rival;
    }
    options.rival_samples_per_s.reset();
  }
  EXPECT_GT(interleaved, 5);  // interleaved-1f1b is among the plans compared
  EXPECT_GT(pruned, 100);  // the bound does prune
  EXPECT_GT(reported, 0u);
  EXPECT_GT(unsearched, 0);        // a rival no candidate can reach: not searched
  EXPECT_GT(rivalled_outside, 0);  // searched for its own best alone
}

// A rival no plan reaches leaves the search its own best, exact, wherever the best-first order
// simulates a slower plan first.
TEST(SearchTest, ARivalledSearchFindsItsOwnBest) {
  std::mt19937_64 rng(7);
  int searched = 0;
  for (int case_idx = 0; case_idx < 40; ++case_idx) {
    Profile profile = testing::make_profile(testing::random_layers(rng, 6 + case_idx % 7),
                                            {1, 2, 4, 8}, 64, 1000, 0.02, 2e6);
    if (case_idx % 2 == 0) profile = testing::with_backward_split(profile, 0.4, 0.7);
    const int64_t memory = case_idx % 3 == 0 ? 400'000 : int64_t{1} << 30;
    const PlanningContext context = context_for(profile, 4 << (case_idx % 3), memory, 64, 4);
    SearchOptions options;
    options.top_k = 1;
    options.prune = false;
    const SearchResult full = search(context, options);
    if (full.plans.empty()) continue;
    options.prune = true;
    options.rival_samples_per_s = full.plans.front().predictions.samples_per_s * 1.001;
    const SearchResult rivalled = search(context, options);
    if (rivalled.unsearched_bound_ms) continue;
    ++searched;
    ASSERT_EQ(rivalled.plans.size(), 1u) << "case " << case_idx;
    EXPECT_EQ(to_json(rivalled.plans.front()), to_json(full.plans.front())) << "case " << case_idx;
  }
  EXPECT_GT(searched, 10);
}

// What the search does and reports is the same from run to run (nothing depends on addresses
// or on the order of unordered containers).
TEST(SearchTest, TheSameFromRunToRun) {
  std::mt19937_64 rng(5);
  for (int case_idx = 0; case_idx < 6; ++case_idx) {
    Profile profile = testing::make_profile(testing::random_layers(rng, 12), {1, 2, 4, 8}, 64,
                                            1000, 0.02, 2e6);
    if (case_idx % 2 == 0) profile = testing::with_backward_split(profile, 0.4, 0.7);
    const int64_t memory = case_idx % 3 == 0 ? 400'000 : int64_t{1} << 30;
    const PlanningContext context = context_for(profile, 16, memory, 64, 4);
    const SearchResult first = search(context, SearchOptions{});
    for (int repeat = 0; repeat < 3; ++repeat) {
      const SearchResult again = search(context, SearchOptions{});
      EXPECT_EQ(again.evaluated, first.evaluated) << "case " << case_idx;
      EXPECT_EQ(again.simulated, first.simulated) << "case " << case_idx;
      EXPECT_EQ(again.pruned, first.pruned) << "case " << case_idx;
      EXPECT_EQ(again.infeasible, first.infeasible) << "case " << case_idx;
      ASSERT_EQ(again.plans.size(), first.plans.size()) << "case " << case_idx;
      for (size_t idx = 0; idx < first.plans.size(); ++idx)
        EXPECT_EQ(to_json(again.plans[idx]), to_json(first.plans[idx])) << "case " << case_idx;
    }
  }
}

// Plans are ranked by the iteration they predict, drawn where their action times vary and the
// draws fit the budget: the top K equal the first K of the longest list, in which every plan
// that could rank is drawn, and are in order of their predictions.
TEST(SearchTest, RankedByTheirDrawnIterations) {
  std::mt19937_64 rng(17);
  int drawn = 0;
  for (int case_idx = 0; case_idx < 8; ++case_idx) {
    Profile profile = testing::make_profile(testing::random_layers(rng, 6 + case_idx % 4),
                                            {1, 2, 4}, 64, 1000, 0.02, 2e6);
    for (LayerProfile& layer : profile.layers)
      for (LayerPoint& point : layer.points) {
        point.fwd_ms_p90 = point.fwd_ms * (1.1 + 0.1 * (case_idx % 3));
        point.bwd_ms_p90 = point.bwd_ms * 1.2;
      }
    const PlanningContext context = context_for(profile, 4 << (case_idx % 2), int64_t{1} << 30, 32);
    SearchOptions options;
    options.top_k = 2 + case_idx % 3;
    const SearchResult top = search(context, options);
    options.top_k = kMaxTopK;
    const SearchResult all = search(context, options);
    ASSERT_GE(all.plans.size(), top.plans.size()) << "case " << case_idx;
    for (size_t idx = 0; idx < top.plans.size(); ++idx) {
      EXPECT_EQ(to_json(top.plans[idx]), to_json(all.plans[idx])) << "case " << case_idx;
      drawn += top.plans[idx].predictions.iteration_estimate == IterationEstimate::kDraws;
    }
    for (size_t idx = 1; idx < all.plans.size(); ++idx)
      EXPECT_LE(to_ns(all.plans[idx - 1].predictions.iteration_ms),
                to_ns(all.plans[idx].predictions.iteration_ms))
          << "case " << case_idx;
  }
  EXPECT_GT(drawn, 10);
}

TEST(SearchTest, EveryInfeasibleFamilyHasAReason) {
  const Profile profile = testing::three_layer_profile();
  const PlanningContext context = context_for(profile, 2, 20'000, 4);
  const SearchResult result = search(context, SearchOptions{});
  EXPECT_TRUE(result.plans.empty());
  // Families: dp=2 pp=1 b in {1, 2}; dp=1 pp=2 b in {1, 2, 4}.
  ASSERT_EQ(result.infeasible.size(), 5u);
  EXPECT_EQ(result.infeasible[0].rfind(
                "dp=1 pp=2 b=1: stage 0 can hold at most layers 0..0 within 19.5 KiB each", 0),
            0u)
      << result.infeasible[0];
  EXPECT_NE(result.infeasible[0].find(" > 19.5 KiB"), std::string::npos) << result.infeasible[0];
  EXPECT_NE(result.infeasible[0].find("(1f1b, checkpoint"), std::string::npos);
  EXPECT_EQ(result.infeasible[4].rfind("dp=2 pp=1 b=2: stage 0 needs ", 0), 0u)
      << result.infeasible[4];
}

TEST(SearchTest, ExtrapolatedMicroBatchesCarryANote) {
  const Profile profile = testing::eight_layer_profile(3);
  const PlanningContext context = context_for(profile, 1, int64_t{1} << 30, 16);
  SearchOptions options;
  options.micro_batch_size = 8;
  const SearchResult result = search(context, options);
  ASSERT_FALSE(result.plans.empty());
  const std::vector<std::string>& notes = result.plans.front().predictions.notes;
  EXPECT_NE(std::find(notes.begin(), notes.end(),
                      "micro-batch 8 is beyond the profiled 1..4: extrapolated"),
            notes.end());
}

TEST(SearchTest, RejectsContradictoryFlagsNamingThem) {
  const Profile profile = testing::eight_layer_profile(4);
  const PlanningContext context = context_for(profile, 4, int64_t{1} << 30, 16);
  auto message = [&](const SearchOptions& options) {
    return error_of([&] { search(context, options); });
  };
  SearchOptions o;
  o.pp = 3;
  EXPECT_EQ(message(o), "--pp: 3 does not divide --devices 4");
  const PlanningContext wide = context_for(profile, 16, int64_t{1} << 30, 16);
  o.pp = 16;
  EXPECT_EQ(error_of([&] { search(wide, o); }),
            "--pp: 16 stages for a model of 8 layers (choose --pp <= 8)");
  o = {};
  o.dp = 4;
  o.pp = 2;
  EXPECT_EQ(message(o), "--dp 4 times --pp 2 is not --devices 4");
  o = {};
  o.dp = 4;
  o.micro_batch_size = 3;
  EXPECT_NE(message(o).find("--micro-batch-size: 3"), std::string::npos);
  const PlanningContext odd = context_for(profile, 4, int64_t{1} << 30, 3);
  o = {};
  o.dp = 2;
  EXPECT_EQ(error_of([&] { search(odd, o); }), "--dp: 2 does not divide --global-batch 3");
  const PlanningContext odd_wide = context_for(profile, 16, int64_t{1} << 30, 3);
  EXPECT_EQ(error_of([&] { search(odd_wide, SearchOptions{}); }),
            "--global-batch: 3 is not divisible by any dp in {16, 8, 4, 2} (choose a multiple of "
            "dp)");
  o = {};
  o.pp = 4;
  o.partition = parse_partition("0:4,4:8", 8, "--partition");
  EXPECT_EQ(message(o), "--partition: 2 ranges for --pp 4 (give one range per stage)");
}

// Issue 18: every size the search takes has a stated bound, named with the flag.
TEST(SearchTest, RefusesSizesBeyondTheirBoundsNamingTheBound) {
  const Profile profile = testing::eight_layer_profile(5);
  EXPECT_EQ(error_of([&] {
              search(context_for(profile, 4, int64_t{1} << 30, int64_t{1} << 40), SearchOptions{});
            }),
            "--global-batch: 1099511627776: expected an integer in [1, 16777216]");
  EXPECT_EQ(error_of([&] { search(context_for(profile, 1 << 17, int64_t{1} << 30, 16), {}); }),
            "--devices: 131072: expected an integer in [1, 16384]");
  EXPECT_EQ(error_of([&] { search(context_for(profile, 4, int64_t{1} << 60, 16), {}); }),
            "--device-memory: 1152921504606846976 bytes: expected a size in [1 byte, 1024.0 TiB]");
  const PlanningContext context = context_for(profile, 4, int64_t{1} << 30, 16);
  SearchOptions o;
  o.top_k = 1 << 30;
  EXPECT_EQ(error_of([&] { search(context, o); }), "--top: 1073741824: expected an integer in [1, 100]");
  o = {};
  o.micro_batch_size = int64_t{1} << 40;
  EXPECT_EQ(error_of([&] { search(context, o); }),
            "--micro-batch-size: 1099511627776: expected an integer in [1, 16777216]");
  // A micro-batch size that makes more than 16,384 micro-batches is no candidate.
  o = {};
  o.micro_batch_size = 1;
  EXPECT_NE(error_of([&] { search(context_for(profile, 1, int64_t{1} << 30, 32768), o); })
                .find("into at most 16384 micro-batches"),
            std::string::npos);
}

// Issue 18: `plan --global-batch 1099511627776` ran until killed (the divisors of the batch were
// listed one by one). The largest accepted sizes end with an answer; how long they take is
// measured by bench/planner_bench (BM_LargestAcceptedSizes), not asserted here.
TEST(SearchTest, LargestAcceptedSizesEndWithAnAnswer) {
  const Profile profile = testing::eight_layer_profile(6);
  for (const auto& [devices, global_batch] :
       {std::pair{kMaxDevices, kMaxBatchSize}, {1, kMaxBatchSize}, {48, int64_t{15} << 20}}) {
    const SearchResult result =
        search(context_for(profile, devices, int64_t{1} << 40, global_batch, 8), SearchOptions{});
    EXPECT_FALSE(result.plans.empty() && result.infeasible.empty())
        << devices << " devices, global batch " << global_batch;
  }
}

// The largest pipeline a plan may hold (kMaxPipelineMicroBatches micro-batches times stages),
// with action times that vary (the draws): searched, partitioned and predicted (its time:
// bench/planner_bench, BM_LargestAcceptedPipeline).
TEST(SearchTest, LargestAcceptedPipelineIsSearchedAndPredicted) {
  for (const auto& [pp, dp] : {std::pair{64, 1}, {512, 2}}) {
    const testing::LargestPipeline pipeline = testing::largest_pipeline(pp, dp);
    const SearchResult result = search(
        context_for(pipeline.profile, pp * dp, int64_t{1} << 40, pipeline.global_batch, 8),
        pipeline.options);
    ASSERT_EQ(result.plans.size(), 1u) << ::testing::PrintToString(result.infeasible);
    EXPECT_EQ(int64_t{result.plans[0].pp} * result.plans[0].num_micro_batches,
              kMaxPipelineMicroBatches);
  }
}

// Issue 18: profile times whose extrapolation passes the planner's 64-bit nanoseconds reached
// internal assertions of the partitioner; such a micro-batch size is now an infeasible family.
TEST(SearchTest, MicroBatchesBeyondThePlannersRangeAreInfeasibleWithTheReason) {
  std::vector<testing::LayerSpec> layers = testing::equal_layers(4, 1, 2);
  layers[2].fwd_ms = 1e7;  // per sample: 8e7 ms at 8, 1.6e8 ms at 16 (kMaxTimeMs: 1e8)
  const Profile profile = testing::make_profile(layers);
  const SearchResult result = search(context_for(profile, 2, int64_t{1} << 40, 32), {});
  ASSERT_FALSE(result.plans.empty());
  for (const Plan& plan : result.plans) EXPECT_LE(plan.micro_batch_size, 8);
  bool named = false;
  for (const std::string& reason : result.infeasible)
    named = named || reason.find("b=16: at micro-batch size 16 the profile's layers take") !=
                         std::string::npos;
  EXPECT_TRUE(named) << ::testing::PrintToString(result.infeasible);
}

// Issue 18: a profile whose times are all 0 made plans that predict no compute.
TEST(SearchTest, APlanPredictingNoComputeIsRefused) {
  const Profile profile = testing::make_profile(testing::equal_layers(4, 0, 0));
  const SearchResult result = search(context_for(profile, 2, int64_t{1} << 30, 8), {});
  EXPECT_TRUE(result.plans.empty());
  ASSERT_FALSE(result.infeasible.empty());
  EXPECT_NE(result.infeasible.front().find("take 0 ms"), std::string::npos)
      << result.infeasible.front();
}

// Issue 18: with one stage, GPipe and 1F1B are one plan (1F1B holding fewer activations); the
// list shows it once, named 1f1b, unless GPipe alone is asked for.
TEST(SearchTest, OneStagePlansAreListedOnce) {
  const Profile profile = testing::eight_layer_profile(7);
  const PlanningContext context = context_for(profile, 2, int64_t{1} << 30, 16);
  SearchOptions options;
  options.pp = 1;
  options.top_k = 20;
  const SearchResult result = search(context, options);
  ASSERT_FALSE(result.plans.empty());
  for (const Plan& plan : result.plans) {
    EXPECT_EQ(plan.schedule, Schedule::kOneFOneB);
    EXPECT_EQ(plan.predictions.bubble_fraction, 0);  // no pipeline, no bubble
  }
  options.schedules = {Schedule::kGpipe};
  EXPECT_EQ(search(context, options).plans.front().schedule, Schedule::kGpipe);
}

// Issue 21: zb-h1 is searched beside gpipe and 1f1b when the profile has the B/W split, wins
// where B + W cost what a whole backward costs (its deferred Ws fill 1f1b's cool-down), is left
// out of a profile without the split, and asked for alone on one is refused naming the cause.
TEST(SearchTest, ZeroBubbleH1IsSearchedWhenTheProfileSplitsTheBackward) {
  const Profile plain = testing::eight_layer_profile(7);
  const Profile split = testing::with_backward_split(plain, 0.5, 0.5);
  SearchOptions options;
  options.pp = 4;
  options.micro_batch_size = 2;
  options.top_k = 20;
  const SearchResult with_split = search(context_for(split, 4, int64_t{1} << 30, 16), options);
  ASSERT_FALSE(with_split.plans.empty());
  EXPECT_EQ(with_split.plans.front().schedule, Schedule::kZeroBubbleH1);
  const Plan* best_1f1b = nullptr;
  for (const Plan& plan : with_split.plans)
    if (plan.schedule == Schedule::kOneFOneB && !best_1f1b) best_1f1b = &plan;
  ASSERT_NE(best_1f1b, nullptr);
  EXPECT_LT(with_split.plans.front().predictions.bubble_fraction,
            best_1f1b->predictions.bubble_fraction);
  EXPECT_GT(with_split.plans.front().predictions.stages[0].bwd_weight_ms, 0);
  for (const Plan& plan : search(context_for(plain, 4, int64_t{1} << 30, 16), options).plans)
    EXPECT_NE(plan.schedule, Schedule::kZeroBubbleH1);
  options.schedules = {Schedule::kZeroBubbleH1};
  const std::string error = error_of([&] { search(context_for(plain, 4, int64_t{1} << 30, 16), options); });
  EXPECT_NE(error.find("bwd_input_ms"), std::string::npos) << error;
}

// A balanced 16-layer model on 4 stages with 4 micro-batches: 1f1b idles 3 of every 7 slots,
// interleaved-1f1b with V chunks 3 of every 4·V + 3; memory is ample, so interleaved wins.
TEST(SearchTest, InterleavedWinsWhenTheBubbleIsLargeAndMemoryAmple) {
  const Profile profile = testing::make_profile(testing::equal_layers(16, 1.0, 2.0));
  SearchOptions options;
  options.pp = 4;
  options.micro_batch_size = 1;
  options.top_k = 20;
  const SearchResult result = search(context_for(profile, 4, int64_t{1} << 30, 4), options);
  ASSERT_FALSE(result.plans.empty());
  const Plan& best = result.plans.front();
  EXPECT_EQ(best.schedule, Schedule::kInterleaved1F1B);
  EXPECT_EQ(best.virtual_stages, 4);  // 16 one-layer chunks: the smallest bubble
  EXPECT_EQ(best.stages.size(), 16u);
  EXPECT_NO_THROW(best.validate("plan.json"));
  const Plan* best_1f1b = nullptr;
  for (const Plan& plan : result.plans)
    if (plan.schedule == Schedule::kOneFOneB && !best_1f1b) best_1f1b = &plan;
  ASSERT_NE(best_1f1b, nullptr);
  // Free transfers, equal chunks: the bubble is (pp − 1) / (V·m + pp − 1) against 3/7.
  EXPECT_NEAR(best.predictions.bubble_fraction, 3.0 / 19.0, 1e-6);
  EXPECT_NEAR(best_1f1b->predictions.bubble_fraction, 3.0 / 7.0, 1e-6);
  EXPECT_LT(best.predictions.iteration_ms, best_1f1b->predictions.iteration_ms);
}

// With 8 micro-batches on 4 stages, interleaved-1f1b's stage 0 holds w + 1 chunk micro-batches:
// 11 of two layers (V = 2), 15 of 4/3 (V = 3) or 19 of one (V = 4), where 1f1b's holds 4 of four
// layers, 16: at 1f1b's own peak, interleaved does not fit and is reported.
TEST(SearchTest, InterleavedIsRefusedWhenItsActivationsDoNotFit) {
  std::vector<testing::LayerSpec> layers = testing::equal_layers(16, 1.0, 2.0);
  for (testing::LayerSpec& layer : layers) {
    layer.retained_bytes = 1 << 20;
    layer.param_count = 1000;
  }
  const Profile profile = testing::make_profile(layers);
  SearchOptions options;
  options.pp = 4;
  options.micro_batch_size = 1;
  options.policies = {CheckpointPolicy::kNone};
  options.top_k = 20;
  options.schedules = {Schedule::kOneFOneB};
  const SearchResult one_f_one_b = search(context_for(profile, 4, int64_t{1} << 30, 8), options);
  ASSERT_EQ(one_f_one_b.plans.size(), 1u);
  const int64_t peak = one_f_one_b.plans.front().predictions.stages[0].peak_memory_bytes;
  options.schedules = SearchOptions{}.schedules;
  const SearchResult tight = search(context_for(profile, 4, peak, 8), options);
  ASSERT_FALSE(tight.plans.empty());
  EXPECT_EQ(tight.plans.front().schedule, Schedule::kOneFOneB);
  for (const Plan& plan : tight.plans) EXPECT_NE(plan.schedule, Schedule::kInterleaved1F1B);
  // Asked for alone, the family is infeasible with the stage that needs most.
  options.schedules = {Schedule::kInterleaved1F1B};
  const SearchResult alone = search(context_for(profile, 4, peak, 8), options);
  EXPECT_TRUE(alone.plans.empty());
  ASSERT_EQ(alone.infeasible.size(), 1u);
  EXPECT_NE(alone.infeasible[0].find("dp=1 pp=4 b=1: stage 0 needs"), std::string::npos)
      << alone.infeasible[0];
  EXPECT_NE(alone.infeasible[0].find("interleaved-1f1b"), std::string::npos) << alone.infeasible[0];
  // With more memory the same search finds it.
  EXPECT_FALSE(search(context_for(profile, 4, 2 * peak, 8), options).plans.empty());
}

TEST(SearchTest, InterleavedNeedsAPipelineAndMicroBatchesInMultiplesOfPp) {
  const Profile profile = testing::make_profile(testing::equal_layers(16, 1.0, 2.0));
  SearchOptions options;
  options.schedules = {Schedule::kInterleaved1F1B};
  options.pp = 4;
  options.micro_batch_size = 1;
  std::string error = error_of([&] { search(context_for(profile, 4, int64_t{1} << 30, 6), options); });
  EXPECT_NE(error.find("--schedule interleaved-1f1b: pp=4 with 6 micro-batches: expected a "
                       "multiple of pp"),
            std::string::npos)
      << error;
  options.pp = 1;
  error = error_of([&] { search(context_for(profile, 1, int64_t{1} << 30, 8), options); });
  EXPECT_NE(error.find("expected pp >= 2"), std::string::npos) << error;
  options.pp = 4;
  options.virtual_stages = {8};  // 32 chunks of a 16-layer model
  error = error_of([&] { search(context_for(profile, 4, int64_t{1} << 30, 8), options); });
  EXPECT_NE(error.find("32 chunks for a model of 16 layers"), std::string::npos) << error;
  options.virtual_stages = {9};
  error = error_of([&] { search(context_for(profile, 4, int64_t{1} << 30, 8), options); });
  EXPECT_NE(error.find("--virtual-stages: 9: expected an integer in [2, 8]"), std::string::npos)
      << error;
  // An explicit split gives the pp·V chunks.
  options.virtual_stages = {2};
  options.pp.reset();
  options.partition = parse_partition("0:2,2:4,4:6,6:8,8:10,10:12,12:14,14:16", 16, "--partition");
  const SearchResult chunks = search(context_for(profile, 4, int64_t{1} << 30, 8), options);
  ASSERT_FALSE(chunks.plans.empty());
  EXPECT_EQ(chunks.plans.front().pp, 4);
  EXPECT_EQ(chunks.plans.front().stages[5].first, 10);
  options.virtual_stages = {3};
  error = error_of([&] { search(context_for(profile, 4, int64_t{1} << 30, 8), options); });
  EXPECT_NE(error.find("--partition: 8 ranges for --virtual-stages 3"), std::string::npos) << error;
}

// ZeRO-1 is a search dimension: a model whose replicated optimizer state does not fit on two
// devices is planned with it (each replica keeps half), and --zero 1 needs replicas. Two layers:
// 16 MB of weights and gradients, 16 MB of moments (8 MB sharded), an 8 MB gradient bucket.
TEST(SearchTest, ZeroOneIsChosenWhenOnlyShardedOptimizerStateFits) {
  std::vector<testing::LayerSpec> layers = testing::equal_layers(2, 1, 1);
  for (testing::LayerSpec& layer : layers) {
    layer.param_count = 1'000'000;  // per layer: weights + gradients 8 MB, AdamW moments 8 MB
    layer.adamw_step_ms = 1;
  }
  const Profile profile = testing::make_profile(layers, {1, 2}, 8, 0, 0.01, 1e9);
  PlanningContext context = context_for(profile, 2, 36'000'000, 4);
  context.optimizer = OptimizerKind::kAdamw;
  SearchOptions options;
  options.pp = 1;
  const SearchResult result = search(context, options);
  ASSERT_FALSE(result.plans.empty()) << ::testing::PrintToString(result.infeasible);
  const Plan& best = result.plans.front();
  EXPECT_EQ(best.dp, 2);
  EXPECT_EQ(best.data_parallel.zero, 1);
  EXPECT_EQ(best.predictions.stages[0].memory.optimizer_state_bytes, 8'000'000);
  options.zero = {0};
  const SearchResult replicated = search(context, options);
  EXPECT_TRUE(replicated.plans.empty());
  ASSERT_FALSE(replicated.infeasible.empty());
  EXPECT_NE(replicated.infeasible[0].find("needs"), std::string::npos) << replicated.infeasible[0];

  options.zero = {1};
  options.dp = 1;
  EXPECT_EQ(error_of([&] { search(context, options); }),
            "--zero 1 with --dp 1: expected --dp of at least 2 (ZeRO-1 shards the optimizer state "
            "over a stage's replicas)");
  options.dp.reset();
  options.pp = 2;
  EXPECT_EQ(error_of([&] { search(context, options); }),
            "--zero 1: every candidate on 2 devices has dp = 1: expected room for at least 2 "
            "replicas of a stage (lower --pp or plan more --devices)");
}

}  // namespace
}  // namespace pipeplan
