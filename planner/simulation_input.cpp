// A plan as the simulator's input, and the replica kinds of an input.
#include "planner/simulation_input.h"

#include <algorithm>
#include <map>
#include <utility>

#include "planner/time_model.h"
#include "plans/comm_backend.h"

namespace pipeplan {

ReplicaKinds replica_kinds(const SimulationInput& in) {
  ReplicaKinds kinds;
  std::map<std::pair<std::vector<double>, std::vector<double>>, int> seen;
  for (int replica = 0; replica < in.dp; ++replica) {
    const auto key = std::make_pair(in.activation_ms[replica], in.gradient_ms[replica]);
    const auto [it, added] = seen.emplace(key, static_cast<int>(kinds.representative.size()));
    if (added) {
      kinds.representative.push_back(replica);
      kinds.count.push_back(0);
    }
    kinds.kind_of.push_back(it->second);
    ++kinds.count[it->second];
  }
  return kinds;
}

bool times_vary(const SimulationInput& in) {
  if (!in.rank_times.empty()) return false;  // measured action times: nothing to draw
  for (const StageCosts& stage : in.stages)
    if (stage.fwd_cv > 0 || stage.bwd_cv > 0) return true;
  return false;
}

SimulationInput simulation_input(const Plan& plan) {
  SimulationInput in;
  in.schedule = plan.schedule;
  in.pp = plan.pp;
  in.dp = plan.dp;
  in.num_micro_batches = plan.num_micro_batches;
  in.send_occupies_sender = send_occupies_sender(choose_backend(plan));
  in.virtual_stages = plan.virtual_stages;
  in.forward_only = plan.mode == PlanMode::kInference;
  for (const StagePrediction& stage : plan.predictions.stages)
    in.stages.push_back({stage.fwd_ms, stage.bwd_ms, stage.recompute_ms, stage.allreduce_ms,
                         stage.optimizer_ms, stage.fwd_cv, stage.bwd_cv, stage.bwd_weight_ms,
                         stage.allgather_ms, stage.buckets});
  in.overlap_allreduce = plan.dp > 1 && plan.data_parallel.overlap;
  in.all_gather = plan.dp > 1 && plan.data_parallel.zero == 1;
  if (plan.schedule == Schedule::kInterleaved1F1B) {
    in.chunks.resize(plan.stages.size());
    for (int stage = 0; stage < plan.pp; ++stage)
      for (int chunk = 0; chunk < plan.virtual_stages; ++chunk) {
        const StagePrediction& p = plan.predictions.stages[stage];
        const ChunkPrediction& c = p.chunks[chunk];
        in.chunks[chunk_index(plan.pp, stage, chunk)] = {
            c.fwd_ms, c.bwd_ms, c.recompute_ms, 0, 0, p.fwd_cv, p.bwd_cv, 0};
      }
  }
  // One simulated rank per tensor-parallel group (its ranks run in lockstep): group g is ranks
  // g·tp .. g·tp + tp − 1, played as rank g.
  const int tp = plan.tp();
  in.ranks.assign(plan.dp, std::vector<int>(plan.pp, 0));
  for (const RankAssignment& assignment : plan.ranks)
    if (assignment.tp_rank == 0)
      in.ranks[assignment.replica][assignment.stage] = assignment.rank / tp;
  const LinkCosts links = link_costs(plan.cluster);
  const int num_chunks = static_cast<int>(plan.stages.size());
  in.activation_ms.assign(plan.dp, std::vector<double>(std::max(num_chunks - 1, 0), 0));
  in.gradient_ms = in.activation_ms;
  for (int boundary = 0; boundary + 1 < num_chunks; ++boundary) {
    const StagePlan& stage = plan.stages[boundary];
    const int64_t bytes =
        activation_bytes(stage.output_sample_shape, stage.output_dtype, plan.micro_batch_size);
    for (int replica = 0; replica < plan.dp; ++replica) {
      const bool inter_node = plan.ranks[in.ranks[replica][boundary % plan.pp] * tp].node !=
                              plan.ranks[in.ranks[replica][(boundary + 1) % plan.pp] * tp].node;
      const double ms = transfer_ms(bytes, links.bandwidth(inter_node), links.latency_ms);
      in.activation_ms[replica][boundary] = ms;
      in.gradient_ms[replica][boundary] = ms;
    }
  }
  return in;
}

}  // namespace pipeplan
