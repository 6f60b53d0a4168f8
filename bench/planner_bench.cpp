// Planner benchmarks: the full search, the exact partitioner and the simulator on synthetic
// GPT-like profiles (bench/RESULTS.md has the figures and the command that produced them).
#include <benchmark/benchmark.h>

#include <map>
#include <utility>

#include "bench/synthetic_profile.h"
#include "common/limits.h"
#include "common/units.h"
#include "planner/partition.h"
#include "planner/search.h"
#include "planner/simulator.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan::bench {
namespace {

constexpr int64_t kDeviceMemoryBytes = 80 * kGiB;
constexpr int kDevicesPerNode = 8;
constexpr double kInterNodeBytesPerS = 25e9;

// One profile per (layer count, width), built once (profile construction is not measured).
const Profile& profile_of(int layers, int64_t hidden) {
  static std::map<std::pair<int, int64_t>, Profile> profiles;
  auto it = profiles.find({layers, hidden});
  if (it == profiles.end()) {
    SyntheticModel model;
    model.num_layers = layers;
    model.hidden = hidden;
    it = profiles.emplace(std::make_pair(layers, hidden), synthetic_profile(model)).first;
  }
  return it->second;
}

PlanningContext context_for(const Profile& profile, int devices, int64_t global_batch) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "synthetic.json";
  context.cluster = make_cluster(profile, devices, kDeviceMemoryBytes,
                                 std::min(devices, kDevicesPerNode), kInterNodeBytesPerS);
  context.global_batch = global_batch;
  context.optimizer = OptimizerKind::kAdamw;
  context.precision = Precision::kAmpBf16;
  return context;
}

// Args: layers, devices, global batch, hidden.
void BM_PlanSearch(benchmark::State& state) {
  const Profile& profile = profile_of(static_cast<int>(state.range(0)), state.range(3));
  const PlanningContext context =
      context_for(profile, static_cast<int>(state.range(1)), state.range(2));
  SearchResult result;
  for (auto _ : state) {
    result = search(context, SearchOptions{});
    benchmark::DoNotOptimize(result);
  }
  state.counters["candidates"] = result.candidates;
  state.counters["evaluated"] = result.evaluated;
  state.counters["simulated"] = result.simulated;
  state.counters["best_samples_per_s"] =
      result.plans.empty() ? 0 : result.plans.front().predictions.samples_per_s;
  state.counters["best_pp"] = result.plans.empty() ? 0 : result.plans.front().pp;
}
BENCHMARK(BM_PlanSearch)
    ->ArgNames({"layers", "devices", "global_batch", "hidden"})
    ->Args({1000, 1024, 4096, 2048})
    ->Args({150, 64, 512, 1024})
    ->Args({10000, 16384, 65536, 4096})
    ->MeasureProcessCPUTime()  // the final plans are predicted on threads of their own
    ->Unit(benchmark::kMillisecond);

// The largest sizes `plan` accepts, on the eight random layers of the search tests (issue 18:
// a global batch of 2^40 once listed its divisors one by one). Args: devices, global batch.
// SearchTest.LargestAcceptedSizesEndWithAnAnswer checks the answers; this times them.
// A cluster of `devices` with 1 TiB each, 8 to a node, for the largest-size benchmarks.
PlanningContext terabyte_context(const Profile& profile, int devices, int64_t global_batch) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.cluster = make_cluster(profile, devices, int64_t{1} << 40, std::min(devices, 8),
                                 kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = global_batch;
  return context;
}

void BM_LargestAcceptedSizes(benchmark::State& state) {
  const Profile profile = testing::eight_layer_profile(6);
  const PlanningContext context =
      terabyte_context(profile, static_cast<int>(state.range(0)), state.range(1));
  SearchResult result;
  for (auto _ : state) {
    result = search(context, SearchOptions{});
    benchmark::DoNotOptimize(result);
  }
  state.counters["plans"] = static_cast<double>(result.plans.size());
}
BENCHMARK(BM_LargestAcceptedSizes)
    ->ArgNames({"devices", "global_batch"})
    ->Args({kMaxDevices, kMaxBatchSize})
    ->Args({1, kMaxBatchSize})
    ->Args({48, int64_t{15} << 20})
    ->Unit(benchmark::kMillisecond);

