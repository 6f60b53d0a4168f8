// Schedule expansion for gpipe, 1f1b, zb-h1 and interleaved-1f1b.
#include "plans/schedule.h"

#include <algorithm>

#include "common/error.h"
#include "plans/stage_action_list.h"

namespace pipeplan {

int64_t interleaved_chunk_slots(int64_t slots, int pp, int virtual_stages) {
  if (slots <= 0) return 0;
  const int64_t period = int64_t{pp} * virtual_stages;
  return slots / period * pp + std::min<int64_t>(slots % period, pp);
}

int interleaved_in_flight(int pp, int virtual_stages, int stage_idx, int chunk,
                          int num_micro_batches) {
  PIPEPLAN_ASSERT(pp >= 1 && virtual_stages >= 1 && chunk >= 0 && chunk < virtual_stages);
  const int warmup = interleaved_warmup(pp, virtual_stages, stage_idx, num_micro_batches);
  const int64_t window = warmup + 1 + int64_t{virtual_stages - 1 - 2 * chunk} * pp;
  return static_cast<int>(
      std::min<int64_t>(num_micro_batches, interleaved_chunk_slots(window, pp, virtual_stages)));
}

ReplicaActions replica_actions(const Plan& plan) {
  const bool replicated = plan.dp > 1;
  return {replicated, replicated && plan.data_parallel.overlap,
          replicated && plan.data_parallel.zero == 1};
}

std::vector<Action> stage_actions(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                                  ReplicaActions replicas, int virtual_stages) {
  const StageActionList list(schedule, pp, stage_idx, num_micro_batches, replicas, virtual_stages);
  std::vector<Action> actions;
  actions.reserve(list.size());
  for (size_t idx = 0; idx < list.size(); ++idx) actions.push_back(list[idx]);
  return actions;
}

std::vector<std::vector<Action>> expand_schedule(const Plan& plan) {
  std::vector<std::vector<Action>> per_rank(plan.ranks.size());
  for (const RankAssignment& assignment : plan.ranks) {
    std::vector<Action> actions =
        stage_actions(plan.schedule, plan.pp, assignment.stage, plan.num_micro_batches,
                      replica_actions(plan), plan.virtual_stages);
    for (Action& action : actions)
      if (action.peer >= 0)
        action.peer = rank_of(plan, action.peer, assignment.replica, assignment.tp_rank);
    per_rank[assignment.rank] = std::move(actions);
  }
  return per_rank;
}

std::string to_string(const Action& action) {
  const std::string mb = std::to_string(action.micro_batch) +
                         (action.chunk > 0 ? "v" + std::to_string(action.chunk) : std::string());
  const std::string peer = std::to_string(action.peer);
  switch (action.kind) {
    case ActionKind::kRecvActivation:
      return "recv-act " + mb + " <- r" + peer;
    case ActionKind::kForward:
      return "F" + mb;
    case ActionKind::kSendActivation:
      return "send-act " + mb + " -> r" + peer;
    case ActionKind::kRecvGradient:
      return "recv-grad " + mb + " <- r" + peer;
    case ActionKind::kBackward:
      return "B" + mb;
    case ActionKind::kBackwardInput:
      return "Bi" + mb;
    case ActionKind::kBackwardWeight:
      return "W" + mb;
    case ActionKind::kSendGradient:
      return "send-grad " + mb + " -> r" + peer;
    case ActionKind::kAllReduce:
      return "all-reduce";
    case ActionKind::kOptimizerStep:
      return "step";
    case ActionKind::kAllGather:
      return "all-gather";
    case ActionKind::kAllReduceStart:
      return action.chunk > 0 ? "ar-start v" + std::to_string(action.chunk) : "ar-start";
  }
  return "?";
}

std::vector<std::vector<Action>> expand_forward_only(const Plan& plan, int num_micro_batches) {
  PIPEPLAN_ASSERT(num_micro_batches >= 0);
  std::vector<std::vector<Action>> per_rank(plan.ranks.size());
  for (const RankAssignment& assignment : plan.ranks) {
    std::vector<Action>& actions = per_rank[assignment.rank];
    const int s = assignment.stage;
    const int pp = plan.pp;
    // Rounds of pp micro-batches (the last may be short), each through local chunk 0, then 1,
    // ...: interleaved-1f1b's forward order. Every rank runs the same sequence and stage 0's
    // chunk v + 1 waits on stage pp − 1's chunk v a round's worth of forwards earlier, so a link
    // never holds more than a few messages the receiver has not taken (with all of chunk 0
    // first, stage pp − 1 could send only the receives posted ahead plus the sends in flight of
    // the chunk-0 outputs stage 0 takes after its whole chunk 0: a deadlock).
    for (int round = 0; round * pp < num_micro_batches; ++round) {
      const int end = std::min(num_micro_batches, (round + 1) * pp);
      for (int v = 0; v < plan.virtual_stages; ++v) {
        const bool has_in = s > 0 || v > 0;
        const bool has_out = s < pp - 1 || v < plan.virtual_stages - 1;
        for (int mb = round * pp; mb < end; ++mb) {
          if (has_in) actions.push_back({ActionKind::kRecvActivation, mb, (s + pp - 1) % pp, v});
          actions.push_back({ActionKind::kForward, mb, -1, v});
          if (has_out) actions.push_back({ActionKind::kSendActivation, mb, (s + 1) % pp, v});
        }
      }
    }
    for (Action& action : actions)
      if (action.peer >= 0)
        action.peer = rank_of(plan, action.peer, assignment.replica, assignment.tp_rank);
  }
  return per_rank;
}

}  // namespace pipeplan
