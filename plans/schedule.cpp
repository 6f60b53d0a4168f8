// Schedule expansion for gpipe and 1f1b.
#include "plans/schedule.h"

#include <algorithm>

#include "common/error.h"

namespace pipeplan {

std::vector<Action> stage_actions(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                                  bool all_reduce) {
  const StageActionList list(schedule, pp, stage_idx, num_micro_batches, all_reduce);
  std::vector<Action> actions;
  actions.reserve(list.size());
  for (size_t idx = 0; idx < list.size(); ++idx) actions.push_back(list[idx]);
  return actions;
}

StageActionList::StageActionList(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                                 bool all_reduce)
    : schedule_(schedule),
      pp_(pp),
      stage_idx_(stage_idx),
      num_micro_batches_(num_micro_batches),
      warmup_(std::min(pp - stage_idx - 1, num_micro_batches)),
      steady_end_(2 * num_micro_batches - warmup_),
      block_size_(1 + (stage_idx > 0) + (stage_idx < pp - 1)),
      all_reduce_(all_reduce),
      size_(2 * static_cast<size_t>(num_micro_batches) * block_size_ + (all_reduce ? 2 : 1)) {
  PIPEPLAN_ASSERT(pp >= 1 && stage_idx >= 0 && stage_idx < pp && num_micro_batches >= 1);
}

Action StageActionList::operator[](size_t idx) const {
  const size_t compute_end = size_ - (all_reduce_ ? 2 : 1);
  if (idx >= compute_end)
    return {idx + 1 == size_ ? ActionKind::kOptimizerStep : ActionKind::kAllReduce, -1, -1};
  const ComputeBlock b = block(static_cast<int>(idx / block_size_));
  const size_t offset = idx % block_size_;
  const size_t compute_offset = (b.forward ? stage_idx_ > 0 : stage_idx_ < pp_ - 1) ? 1 : 0;
  const int upstream = stage_idx_ - 1;
  const int downstream = stage_idx_ + 1;
  if (offset < compute_offset)
    return b.forward ? Action{ActionKind::kRecvActivation, b.micro_batch, upstream}
                     : Action{ActionKind::kRecvGradient, b.micro_batch, downstream};
  if (offset == compute_offset)
    return {b.forward ? ActionKind::kForward : ActionKind::kBackward, b.micro_batch, -1};
  return b.forward ? Action{ActionKind::kSendActivation, b.micro_batch, downstream}
                   : Action{ActionKind::kSendGradient, b.micro_batch, upstream};
}

std::vector<std::vector<Action>> expand_schedule(const Plan& plan) {
  std::vector<std::vector<Action>> per_rank(plan.ranks.size());
  for (const RankAssignment& assignment : plan.ranks) {
    std::vector<Action> actions = stage_actions(plan.schedule, plan.pp, assignment.stage,
                                                plan.num_micro_batches, plan.dp > 1);
    for (Action& action : actions)
      if (action.peer >= 0) action.peer = rank_of(plan, action.peer, assignment.replica);
    per_rank[assignment.rank] = std::move(actions);
  }
  return per_rank;
}

std::string to_string(const Action& action) {
  const std::string mb = std::to_string(action.micro_batch);
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
    case ActionKind::kSendGradient:
      return "send-grad " + mb + " -> r" + peer;
    case ActionKind::kAllReduce:
      return "all-reduce";
    case ActionKind::kOptimizerStep:
      return "step";
  }
  return "?";
}

std::vector<std::vector<Action>> expand_forward_only(const Plan& plan, int num_micro_batches) {
  PIPEPLAN_ASSERT(num_micro_batches >= 0);
  std::vector<std::vector<Action>> per_rank(plan.ranks.size());
  for (const RankAssignment& assignment : plan.ranks) {
    std::vector<Action>& actions = per_rank[assignment.rank];
    if (num_micro_batches > 0) {
      // GPipe's first half: every micro-batch's forward with its receive and send.
      const StageActionList list(Schedule::kGpipe, plan.pp, assignment.stage, num_micro_batches,
                                 /*all_reduce=*/false);
      for (size_t idx = 0; idx < (list.size() - 1) / 2; ++idx) actions.push_back(list[idx]);
    }
    for (Action& action : actions)
      if (action.peer >= 0) action.peer = rank_of(plan, action.peer, assignment.replica);
  }
  return per_rank;
}

}  // namespace pipeplan
