// Stage costs for the partitioners: time and memory of one stage under a policy.
#include "planner/stage_cost.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "common/limits.h"
#include "common/words.h"

namespace pipeplan {

namespace {

constexpr std::pair<const char*, CheckpointPolicy> kPolicyWords[] = {
    {"none", CheckpointPolicy::kNone},
    {"all", CheckpointPolicy::kAll},
    {"needed", CheckpointPolicy::kNeeded}};

}  // namespace

std::string to_string(CheckpointPolicy policy) { return word_of(policy, kPolicyWords); }

std::shared_ptr<const SendTimes> send_times(const LayerTable& table, const LinkCosts& links) {
  auto sends = std::make_shared<SendTimes>();
  sends->links = links;
  for (int pos = 0; pos <= table.num_layers(); ++pos) {
    const int64_t bytes = table.boundary_bytes(pos);
    sends->intra_node_ns.push_back(
        to_ns(transfer_ms(bytes, links.intra_node_bandwidth_bytes_per_s, links.latency_ms)));
    sends->inter_node_ns.push_back(
        to_ns(transfer_ms(bytes, links.inter_node_bandwidth_bytes_per_s, links.latency_ms)));
    sends->largest_ns =
        std::max({sends->largest_ns, sends->intra_node_ns.back(), sends->inter_node_ns.back()});
  }
  return sends;
}

StageEvaluator::StageEvaluator(const LayerTable& table, const PartitionProblem& problem,
                               std::shared_ptr<const SendTimes> sends)
    : table_(table),
      problem_(problem),
      memory_limited_(problem.device_memory_bytes < kUnlimitedMemoryBytes),
      sends_(sends ? std::move(sends) : send_times(table, problem.links)) {
  PIPEPLAN_ASSERT(problem.pp >= 1 && problem.pp <= table.num_layers());
  PIPEPLAN_ASSERT(static_cast<int>(problem.inter_node_boundaries.size()) == problem.pp - 1);
  const LinkCosts& links = sends_->links;
  PIPEPLAN_ASSERT(static_cast<int>(sends_->intra_node_ns.size()) == table.num_layers() + 1 &&
                      links.latency_ms == problem.links.latency_ms &&
                      links.intra_node_bandwidth_bytes_per_s ==
                          problem.links.intra_node_bandwidth_bytes_per_s &&
                      links.inter_node_bandwidth_bytes_per_s ==
                          problem.links.inter_node_bandwidth_bytes_per_s,
                  "send times of another table or other links");
  // A stage's cost adds two transfers, and the partitioner sums costs over the stages: bounded
  // so, with the compute unplannable_reason bounds, every sum stays inside 64-bit nanoseconds.
  const double largest_ms = to_ms(sends_->largest_ns);
  PIPEPLAN_CHECK(largest_ms <= kMaxTimeMs && 2.0 * problem.pp * largest_ms <= kMaxIterationMs,
                 "a transfer between stages takes ", largest_ms, " ms: expected at most ",
                 std::min(kMaxTimeMs, kMaxIterationMs / (2.0 * problem.pp)), " ms with pp=",
                 problem.pp, ", the planner's limit (the link's bandwidth or latency is out of "
                 "proportion to the activations: check --inter-node-bandwidth and the profile's "
                 "interconnect)");
  least_compute_ns_ =
      table.compute_prefix_ns(/*recompute=*/problem.policy == CheckpointPolicy::kAll).data();
  const MemorySettings& memory = problem.memory;
  const int64_t smallest = table.min_inner_boundary_bytes();
  stages_.reserve(problem.pp);
  for (int stage_idx = 0; stage_idx < problem.pp; ++stage_idx) {
    StageConstants stage;
    stage.in_flight = in_flight(memory.schedule, memory.pp, stage_idx, memory.num_micro_batches,
                                memory.virtual_stages);
    stage.deferred = deferred_weight_passes(memory.schedule, stage_idx, memory.num_micro_batches);
    stage.last = stage_idx == memory.pp - 1;
    stage.comm = stage_comm_counts(memory, stage_idx);
    stage.fixed_bytes = memory.runtime_overhead_bytes + memory.calibration_of(stage_idx);
    // Forward-only: stage 0 holds the model input its forward reads (forward_stage_memory).
    if (memory.forward_only) {
      stage.in_flight = 0;
      if (stage_idx == 0) stage.fixed_bytes += table.boundary_bytes(0);
    }
    stage.bound_input_bytes = stage_idx == 0 ? table.boundary_bytes(0) : smallest;
    stage.bound_fixed_bytes =
        stage.fixed_bytes + smallest * (stage.comm.in + stage.comm.out + stage.comm.sends);
    auto link = [&](int boundary) {
      return (problem.inter_node_boundaries[boundary] ? sends_->inter_node_ns
                                                      : sends_->intra_node_ns)
          .data();
    };
    if (stage_idx > 0 && !memory.forward_only)  // forward-only: no gradient goes back
      stage.send_in_ns = link(stage_idx - 1);
    if (stage_idx < problem.pp - 1) stage.send_out_ns = link(stage_idx);
    stages_.push_back(stage);
  }
}

StageChoice StageEvaluator::evaluate_as(int stage_idx, int first, int last, bool checkpoint) const {
  return choice(stage_idx, first, last, checkpoint,
                memory_bytes(stage_idx, first, last, checkpoint));
}

StageChoice StageEvaluator::evaluate(int stage_idx, int first, int last) const {
  const MemoryBounds totals = memory_totals(stage_idx, first, last);
  switch (problem_.policy) {
    case CheckpointPolicy::kNone:
      return choice(stage_idx, first, last, /*checkpoint=*/false, totals.plain);
    case CheckpointPolicy::kAll:
      return choice(stage_idx, first, last, /*checkpoint=*/true, totals.checkpointed);
    case CheckpointPolicy::kNeeded: {
      const bool plain_fits = totals.plain <= problem_.device_memory_bytes;
      return choice(stage_idx, first, last, /*checkpoint=*/!plain_fits,
                    plain_fits ? totals.plain : totals.checkpointed);
    }
  }
  return {};
}

StageChoice StageEvaluator::choice(int stage_idx, int first, int last, bool checkpoint,
                                   int64_t memory_bytes) const {
  StageChoice result;
  result.checkpoint = checkpoint;
  result.memory_bytes = memory_bytes;
  result.fits = memory_bytes <= problem_.device_memory_bytes;
  result.cost_ns = table_.compute_ns(first, last) + (checkpoint ? table_.fwd_ns(first, last) : 0) +
                   p2p_ns(stage_idx, first, last);
  return result;
}

}  // namespace pipeplan
