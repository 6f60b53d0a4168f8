// The simulator: the mean-times iteration and, within the draw budget, the drawn one.
#include "planner/simulator.h"

#include <algorithm>

#include "common/error.h"
#include "planner/pipeline_player.h"

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

// The drawn iteration `drawn_ms` (never below the mean-times one) with each rank's idle time
// and the bubble to match.
void apply_draws(double drawn_ms, int draws, SimulationResult* result) {
  const double iteration_ms = std::max(result->mean_times_iteration_ms, drawn_ms);
  double idle_total = 0;
  for (size_t rank = 0; rank < result->busy_ms.size(); ++rank) {
    result->idle_ms[rank] = iteration_ms - result->busy_ms[rank];
    idle_total += result->idle_ms[rank];
  }
  result->iteration_ms = iteration_ms;
  result->bubble_fraction =
      idle_total / (static_cast<double>(result->busy_ms.size()) * iteration_ms);
  result->timeline.bubble_fraction = result->bubble_fraction;
  result->variability_draws = draws;
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

SimulationResult simulate(const SimulationInput& input, const SimulationOptions& options) {
  check_input(input);
  SimulationResult result = simulate_mean_times(input, options);
  result.mean_times_iteration_ms = result.iteration_ms;
  const int draws = options.variability_draws;
  if (!result.abandoned && draws > 0 && times_vary(input) && draws_fit_budget(input, draws))
    apply_draws(drawn_iteration_ms(input, draws), draws, &result);
  return result;
}

}  // namespace pipeplan
