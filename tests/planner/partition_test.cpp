// Tests for planner/partition.h: the exact partitioner equals brute force (every boundary
// set) on hundreds of random small profiles, including memory-bound and infeasible ones, and
// a plain O(pp·L²) DP on larger ones.
#include "planner/partition.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

constexpr int64_t kUnlimitedBytes = std::numeric_limits<int64_t>::max() / 4;

// Every boundary set of `layers` into `pp` non-empty stages.
void for_each_split(int layers, int pp, const std::function<void(const std::vector<int>&)>& fn) {
  std::vector<int> boundaries{0};
  std::function<void(int)> extend = [&](int stage_idx) {
    if (stage_idx == pp - 1) {
      boundaries.push_back(layers);
      fn(boundaries);
      boundaries.pop_back();
      return;
    }
    for (int pos = boundaries.back() + 1; pos <= layers - (pp - stage_idx - 1); ++pos) {
      boundaries.push_back(pos);
      extend(stage_idx + 1);
      boundaries.pop_back();
    }
  };
  extend(0);
}

struct BruteForce {
  bool feasible = false;
  PartitionObjective best;
  int64_t least_peak = std::numeric_limits<int64_t>::max();  // over all splits, fitting or not
};

BruteForce brute_force(const StageEvaluator& evaluator) {
  BruteForce out;
  for_each_split(evaluator.num_layers(), evaluator.pp(), [&](const std::vector<int>& split) {
    const PartitionResult result = evaluate_boundaries(evaluator, split);
    out.least_peak = std::min(out.least_peak, result.peak_memory_bytes);
    if (!result.feasible) return;
    if (!out.feasible || objective(result) < out.best) out.best = objective(result);
    out.feasible = true;
  });
  return out;
}

struct RandomCase {
  Profile profile;
  PartitionProblem problem;
  int64_t micro_batch_size = 1;
};

RandomCase random_case(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> layers_dist(1, 10);
  const int layers = layers_dist(rng);
  std::uniform_real_distribution<double> bandwidth(2e5, 5e6);
  const bool measured = rng() % 3 != 0;
  RandomCase c;
  c.profile = testing::make_profile(testing::random_layers(rng, layers), {1, 2, 4, 8},
                                    /*input_floats=*/static_cast<int64_t>(rng() % 300 + 1),
                                    /*runtime_overhead_bytes=*/1000,
                                    /*p2p_latency_ms=*/measured ? 0.05 : 0,
                                    /*p2p_bandwidth_bytes_per_s=*/measured ? bandwidth(rng) : 0);
  c.micro_batch_size = static_cast<int64_t>(rng() % 6 + 1);
  PartitionProblem& p = c.problem;
  p.pp = static_cast<int>(rng() % std::min(layers, 4)) + 1;
  p.policy = static_cast<CheckpointPolicy>(rng() % 3);
  p.memory.schedule = rng() % 2 ? Schedule::kGpipe : Schedule::kOneFOneB;
  p.memory.pp = p.pp;
  p.memory.dp = static_cast<int>(rng() % 3) + 1;
  p.memory.num_micro_batches = static_cast<int>(rng() % 6) + 1;
  p.memory.optimizer = rng() % 2 ? OptimizerKind::kSgd : OptimizerKind::kAdamw;
  p.memory.runtime_overhead_bytes = 1000;
  p.links = {0.05, measured ? bandwidth(rng) : 0, bandwidth(rng) / 10};
  for (int boundary = 0; boundary + 1 < p.pp; ++boundary)
    p.inter_node_boundaries.push_back(rng() % 2 == 0);
  return c;
}

