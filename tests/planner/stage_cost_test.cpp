// Tests for planner/stage_cost.h: the evaluator's memory and its lower bound, computed from
// terms of the stage index kept once, equal the memory model's (planner/memory_model.h), and
// its choices follow the checkpointing policy.
#include "planner/stage_cost.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/planner/test_profiles.h"

namespace pipeplan {
namespace {

// evaluate follows the policy over evaluate_as, and may_fit is both lower bounds at once.
void expect_policy_choice(const StageEvaluator& evaluator, const PartitionProblem& problem,
                          int stage_idx, int first, int last) {
  const StageChoice plain = evaluator.evaluate_as(stage_idx, first, last, false);
  const StageChoice checkpointed = evaluator.evaluate_as(stage_idx, first, last, true);
  StageChoice expected = plain.fits ? plain : checkpointed;  // kNeeded
  if (problem.policy == CheckpointPolicy::kNone) expected = plain;
  if (problem.policy == CheckpointPolicy::kAll) expected = checkpointed;
  const StageChoice choice = evaluator.evaluate(stage_idx, first, last);
  EXPECT_EQ(choice.checkpoint, expected.checkpoint);
  EXPECT_EQ(choice.fits, expected.fits);
  EXPECT_EQ(choice.cost_ns, expected.cost_ns);
  EXPECT_EQ(choice.memory_bytes, expected.memory_bytes);
  const int64_t cost_bound = evaluator.cost_lower_bound_ns(stage_idx, first, last);
  const bool memory_fits =
      evaluator.memory_lower_bound_bytes(stage_idx, first, last) <= problem.device_memory_bytes;
  EXPECT_FALSE(evaluator.may_fit(stage_idx, first, last, cost_bound - 1));
  EXPECT_EQ(evaluator.may_fit(stage_idx, first, last, cost_bound), memory_fits);
  // The time alone: the same choice, its memory computed on request.
  const StageChoice time = evaluator.evaluate_time(stage_idx, first, last);
  EXPECT_EQ(time.checkpoint, choice.checkpoint);
  EXPECT_EQ(time.fits, choice.fits);
  EXPECT_EQ(time.cost_ns, choice.cost_ns);
  EXPECT_EQ(evaluator.chosen_memory_bytes(time, stage_idx, first, last), choice.memory_bytes);
}

TEST(StageCostTest, MemoryEqualsTheMemoryModel) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> correction(-1000, 100000);
  int checked = 0;
  for (int case_idx = 0; case_idx < 24; ++case_idx) {
    const int layers = 2 + case_idx % 6;
    const Profile profile =
        testing::make_profile(testing::random_layers(rng, layers), {1, 2, 4}, 16, case_idx * 1000);
    const LayerTable table(profile, 1 + case_idx % 4,
                           case_idx % 2 ? OptimizerKind::kAdamw : OptimizerKind::kSgd);
    for (int pp = 1; pp <= layers; ++pp) {
      PartitionProblem problem;
      problem.pp = pp;
      problem.device_memory_bytes = int64_t{1} << 40;
      problem.inter_node_boundaries = std::vector<bool>(pp - 1, false);
      MemorySettings& memory = problem.memory;
      memory.schedule = case_idx % 3 == 0   ? Schedule::kGpipe
                        : case_idx % 3 == 1 ? Schedule::kOneFOneB
                                            : Schedule::kZeroBubbleH1;
      memory.pp = pp;
      memory.dp = 1 + case_idx % 3;
      memory.num_micro_batches = 1 + case_idx % 5;
      memory.optimizer = table.num_layers() % 2 ? OptimizerKind::kAdamw : OptimizerKind::kSgd;
      memory.precision = case_idx % 4 ? Precision::kAmpBf16 : Precision::kFp32;
      memory.runtime_overhead_bytes = 5000 * case_idx;
      if (case_idx % 5 == 0)
        for (int stage_idx = 0; stage_idx < pp; ++stage_idx)
          memory.calibration_bytes.push_back(correction(rng));
      problem.policy = static_cast<CheckpointPolicy>(case_idx % 3);
      // Tight enough that some stages need checkpointing, or do not fit at all.
      problem.device_memory_bytes =
          stage_memory(table, memory, 0, 0, layers, false).total_bytes * (1 + case_idx % 4) / 4;
      // Every stage fits a device of kUnlimitedMemoryBytes, whose evaluator skips the memory
      // where only fitting needs it; and send times shared with another evaluator change nothing.
      PartitionProblem unlimited = problem;
      unlimited.device_memory_bytes = kUnlimitedMemoryBytes;
      const StageEvaluator evaluator(table, problem);
      const StageEvaluator unlimited_evaluator(table, unlimited, send_times(table, problem.links));
      for (int stage_idx = 0; stage_idx < pp; ++stage_idx)
        for (int first = 0; first < layers; ++first)
          for (int last = first + 1; last <= layers; ++last) {
            for (bool checkpoint : {false, true}) {
              EXPECT_EQ(
                  evaluator.memory_bytes(stage_idx, first, last, checkpoint),
                  stage_memory(table, memory, stage_idx, first, last, checkpoint).total_bytes);
              EXPECT_EQ(
                  evaluator.memory_lower_bound_as(stage_idx, first, last, checkpoint),
                  stage_memory_lower_bound(table, memory, stage_idx, first, last, checkpoint));
            }
            expect_policy_choice(evaluator, problem, stage_idx, first, last);
            expect_policy_choice(unlimited_evaluator, unlimited, stage_idx, first, last);
            EXPECT_TRUE(unlimited_evaluator.evaluate(stage_idx, first, last).fits);
            ++checked;
          }
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace pipeplan