// The largest pipeline a plan may hold: kMaxPipelineMicroBatches micro-batches times stages at
// micro-batch size 1, 1F1B, with varying action times (the draws), searched, partitioned and
// predicted. SearchTest.LargestAcceptedPipelineIsSearchedAndPredicted checks the plan. Args: pp, dp.
void BM_LargestAcceptedPipeline(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0));
  const int dp = static_cast<int>(state.range(1));
  const testing::LargestPipeline pipeline = testing::largest_pipeline(pp, dp);
  const PlanningContext context =
      terabyte_context(pipeline.profile, pp * dp, pipeline.global_batch);
  SearchResult result;
  for (auto _ : state) {
    result = search(context, pipeline.options);
    benchmark::DoNotOptimize(result);
  }
  state.counters["plans"] = static_cast<double>(result.plans.size());
}
BENCHMARK(BM_LargestAcceptedPipeline)
    ->ArgNames({"pp", "dp"})
    ->Args({64, 1})
    ->Args({512, 2})
    ->Unit(benchmark::kMillisecond);

// Args: layers, pp. One exact partition of a 1000-layer profile at b = 2, 64 micro-batches,
// 1f1b, checkpointing where needed (pp = 8 is infeasible: the proof from the memory bound).
void BM_OptimalPartition(benchmark::State& state) {
  const Profile& profile = profile_of(static_cast<int>(state.range(0)), 2048);
  const int pp = static_cast<int>(state.range(1));
  const LayerTable table(profile, 2, OptimizerKind::kAdamw);
  PartitionProblem problem;
  problem.pp = pp;
  problem.policy = CheckpointPolicy::kNeeded;
  problem.device_memory_bytes = kDeviceMemoryBytes;
  problem.memory.pp = pp;
  problem.memory.num_micro_batches = 64;
  problem.memory.optimizer = OptimizerKind::kAdamw;
  problem.memory.precision = Precision::kAmpBf16;
  problem.links = {0.02, 100e9, kInterNodeBytesPerS};
  problem.inter_node_boundaries.assign(pp - 1, false);
  const StageEvaluator evaluator(table, problem);
  PartitionResult result;
  for (auto _ : state) {
    result = optimal_partition(evaluator);
    benchmark::DoNotOptimize(result);
  }
  state.counters["feasible"] = result.feasible;
}
BENCHMARK(BM_OptimalPartition)
    ->ArgNames({"layers", "pp"})
    ->Args({1000, 8})
    ->Args({1000, 16})
    ->Args({1000, 64})
    ->Args({1000, 512})
    ->Unit(benchmark::kMillisecond);

// Args: pp, micro-batches. One simulated iteration of equal stages with communication.
void BM_Simulate(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0));
  SimulationInput input;
  input.schedule = Schedule::kOneFOneB;
  input.pp = pp;
  input.num_micro_batches = static_cast<int>(state.range(1));
  input.stages.assign(pp, StageCosts{1.0, 2.0, 0, 0.5, 0.25});
  input.activation_ms = {std::vector<double>(pp - 1, 0.1)};
  input.gradient_ms = input.activation_ms;
  input.ranks = {std::vector<int>(pp)};
  for (int stage = 0; stage < pp; ++stage) input.ranks[0][stage] = stage;
  for (auto _ : state)
    benchmark::DoNotOptimize(
        simulate(input, {/*record_timeline=*/false, /*merge_identical_replicas=*/true})
            .iteration_ms);
  // Forward, backward and their sends and receives of every micro-batch on every stage.
  state.counters["actions_per_s"] =
      benchmark::Counter(static_cast<double>(pp) * input.num_micro_batches * 6,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Simulate)
    ->ArgNames({"pp", "micro_batches"})
    ->Args({128, 512})
    ->Args({8, 64})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pipeplan::bench

BENCHMARK_MAIN();