TEST(PartitionTest, MatchesBruteForceOnRandomProfiles) {
  std::mt19937_64 rng(20261122);
  int memory_bound = 0, infeasible = 0, unconstrained = 0, proofs = 0;
  for (int case_idx = 0; case_idx < 600; ++case_idx) {
    RandomCase c = random_case(rng);
    const LayerTable table(c.profile, c.micro_batch_size, c.problem.memory.optimizer);
    // First without a memory limit, to place the limit where it matters.
    c.problem.device_memory_bytes = kUnlimitedBytes;
    const BruteForce free = brute_force(StageEvaluator(table, c.problem));
    ASSERT_TRUE(free.feasible);
    const int kind = case_idx % 3;  // 0: unconstrained, 1: memory-bound, 2: infeasible
    if (kind == 1 && free.least_peak < free.best.peak_memory_bytes) {
      std::uniform_int_distribution<int64_t> limit(free.least_peak,
                                                   free.best.peak_memory_bytes - 1);
      c.problem.device_memory_bytes = limit(rng);
    } else if (kind == 2) {
      // Just below what the least-memory split needs, or far below (a quick proof applies).
      c.problem.device_memory_bytes = case_idx % 2
                                          ? free.least_peak - 1 - static_cast<int64_t>(rng() % 100)
                                          : free.least_peak / 3;
    }
    const StageEvaluator evaluator(table, c.problem);
    const BruteForce expected = brute_force(evaluator);
    const PartitionResult result = optimal_partition(evaluator);
    ASSERT_EQ(result.feasible, expected.feasible) << "case " << case_idx;
    if (!expected.feasible) {
      ++infeasible;
      EXPECT_GT(result.needed_bytes, c.problem.device_memory_bytes) << "case " << case_idx;
      if (result.reason.find("at least") == std::string::npos) {
        EXPECT_EQ(result.needed_bytes, expected.least_peak) << "case " << case_idx;
      } else {
        ++proofs;
        // A layer that fits nowhere bounds every split's peak from below.
        if (result.reason.rfind("layer ", 0) == 0) {
          EXPECT_LE(result.needed_bytes, expected.least_peak) << "case " << case_idx;
        }
      }
      EXPECT_NE(result.reason.find(" > "), std::string::npos) << result.reason;
      continue;
    }
    const PartitionObjective got = objective(result);
    EXPECT_EQ(got.bottleneck_ns, expected.best.bottleneck_ns) << "case " << case_idx;
    EXPECT_EQ(got.total_ns, expected.best.total_ns) << "case " << case_idx;
    EXPECT_EQ(got.peak_memory_bytes, expected.best.peak_memory_bytes) << "case " << case_idx;
    if (c.problem.device_memory_bytes == kUnlimitedBytes)
      ++unconstrained;
    else if (expected.best.bottleneck_ns > free.best.bottleneck_ns || !(expected.best == free.best))
      ++memory_bound;
  }
  // Each kind of case occurred often enough to mean something.
  EXPECT_GT(unconstrained, 100);
  EXPECT_GT(memory_bound, 60);
  EXPECT_GT(infeasible, 150);
  EXPECT_GT(proofs, 20);
  EXPECT_LT(proofs, infeasible);
}

// A plain DP over every (start, end) pair: the reference for sizes brute force cannot reach.
PartitionObjective plain_dp(const StageEvaluator& ev) {
  const int layers = ev.num_layers();
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> bottleneck(ev.pp() + 1, std::vector<int64_t>(layers + 1, inf));
  bottleneck[0][0] = 0;
  for (int s = 0; s < ev.pp(); ++s)
    for (int j = 1; j <= layers; ++j)
      for (int i = 0; i < j; ++i) {
        if (bottleneck[s][i] == inf) continue;
        const StageChoice c = ev.evaluate(s, i, j);
        if (c.fits)
          bottleneck[s + 1][j] =
              std::min(bottleneck[s + 1][j], std::max(bottleneck[s][i], c.cost_ns));
      }
  const int64_t best = bottleneck[ev.pp()][layers];
  using Value = std::pair<int64_t, int64_t>;
  std::vector<std::vector<Value>> value(ev.pp() + 1, std::vector<Value>(layers + 1, {inf, inf}));
  value[0][0] = {0, 0};
  for (int s = 0; s < ev.pp(); ++s)
    for (int j = 1; j <= layers; ++j)
      for (int i = 0; i < j; ++i) {
        if (value[s][i].first == inf) continue;
        const StageChoice c = ev.evaluate(s, i, j);
        if (!c.fits || c.cost_ns > best) continue;
        value[s + 1][j] = std::min(
            value[s + 1][j],
            Value{value[s][i].first + c.cost_ns, std::max(value[s][i].second, c.memory_bytes)});
      }
  return {best, value[ev.pp()][layers].first, value[ev.pp()][layers].second};
}

