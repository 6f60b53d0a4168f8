// Tests for planner/tensor_parallel.h: the all-reduce model, the group's view of a profile, the
// sizes searched, and the search over tp with its plans widened to every rank.
#include "planner/tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/limits.h"
#include "tests/common/error_of.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

using testing::error_of;

constexpr double kAllReduceLatencyMs = 0.1;
constexpr double kAllReduceBandwidthBytesPerS = 1e9;

// `profile` with shards of `split` layers at tp 2 and 4, taking `shard_time_share` of the whole
// layer's time per tp halving, half its parameters and 0.6 of its retained bytes (at least its
// saved input and output); an all-reduce
// fit of 0.1 ms and 1 GB/s.
Profile with_shards(Profile profile, const std::vector<int>& split, double shard_time_share) {
  profile.interconnect->allreduce.latency_ms = kAllReduceLatencyMs;
  profile.interconnect->allreduce.bandwidth_bytes_per_s = kAllReduceBandwidthBytesPerS;
  profile.settings.tp_sizes = {2, 4};
  for (int layer_idx : split) {
    LayerProfile& whole = profile.layers[layer_idx];
    whole.tp_divides = {{"heads", 4}, {"mlp_dim", 16}};
    for (int tp : {2, 4}) {
      LayerProfile shard = whole;
      shard.tp = tp;
      shard.tp_shards.clear();
      const double share = tp == 2 ? shard_time_share : shard_time_share * shard_time_share;
      for (LayerPoint& point : shard.points) {
        point.fwd_ms = point.fwd_ms_p90 = point.fwd_ms * share;
        point.bwd_ms = point.bwd_ms_p90 = point.bwd_ms * share;
        point.retained_bytes = std::max(point.retained_bytes * 6 / 10,
                                        point.saved_input_bytes + point.saved_output_bytes);
      }
      shard.param_count = whole.param_count / tp;
      shard.param_bytes = shard.param_count * 4;
      shard.optimizer_step_ms = {{"sgd", 0.01 / tp}, {"adamw", 0.0}};
      shard.fits = fit_points(shard.points);
      whole.tp_shards.push_back(shard);
    }
  }
  profile.validate("split profile");
  return profile;
}

// Four layers: two "blocks" (1 and 2) that split (with_shards).
Profile split_profile(double shard_time_share) {
  std::vector<testing::LayerSpec> layers(4);
  for (testing::LayerSpec& layer : layers) {
    layer.fwd_ms = 1;
    layer.bwd_ms = 2;
    layer.param_count = 1000;
    layer.output_floats = 256;
    layer.retained_bytes = 4096;
    layer.sgd_step_ms = 0.01;
  }
  layers[1].fwd_ms = layers[2].fwd_ms = 10;
  layers[1].bwd_ms = layers[2].bwd_ms = 20;
  layers[1].param_count = layers[2].param_count = 100000;
  return with_shards(testing::make_profile(layers, {1, 2, 4}, /*input_floats=*/256,
                                           /*runtime_overhead_bytes=*/0, /*p2p_latency_ms=*/0.01,
                                           /*p2p_bandwidth_bytes_per_s=*/1e10),
                     {1, 2}, shard_time_share);
}

PlanningContext context_for(const Profile& profile, int devices, int devices_per_node) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.profile_hash = "fnv1a64:0000000000000002";
  context.cluster = make_cluster(profile, devices, int64_t{1} << 30, devices_per_node,
                                 kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = 16;
  context.notes = planning_notes(profile, context.cluster, false);
  return context;
}

