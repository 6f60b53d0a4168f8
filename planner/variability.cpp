// Draws of varying action times: log-normal multipliers from a fixed seed, every rank's times
// drawn and each replica played alone.
#include "planner/variability.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "planner/lognormal.h"
#include "planner/pipeline_player.h"

namespace pipeplan {
namespace {

// A player per replica kind and one pipeline's action times, redrawn in place for each replica
// and draw.
class ReplicaDrawer {
 public:
  explicit ReplicaDrawer(const SimulationInput& in) : in_(in), kinds_(replica_kinds(in)) {
    for (int replica : kinds_.representative)
      players_.emplace_back(in, std::vector<int>{replica}, /*record_timeline=*/false);
  }

  int kind_of(int replica) const { return kinds_.kind_of[replica]; }

  // Draws every action time of one pipeline from `multipliers` and plays it as `kind`: its
  // iteration, in ms. Stage by stage, micro-batch by micro-batch: forward, backward,
  // recompute (when the stage recomputes), the order every draw of this simulator has used.
  double draw_and_play(int kind, Multipliers& multipliers) {
    if (times_.empty()) allocate_times();
    for (int stage = 0; stage < in_.pp; ++stage) {
      const LogNormal fwd_shape = log_normal(in_.stages[stage].fwd_cv);
      const LogNormal bwd_shape = log_normal(in_.stages[stage].bwd_cv);
      RankStepTimes& rank = times_[stage];
      const bool recomputes = !rank.recompute_ms.empty();
      for (int chunk = 0; chunk < in_.virtual_stages; ++chunk) {  // interleaved: chunk-major
        const StageCosts& costs = in_.virtual_stages > 1
                                      ? in_.chunks[chunk_index(in_.pp, stage, chunk)]
                                      : in_.stages[stage];
        for (int mb = 0; mb < in_.num_micro_batches; ++mb) {
          const int slot = chunk * in_.num_micro_batches + mb;
          rank.fwd_ms[slot] = costs.fwd_ms * multipliers.draw(fwd_shape);
          rank.bwd_ms[slot] = costs.bwd_ms * multipliers.draw(bwd_shape);
          if (!rank.bwd_weight_ms.empty())
            rank.bwd_weight_ms[slot] = costs.bwd_weight_ms * multipliers.draw(bwd_shape);
          if (recomputes)
            rank.recompute_ms[slot] = costs.recompute_ms * multipliers.draw(fwd_shape);
        }
      }
    }
    return players_[kind].play();
  }

 private:
  void allocate_times() {
    times_.resize(in_.pp);
    const int slots = in_.num_micro_batches * in_.virtual_stages;  // interleaved: per chunk
    for (int stage = 0; stage < in_.pp; ++stage) {
      bool recomputes = in_.stages[stage].recompute_ms > 0;
      for (int chunk = 0; chunk < in_.virtual_stages && in_.virtual_stages > 1; ++chunk)
        recomputes = recomputes || in_.chunks[chunk_index(in_.pp, stage, chunk)].recompute_ms > 0;
      times_[stage].fwd_ms.resize(slots);
      times_[stage].bwd_ms.resize(slots);
      times_[stage].recompute_ms.resize(recomputes ? slots : 0);
      const bool split = in_.schedule == Schedule::kZeroBubbleH1;
      times_[stage].bwd_weight_ms.resize(split ? slots : 0);
      times_[stage].optimizer_ms = in_.stages[stage].optimizer_ms;
    }
    for (PipelinePlayer& player : players_)
      for (int stage = 0; stage < in_.pp; ++stage) player.set_times(0, stage, &times_[stage]);
  }

  const SimulationInput& in_;
  const ReplicaKinds kinds_;
  std::vector<RankStepTimes> times_;     // by stage, once the draws begin
  std::vector<PipelinePlayer> players_;  // by kind
};

}  // namespace

double compute_actions(const SimulationInput& input) {
  int per_micro_batch = input.schedule == Schedule::kZeroBubbleH1 ? 3 : 2;
  if (input.forward_only) per_micro_batch = 1;
  return static_cast<double>(input.pp) * input.virtual_stages * input.num_micro_batches *
         per_micro_batch;
}

bool draws_fit_budget(const SimulationInput& input, int draws) {
  return static_cast<double>(draws) * input.dp * compute_actions(input) <= kDrawBudgetActions;
}

double drawn_iteration_ms(const SimulationInput& input, int draws) {
  PIPEPLAN_ASSERT(draws >= 1 && input.rank_times.empty());
  ReplicaDrawer drawer(input);
  Multipliers multipliers;
  double total_ms = 0;
  for (int draw = 0; draw < draws; ++draw) {
    double slowest_ms = 0;
    for (int replica = 0; replica < input.dp; ++replica)
      slowest_ms = std::max(slowest_ms, drawer.draw_and_play(drawer.kind_of(replica), multipliers));
    total_ms += slowest_ms;
  }
  return total_ms / draws;
}

}  // namespace pipeplan