TEST(PartitionTest, MatchesAPlainDynamicProgramOnLargerProfiles) {
  std::mt19937_64 rng(7);
  for (int case_idx = 0; case_idx < 40; ++case_idx) {
    const int layers = 20 + static_cast<int>(rng() % 41);
    const Profile profile =
        testing::make_profile(testing::random_layers(rng, layers), {1, 4}, 16, 0, 0.01, 1e6);
    PartitionProblem problem;
    problem.pp = 1 + static_cast<int>(rng() % 9);
    problem.policy = static_cast<CheckpointPolicy>(rng() % 3);
    problem.memory.pp = problem.pp;
    problem.memory.num_micro_batches = 8;
    problem.links = {0.01, 1e6, 1e5};
    problem.inter_node_boundaries = std::vector<bool>(problem.pp - 1, false);
    if (problem.pp > 2) problem.inter_node_boundaries[problem.pp / 2] = true;
    problem.device_memory_bytes = kUnlimitedBytes;
    const LayerTable table(profile, 2, OptimizerKind::kSgd);
    const StageEvaluator unlimited(table, problem);
    const PartitionResult free = optimal_partition(unlimited);
    ASSERT_TRUE(free.feasible);
    EXPECT_EQ(objective(free), plain_dp(unlimited)) << "case " << case_idx;
    problem.device_memory_bytes = free.peak_memory_bytes * 9 / 10;  // usually binding
    const StageEvaluator limited(table, problem);
    const PartitionResult bound = optimal_partition(limited);
    const PartitionObjective reference = plain_dp(limited);
    ASSERT_EQ(bound.feasible, reference.bottleneck_ns != std::numeric_limits<int64_t>::max());
    if (bound.feasible) {
      EXPECT_EQ(objective(bound), reference) << "case " << case_idx;
    }
  }
}

TEST(PartitionTest, EqualLayersSplitEvenlyAndTiesGoToLowerPeakMemory) {
  // Six equal layers in 3 stages: 2 + 2 + 2 is the only split with the smallest bottleneck.
  const Profile even = testing::make_profile(testing::equal_layers(6, 1, 2));
  PartitionProblem problem;
  problem.pp = 3;
  problem.memory.pp = 3;
  problem.inter_node_boundaries = {false, false};
  problem.device_memory_bytes = kUnlimitedBytes;
  const LayerTable table(even, 1, OptimizerKind::kSgd);
  EXPECT_EQ(optimal_partition(StageEvaluator(table, problem)).boundaries,
            (std::vector<int>{0, 2, 4, 6}));
  // Four equal layers in 3 stages: 2+1+1, 1+2+1 and 1+1+2 tie in bottleneck and sum (free
  // communication); with these parameter counts only 1+1+2 has the lowest peak (layer 0).
  std::vector<testing::LayerSpec> layers = testing::equal_layers(4, 1, 1);
  layers[0].param_count = 5000;
  layers[1].param_count = 3000;
  layers[2].param_count = 2500;
  const Profile weighted = testing::make_profile(layers);
  const LayerTable weighted_table(weighted, 1, OptimizerKind::kSgd);
  const PartitionResult result = optimal_partition(StageEvaluator(weighted_table, problem));
  EXPECT_EQ(result.boundaries, (std::vector<int>{0, 1, 2, 4}));  // layer 0 alone
}

TEST(PartitionTest, InfeasibleIsAValueWithTheStageThatDoesNotFit) {
  const Profile profile = testing::three_layer_profile();
  const LayerTable table(profile, 2, OptimizerKind::kSgd);
  PartitionProblem problem;
  problem.pp = 1;
  problem.memory.pp = 1;
  problem.memory.runtime_overhead_bytes = 1000;
  problem.device_memory_bytes = 1000;
  const PartitionResult result = optimal_partition(StageEvaluator(table, problem));
  EXPECT_FALSE(result.feasible);
  EXPECT_EQ(result.reason.rfind("stage 0 needs ", 0), 0u) << result.reason;
  EXPECT_NE(result.reason.find(" > 1000 B"), std::string::npos) << result.reason;
  problem.pp = 3;
  problem.memory.pp = 3;
  problem.inter_node_boundaries = {false, false};
  // Layer 0 alone exceeds the device: a quick proof, no search.
  const PartitionResult proof = optimal_partition(StageEvaluator(table, problem));
  EXPECT_FALSE(proof.feasible);
  EXPECT_EQ(proof.reason, "layer 0 alone needs at least 13.2 KiB > 1000 B");  // 13556 bytes
  // Every layer fits alone, yet no split into 2 stages does: stage 1 must hold layers 1..2.
  problem.pp = 2;
  problem.memory.pp = 2;
  problem.inter_node_boundaries = {false};
  problem.device_memory_bytes = 20'000;
  const PartitionResult split = optimal_partition(StageEvaluator(table, problem));
  EXPECT_FALSE(split.feasible);
  EXPECT_EQ(split.reason,
            "stage 0 can hold at most layers 0..0 within 19.5 KiB each, leaving layers 1..2 to "
            "stage 1: at least 31.1 KiB > 19.5 KiB");  // 30000 + 4 + 512 + 180 + 192 + 1000 bytes
}

}  // namespace
}  // namespace pipeplan