TEST(TensorParallelTest, AllReduceIsTheTwoRankFitAtTwoAndARingAbove) {
  const Profile profile = split_profile(0.5);
  const int64_t bytes = 1000000;  // 1 ms at 1 GB/s
  EXPECT_DOUBLE_EQ(tensor_parallel_all_reduce_ms(profile, 1, bytes), 0);
  EXPECT_DOUBLE_EQ(tensor_parallel_all_reduce_ms(profile, 2, bytes), 0.1 + 1.0);
  EXPECT_DOUBLE_EQ(tensor_parallel_all_reduce_ms(profile, 4, bytes), 3 * 0.1 + 1.5 * 1.0);
  EXPECT_DOUBLE_EQ(tensor_parallel_all_reduce_ms(profile, 8, bytes), 7 * 0.1 + 1.75 * 1.0);
  Profile no_comm = profile;
  no_comm.interconnect.reset();
  EXPECT_DOUBLE_EQ(tensor_parallel_all_reduce_ms(no_comm, 2, bytes), 0);
  // A group's all-reduce timed over 4 ranks replaces the ring at 4 only, and the note says so.
  Profile timed = profile;
  timed.interconnect->group_allreduce = {{4, {}}};
  timed.interconnect->group_allreduce[0].allreduce.latency_ms = 2.0;
  timed.interconnect->group_allreduce[0].allreduce.bandwidth_bytes_per_s = 0.5e9;
  EXPECT_DOUBLE_EQ(tensor_parallel_all_reduce_ms(timed, 4, bytes), 2.0 + 2.0);
  EXPECT_DOUBLE_EQ(tensor_parallel_all_reduce_ms(timed, 8, bytes), 7 * 0.1 + 1.75 * 1.0);
  EXPECT_NE(tensor_parallel_note(timed, 4).find("from the 4-rank all-reduce fit (measured)"),
            std::string::npos);
  EXPECT_NE(tensor_parallel_note(timed, 8).find("modelled, not measured: the 2-rank"),
            std::string::npos);
}

TEST(TensorParallelTest, TheGroupsViewHasTheShardsPlusTheirAllReduces) {
  Profile profile = split_profile(0.5);
  profile.layers[2].tp_all_reduces = 1;  // one column–row pair (a TorchScript layer's MLP)
  const Profile view = tensor_parallel_profile(profile, 2);
  EXPECT_NO_THROW(view.validate("view"));
  EXPECT_TRUE(view.settings.tp_sizes.empty());
  for (size_t layer_idx = 0; layer_idx < view.layers.size(); ++layer_idx) {
    const LayerProfile& seen = view.layers[layer_idx];
    const LayerProfile& whole = profile.layers[layer_idx];
    EXPECT_TRUE(seen.tp_shards.empty());
    EXPECT_EQ(seen.tp, 1);
    const bool splits = layer_idx == 1 || layer_idx == 2;
    EXPECT_EQ(seen.param_count, splits ? whole.param_count / 2 : whole.param_count);
    for (size_t point_idx = 0; point_idx < seen.points.size(); ++point_idx) {
      const LayerPoint& point = seen.points[point_idx];
      const LayerPoint& measured = whole.points[point_idx];
      const double all_reduce_ms =
          splits ? tensor_parallel_all_reduce_ms(profile, 2, measured.output_bytes) : 0;
      const double share = splits ? 0.5 : 1.0;
      const int all_reduces = layer_idx == 2 ? 1 : 2;
      EXPECT_DOUBLE_EQ(point.fwd_ms, measured.fwd_ms * share + all_reduces * all_reduce_ms);
      EXPECT_DOUBLE_EQ(point.bwd_ms, measured.bwd_ms * share + all_reduces * all_reduce_ms);
      EXPECT_EQ(point.retained_bytes,
                splits ? measured.retained_bytes * 6 / 10 : measured.retained_bytes);
    }
  }
  EXPECT_EQ(tensor_parallel_profile(profile, 1).layers[1].param_count,
            profile.layers[1].param_count);
  // Every field outside the layers is the profile's (the view is built field by field).
  Profile tied = profile;
  tied.ties.push_back({{0, 3}, 1000});
  Json seen = to_json(tensor_parallel_profile(tied, 2));
  Json expected = to_json(tied);
  seen.erase("layers");
  expected.erase("layers");
  expected["settings"].erase("tp_sizes");
  EXPECT_EQ(seen, expected);
  EXPECT_NE(tensor_parallel_note(profile, 4).find("2 of 4 layers split"), std::string::npos);
  EXPECT_NE(tensor_parallel_note(profile, 4).find("modelled, not measured"), std::string::npos);
  EXPECT_NE(tensor_parallel_note(profile, 2).find("(measured)"), std::string::npos);
}

