// Tests for planner/interleaved_partition.h: the quick proof of infeasibility never refuses a
// device on which some split of the chunks fits, chunk splits follow their method, and every
// stage's memory and cost are its chunks' together.
#include "planner/interleaved_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include "common/units.h"
#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

PartitionProblem problem_for(int pp, int virtual_stages, int num_micro_batches,
                             CheckpointPolicy policy, int64_t device_memory_bytes) {
  PartitionProblem problem;
  problem.pp = pp;
  problem.virtual_stages = virtual_stages;
  problem.policy = policy;
  problem.device_memory_bytes = device_memory_bytes;
  problem.memory.schedule = Schedule::kInterleaved1F1B;
  problem.memory.pp = pp;
  problem.memory.virtual_stages = virtual_stages;
  problem.memory.num_micro_batches = num_micro_batches;
  problem.memory.runtime_overhead_bytes = 500;
  problem.inter_node_boundaries.assign(pp * virtual_stages - 1, false);
  return problem;
}

// Every split of `layers` into `chunks` non-empty contiguous ranges, as boundaries.
void for_each_split(int layers, int chunks, const std::function<void(const std::vector<int>&)>& f) {
  std::vector<int> boundaries{0};
  std::function<void()> extend = [&] {
    const int placed = static_cast<int>(boundaries.size()) - 1;
    if (placed == chunks - 1) {
      boundaries.push_back(layers);
      f(boundaries);
      boundaries.pop_back();
      return;
    }
    for (int end = boundaries.back() + 1; end <= layers - (chunks - 1 - placed); ++end) {
      boundaries.push_back(end);
      extend();
      boundaries.pop_back();
    }
  };
  extend();
}

// The least device memory on which the split fits under the policy: the most any stage needs.
int64_t needed_bytes(const LayerTable& table, const PartitionProblem& problem,
                     const std::vector<int>& boundaries) {
  int64_t most = 0;
  for (int stage_idx = 0; stage_idx < problem.pp; ++stage_idx) {
    auto bytes = [&](bool checkpoint) {
      return interleaved_stage_memory(
                 table, problem.memory, stage_idx,
                 stage_chunks(boundaries, problem.pp, problem.virtual_stages, stage_idx, checkpoint))
          .total_bytes;
    };
    int64_t need = bytes(problem.policy == CheckpointPolicy::kAll);
    if (problem.policy == CheckpointPolicy::kNeeded) need = std::min(bytes(false), bytes(true));
    most = std::max(most, need);
  }
  return most;
}

TEST(InterleavedPartitionTest, TheProofNeverRefusesADeviceSomeSplitFits) {
  std::mt19937_64 rng(17);
  int proven = 0;
  for (int case_idx = 0; case_idx < 24; ++case_idx) {
    const int layers = 6 + case_idx % 3;
    const Profile profile =
        testing::make_profile(testing::random_layers(rng, layers), {1, 2, 4}, 40, 500);
    const LayerTable table(profile, /*micro_batch_size=*/1 + case_idx % 2, OptimizerKind::kSgd);
    const int virtual_stages = 2 + case_idx % 2;
    const int num_micro_batches = 2 * (1 + case_idx % 3);
    for (CheckpointPolicy policy :
         {CheckpointPolicy::kNone, CheckpointPolicy::kAll, CheckpointPolicy::kNeeded}) {
      PartitionProblem problem = problem_for(2, virtual_stages, num_micro_batches, policy, 0);
      int64_t least = std::numeric_limits<int64_t>::max();
      for_each_split(layers, 2 * virtual_stages, [&](const std::vector<int>& boundaries) {
        least = std::min(least, needed_bytes(table, problem, boundaries));
      });
      PartitionResult proof;
      problem.device_memory_bytes = least;
      EXPECT_FALSE(interleaved_proven_infeasible(table, problem, &proof))
          << "case " << case_idx << ": " << proof.reason;
      problem.device_memory_bytes = least / 2;
      if (interleaved_proven_infeasible(table, problem, &proof)) {
        ++proven;
        EXPECT_LE(proof.needed_bytes, least);
        EXPECT_FALSE(interleaved_partition(PartitionSpec{}, table, problem).feasible);
      }
    }
  }
  EXPECT_GT(proven, 5);  // the proof does apply
}

TEST(InterleavedPartitionTest, StagesSumTheirChunksOfTheSplit) {
  const Profile profile = testing::make_profile(testing::equal_layers(12, 1.0, 2.0));
  const LayerTable table(profile, 1, OptimizerKind::kSgd);
  const PartitionProblem problem =
      problem_for(2, 3, 4, CheckpointPolicy::kNone, int64_t{1} << 30);
  const PartitionResult split = interleaved_partition(PartitionSpec{}, table, problem);
  ASSERT_TRUE(split.feasible) << split.reason;
  EXPECT_EQ(split.boundaries, (std::vector<int>{0, 2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(split.bottleneck_ns, 3 * to_ns(2 * 3.0));  // three chunks of two layers
  EXPECT_EQ(split.total_ns, 2 * split.bottleneck_ns);
  EXPECT_EQ(split.peak_memory_bytes,
            needed_bytes(table, problem, split.boundaries));
  // An explicit split of pp·V ranges is taken as given.
  PartitionSpec spec;
  spec.method = PartitionMethod::kExplicit;
  spec.boundaries = {0, 1, 2, 3, 4, 5, 12};
  const PartitionResult given = interleaved_partition(spec, table, problem);
  EXPECT_EQ(given.boundaries, spec.boundaries);
  EXPECT_EQ(given.bottleneck_ns, to_ns(3.0 * 2 + 3.0 * 7));  // stage 1: chunks 1, 3 and 5
  // Too little memory: infeasible, naming the stage that needs most.
  const PartitionResult tight = interleaved_partition(
      PartitionSpec{}, table,
      problem_for(2, 3, 4, CheckpointPolicy::kNone, split.peak_memory_bytes - 1));
  EXPECT_FALSE(tight.feasible);
  EXPECT_NE(tight.reason.find(" needs "), std::string::npos) << tight.reason;
}

}  // namespace
}  // namespace pipeplan
