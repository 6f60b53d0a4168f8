// Stage costs for the partitioners: time and memory of one stage under a policy.
#include "planner/stage_cost.h"

#include <algorithm>

#include "common/error.h"
#include "common/limits.h"

namespace pipeplan {

std::string to_string(CheckpointPolicy policy) {
  switch (policy) {
    case CheckpointPolicy::kNone:
      return "none";
    case CheckpointPolicy::kAll:
      return "all";
    case CheckpointPolicy::kNeeded:
      return "needed";
  }
  return "?";
}

StageEvaluator::StageEvaluator(const LayerTable& table, const PartitionProblem& problem)
    : table_(table), problem_(problem) {
  PIPEPLAN_ASSERT(problem.pp >= 1 && problem.pp <= table.num_layers());
  PIPEPLAN_ASSERT(static_cast<int>(problem.inter_node_boundaries.size()) == problem.pp - 1);
  for (int pos = 0; pos <= table.num_layers(); ++pos) {
    const int64_t bytes = table.boundary_bytes(pos);
    intra_transfer_ns_.push_back(to_ns(transfer_ms(
        bytes, problem.links.intra_node_bandwidth_bytes_per_s, problem.links.latency_ms)));
    inter_transfer_ns_.push_back(to_ns(transfer_ms(
        bytes, problem.links.inter_node_bandwidth_bytes_per_s, problem.links.latency_ms)));
    largest_transfer_ns_ =
        std::max({largest_transfer_ns_, intra_transfer_ns_.back(), inter_transfer_ns_.back()});
  }
  // A stage's cost adds two transfers, and the partitioner sums costs over the stages: bounded
  // so, with the compute unplannable_reason bounds, every sum stays inside 64-bit nanoseconds.
  const double largest_ms = to_ms(largest_transfer_ns_);
  PIPEPLAN_CHECK(largest_ms <= kMaxTimeMs && 2.0 * problem.pp * largest_ms <= kMaxIterationMs,
                 "a transfer between stages takes ", largest_ms, " ms: expected at most ",
                 std::min(kMaxTimeMs, kMaxIterationMs / (2.0 * problem.pp)), " ms with pp=",
                 problem.pp, ", the planner's limit (the link's bandwidth or latency is out of "
                 "proportion to the activations: check --inter-node-bandwidth and the profile's "
                 "interconnect)");
}

StageChoice StageEvaluator::evaluate_as(int stage_idx, int first, int last, bool checkpoint) const {
  StageChoice choice;
  choice.checkpoint = checkpoint;
  choice.memory_bytes =
      stage_memory(table_, problem_.memory, stage_idx, first, last, checkpoint).total_bytes;
  choice.fits = choice.memory_bytes <= problem_.device_memory_bytes;
  choice.cost_ns = table_.compute_ns(first, last) + (checkpoint ? table_.fwd_ns(first, last) : 0) +
                   p2p_ns(stage_idx, first, last);
  return choice;
}

StageChoice StageEvaluator::evaluate(int stage_idx, int first, int last) const {
  switch (problem_.policy) {
    case CheckpointPolicy::kNone:
      return evaluate_as(stage_idx, first, last, /*checkpoint=*/false);
    case CheckpointPolicy::kAll:
      return evaluate_as(stage_idx, first, last, /*checkpoint=*/true);
    case CheckpointPolicy::kNeeded: {
      const StageChoice plain = evaluate_as(stage_idx, first, last, /*checkpoint=*/false);
      return plain.fits ? plain : evaluate_as(stage_idx, first, last, /*checkpoint=*/true);
    }
  }
  return {};
}

}  // namespace pipeplan