TEST(TensorParallelTest, SizesAreTheProfilesThatFitANode) {
  const Profile profile = split_profile(0.5);
  EXPECT_EQ(tensor_parallel_sizes(profile, 8, 8, std::nullopt), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(tensor_parallel_sizes(profile, 8, 2, std::nullopt), (std::vector<int>{1, 2}));
  EXPECT_EQ(tensor_parallel_sizes(profile, 6, 6, std::nullopt), (std::vector<int>{1, 2}));
  EXPECT_EQ(tensor_parallel_sizes(profile, 8, 8, 4), (std::vector<int>{4}));
  EXPECT_EQ(error_of([&] { tensor_parallel_sizes(profile, 8, 8, 3); }),
            "--tp: 3: does not divide heads = 4 of layer 'layer1'; expected a divisor of 4 (the "
            "layer splits by its heads)");
  EXPECT_EQ(error_of([&] { tensor_parallel_sizes(profile, 16, 16, 16); }),
            "--tp: 16: does not divide heads = 4 of layer 'layer1'; expected a divisor of 4 (the "
            "layer splits by its heads)");
  Profile fewer = profile;
  fewer.settings.tp_sizes = {2};
  for (LayerProfile& layer : fewer.layers)
    if (!layer.tp_shards.empty()) layer.tp_shards.pop_back();
  EXPECT_EQ(error_of([&] { tensor_parallel_sizes(fewer, 8, 8, 4); }),
            "--tp: 4: the profile measured no shards at tp=4 (it has 2); profile with "
            "--tp-sizes including 4, for a model whose heads and MLP width it divides");
  EXPECT_EQ(error_of([&] { tensor_parallel_sizes(profile, 8, 2, 4); }),
            "--tp: 4: expected a divisor of --devices (8) and --devices-per-node (2): a "
            "tensor-parallel group lies within one node");
}

// Shards at a quarter of the time per halving: tp wins, and its plans are valid plans of every
// rank, tp innermost. Shards at the whole layer's time: tp only adds all-reduces and loses.
TEST(TensorParallelTest, SearchPicksTheSizeThatPaysAndWidensItsRanks) {
  const Profile fast = split_profile(0.25);
  const PlanningContext context = context_for(fast, 4, 4);
  const SearchResult result = search_tensor_parallel(context, SearchOptions{});
  ASSERT_FALSE(result.plans.empty());
  const Plan& best = result.plans.front();
  EXPECT_EQ(best.tp(), 4);
  EXPECT_EQ(best.cluster.devices, 4);
  EXPECT_EQ(static_cast<int>(best.ranks.size()), 4);
  EXPECT_NO_THROW(best.validate("best"));
  for (const RankAssignment& rank : best.ranks) EXPECT_EQ(rank.tp_rank, rank.rank % 4);
  ASSERT_EQ(result.best_per_tp.size(), 3u);
  EXPECT_EQ(result.best_per_tp[0].tp(), 1);
  EXPECT_EQ(result.best_per_tp[2].tp(), 4);
  EXPECT_GT(best.predictions.samples_per_s, result.best_per_tp[0].predictions.samples_per_s);
  for (size_t idx = 1; idx < result.plans.size(); ++idx)
    EXPECT_GE(result.plans[idx - 1].predictions.samples_per_s,
              result.plans[idx].predictions.samples_per_s);

  const Profile slow = split_profile(1.0);
  const PlanningContext slow_context = context_for(slow, 4, 4);
  const SearchResult slow_result = search_tensor_parallel(slow_context, SearchOptions{});
  ASSERT_FALSE(slow_result.plans.empty());
  EXPECT_EQ(slow_result.plans.front().tp(), 1);
  SearchOptions fixed;
  fixed.tp = 2;
  const SearchResult forced = search_tensor_parallel(slow_context, fixed);
  ASSERT_FALSE(forced.plans.empty());
  EXPECT_EQ(forced.plans.front().tp(), 2);
  EXPECT_TRUE(forced.best_per_tp.empty());
  // Each split layer's four all-reduces (six when recomputed) of its 256-float output per
  // sample, per micro-batch; none predicted at tp 1.
  const Plan& split = forced.plans.front();
  std::vector<double> expected(static_cast<size_t>(split.pp), 0.0);
  for (size_t chunk = 0; chunk < split.stages.size(); ++chunk)
    for (int layer = split.stages[chunk].first; layer < split.stages[chunk].last; ++layer)
      if (layer == 1 || layer == 2)
        expected[chunk % static_cast<size_t>(split.pp)] +=
            (split.stages[chunk].checkpoint ? 6 : 4) * split.num_micro_batches *
            tensor_parallel_all_reduce_ms(slow, 2, 256 * 4 * split.micro_batch_size);
  for (int stage = 0; stage < split.pp; ++stage)
    EXPECT_NEAR(split.predictions.stages[stage].tp_allreduce_ms, expected[stage], 1e-9)
        << plan_configuration(split);
  EXPECT_GT(
      split.predictions.stages[0].tp_allreduce_ms + split.predictions.stages.back().tp_allreduce_ms,
      0);
  EXPECT_EQ(slow_result.best_per_tp[0].predictions.stages[0].tp_allreduce_ms, 0);
  // Half the parameters of the split layers on each rank: less memory than tp = 1's plan of the
  // same split.
  EXPECT_LT(forced.plans.front().predictions.stages[0].memory.parameters_bytes,
            slow_result.best_per_tp[0].predictions.stages[0].memory.parameters_bytes);
}

// Sizes whose every candidate is bounded out of the top K are not searched; the merged top K
// and the best plan of each size searched are the exhaustive search's, and a size not searched
// has no plan better than its bound nor one that enters the top K.
TEST(TensorParallelTest, SizesBoundedOutOfTheTopAreNotSearchedAndTheResultIsExact) {
  int unsearched = 0;
  int outside_top = 0;
  int case_idx = 0;
  std::mt19937_64 rng(42);
  for (bool random : {false, true})
    for (double share : {0.25, 0.6, 1.0})
      for (int devices : {2, 4, 8})
        for (int top_k : {1, 3}) {
          ++case_idx;
          // split_profile, or random layers with every other one split.
          const int layers = 4 + case_idx % 5;
          std::vector<int> split;
          for (int layer = 1; layer < layers; layer += 2) split.push_back(layer);
          const Profile profile =
              random ? with_shards(testing::make_profile(testing::random_layers(rng, layers),
                                                         {1, 2, 4}, 64, 1000, 0.02, 2e6),
                                   split, share)
                     : split_profile(share);
          PlanningContext context = context_for(profile, devices, 4);
          context.global_batch = 8 << (case_idx % 3);
          SearchOptions options;
          options.top_k = top_k;
          const SearchResult fast = search_tensor_parallel(context, options);
          options.prune = false;
          const SearchResult full = search_tensor_parallel(context, options);
          EXPECT_TRUE(full.unsearched_tp.empty());
          ASSERT_EQ(fast.plans.size(), full.plans.size()) << "case " << case_idx;
          for (size_t idx = 0; idx < fast.plans.size(); ++idx)
            EXPECT_EQ(to_json(fast.plans[idx]), to_json(full.plans[idx])) << "case " << case_idx;
          ASSERT_EQ(fast.best_per_tp.size() + fast.unsearched_tp.size(), full.best_per_tp.size())
              << "case " << case_idx;
          for (const Plan& best : full.best_per_tp) {
            const auto searched =
                std::find_if(fast.best_per_tp.begin(), fast.best_per_tp.end(),
                             [&](const Plan& plan) { return plan.tp() == best.tp(); });
            if (searched != fast.best_per_tp.end()) {
              EXPECT_EQ(to_json(*searched), to_json(best)) << "case " << case_idx;
              // Searched, yet its best is outside the top K: found as the size's own best.
              outside_top +=
                  best.predictions.samples_per_s < full.plans.back().predictions.samples_per_s;
              continue;
            }
            ++unsearched;
            const auto bound =
                std::find_if(fast.unsearched_tp.begin(), fast.unsearched_tp.end(),
                             [&](const auto& entry) { return entry.first == best.tp(); });
            ASSERT_NE(bound, fast.unsearched_tp.end()) << "case " << case_idx;
            // The bound's sums in whole nanoseconds against the play's in ms: the search's slack.
            EXPECT_LE(bound->second, best.predictions.iteration_ms * (1 + 1e-9))
                << "case " << case_idx;
            EXPECT_LT(best.predictions.samples_per_s, full.plans.back().predictions.samples_per_s)
                << "case " << case_idx;
          }
        }
  EXPECT_GT(unsearched, 0);
  EXPECT_GT(outside_top, 0);
}

}  // namespace
}  // namespace pipeplan
