// The simulator: the mean-times iteration, the drawn one, and the input of a plan.
#include "planner/simulator.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "planner/pipeline_player.h"
#include "planner/time_model.h"
#include "planner/variability.h"
#include "plans/comm_backend.h"

namespace pipeplan {
namespace {

// The replicas to play with mean times: one per kind when merging (replica_kinds), else every
// one. `kind_of` maps each replica to the index of the played replica standing for it.
std::vector<int> played_replicas(const SimulationInput& in, bool merge, std::vector<int>* kind_of) {
  if (merge) {
    ReplicaKinds kinds = replica_kinds(in);
    *kind_of = std::move(kinds.kind_of);
    return std::move(kinds.representative);
  }
  kind_of->resize(in.dp);
  for (int replica = 0; replica < in.dp; ++replica) (*kind_of)[replica] = replica;
  return *kind_of;
}

// Per-rank busy and idle time, the bubble and the timeline of a played iteration.
SimulationResult collect(const SimulationInput& in, const PipelinePlayer& player,
                         const std::vector<int>& kind_of, double iteration_ms) {
  SimulationResult result;
  result.iteration_ms = iteration_ms;
  const size_t num_ranks = static_cast<size_t>(in.dp) * in.pp;
  result.busy_ms.assign(num_ranks, 0);
  result.idle_ms.assign(num_ranks, 0);
  result.allreduce_ms.assign(num_ranks, 0);
  result.timeline.rank_stages.assign(num_ranks, 0);
  double idle_total = 0;
  for (int replica = 0; replica < in.dp; ++replica)
    for (int stage = 0; stage < in.pp; ++stage) {
      const int rank = in.ranks[replica][stage];
      result.busy_ms[rank] = player.busy_ms(kind_of[replica], stage);
      result.allreduce_ms[rank] = player.allreduce_ms(kind_of[replica], stage);
      result.idle_ms[rank] = iteration_ms - result.busy_ms[rank];
      idle_total += result.idle_ms[rank];
      result.timeline.rank_stages[rank] = stage;
      for (TimelineEvent event : player.events(kind_of[replica], stage)) {
        event.rank = rank;
        if (event.peer >= 0) event.peer = in.ranks[replica][event.peer];
        result.timeline.events.push_back(event);
      }
    }
  result.bubble_fraction = iteration_ms > 0 ? idle_total / (num_ranks * iteration_ms) : 0;
  result.timeline.iteration_ms = iteration_ms;
  result.timeline.bubble_fraction = result.bubble_fraction;
  return result;
}

// The iteration with every action at its mean time, or at the rank's own measured times.
SimulationResult simulate_mean_times(const SimulationInput& in, const SimulationOptions& options) {
  std::vector<int> kind_of;
  const bool merge = options.merge_identical_replicas && in.rank_times.empty();
  PipelinePlayer player(in, played_replicas(in, merge, &kind_of), options.record_timeline);
  if (!in.rank_times.empty())
    for (int replica = 0; replica < in.dp; ++replica)
      for (int stage = 0; stage < in.pp; ++stage)
        player.set_times(replica, stage, &in.rank_times[in.ranks[replica][stage]]);
  player.stop_above(options.abandon_above_ms);
  const double iteration_ms = player.play();
  SimulationResult result = collect(in, player, kind_of, iteration_ms);
  result.abandoned = player.abandoned();
  return result;
}

void check_input(const SimulationInput& in) {
  PIPEPLAN_ASSERT(in.pp >= 1 && in.dp >= 1 && in.num_micro_batches >= 1);
  PIPEPLAN_ASSERT(static_cast<int>(in.stages.size()) == in.pp);
  PIPEPLAN_ASSERT(static_cast<int>(in.activation_ms.size()) == in.dp &&
                  static_cast<int>(in.gradient_ms.size()) == in.dp &&
                  static_cast<int>(in.ranks.size()) == in.dp);
  const bool interleaved = in.schedule == Schedule::kInterleaved1F1B;
  PIPEPLAN_ASSERT(interleaved ? in.virtual_stages >= 2 && in.pp >= 2 &&
                                    in.num_micro_batches % in.pp == 0 &&
                                    static_cast<int>(in.chunks.size()) == in.pp * in.virtual_stages
                              : in.virtual_stages == 1 && in.chunks.empty());
  const int boundaries = in.pp * in.virtual_stages - 1;
  for (int replica = 0; replica < in.dp; ++replica)
    PIPEPLAN_ASSERT(static_cast<int>(in.activation_ms[replica].size()) == boundaries &&
                    static_cast<int>(in.gradient_ms[replica].size()) == boundaries &&
                    static_cast<int>(in.ranks[replica].size()) == in.pp);
  PIPEPLAN_ASSERT(in.rank_times.empty() || static_cast<int>(in.rank_times.size()) == in.dp * in.pp);
  const int slots = in.num_micro_batches * in.virtual_stages;  // actions of a kind per rank
  for (const RankStepTimes& times : in.rank_times)
    PIPEPLAN_ASSERT(static_cast<int>(times.fwd_ms.size()) == slots &&
                    static_cast<int>(times.bwd_ms.size()) == slots &&
                    (times.recompute_ms.empty() ||
                     static_cast<int>(times.recompute_ms.size()) == slots) &&
                    (in.schedule != Schedule::kZeroBubbleH1 ||
                     static_cast<int>(times.bwd_weight_ms.size()) == slots));
}

}  // namespace

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

SimulationResult simulate(const SimulationInput& input, const SimulationOptions& options) {
  check_input(input);
  SimulationResult result = simulate_mean_times(input, options);
  result.mean_times_iteration_ms = result.iteration_ms;
  if (!result.abandoned) add_variation(input, options, &result);
  return result;
}

void add_variation(const SimulationInput& input, const SimulationOptions& options,
                   SimulationResult* result) {
  if (options.variability_draws <= 0 || !times_vary(input)) return;
  apply_drawn_iteration(drawn_iteration(input, options.variability_draws, options.replica_draws),
                        result);
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
  in.ranks.assign(plan.dp, std::vector<int>(plan.pp, 0));
  for (const RankAssignment& assignment : plan.ranks)
    in.ranks[assignment.replica][assignment.stage] = assignment.rank;
  const LinkCosts links = link_costs(plan.cluster);
  const int num_chunks = static_cast<int>(plan.stages.size());
  in.activation_ms.assign(plan.dp, std::vector<double>(std::max(num_chunks - 1, 0), 0));
  in.gradient_ms = in.activation_ms;
  for (int boundary = 0; boundary + 1 < num_chunks; ++boundary) {
    const StagePlan& stage = plan.stages[boundary];
    const int64_t bytes =
        activation_bytes(stage.output_sample_shape, stage.output_dtype, plan.micro_batch_size);
    for (int replica = 0; replica < plan.dp; ++replica) {
      const bool inter_node = plan.ranks[in.ranks[replica][boundary % plan.pp]].node !=
                              plan.ranks[in.ranks[replica][(boundary + 1) % plan.pp]].node;
      const double ms = transfer_ms(bytes, links.bandwidth(inter_node), links.latency_ms);
      in.activation_ms[replica][boundary] = ms;
      in.gradient_ms[replica][boundary] = ms;
    }
  }
  return in;
}

}  // namespace pipeplan
