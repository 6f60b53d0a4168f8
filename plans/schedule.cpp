// Schedule expansion for gpipe, 1f1b and zb-h1.
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
    : stage_idx_(stage_idx),
      has_in_(stage_idx > 0),
      has_out_(stage_idx < pp - 1),
      all_reduce_(all_reduce) {
  PIPEPLAN_ASSERT(pp >= 1 && stage_idx >= 0 && stage_idx < pp && num_micro_batches >= 1);
  using K = BlockKind;
  const int m = num_micro_batches;
  const int warmup = std::min(pp - stage_idx - 1, m);  // 1f1b, zb-h1: forwards before the first B
  switch (schedule) {
    case Schedule::kGpipe:
      add_segment(0, m, {K::kForward}, {0});
      add_segment(0, m, {K::kBackward}, {0});
      break;
    case Schedule::kOneFOneB:
      add_segment(0, warmup, {K::kForward}, {0});
      add_segment(0, m - warmup, {K::kForward, K::kBackward}, {warmup, 0});
      add_segment(m - warmup, m, {K::kBackward}, {0});
      break;
    case Schedule::kZeroBubbleH1: {
      // Step i is 1f1b's F(w + i) B(i) with B split; W(i − s) joins it from step s on, and the
      // s Ws still owed close the list.
      const int lag = stage_idx;
      const int steady_split = std::clamp(lag, 0, m - warmup);
      const int cooldown_split = std::clamp(lag, m - warmup, m);
      add_segment(0, warmup, {K::kForward}, {0});
      add_segment(0, steady_split, {K::kForward, K::kBackwardInput}, {warmup, 0});
      add_segment(steady_split, m - warmup, {K::kForward, K::kBackwardInput, K::kBackwardWeight},
                  {warmup, 0, -lag});
      add_segment(m - warmup, cooldown_split, {K::kBackwardInput}, {0});
      add_segment(cooldown_split, m, {K::kBackwardInput, K::kBackwardWeight}, {0, -lag});
      add_segment(std::max(0, m - lag), m, {K::kBackwardWeight}, {0});
      break;
    }
  }
  const Segment& last = segments_[num_segments_ - 1];  // m >= 1: some segment is not empty
  size_ = last.first_action + static_cast<size_t>(last.steps) * last.actions_per_step +
          (all_reduce ? 2 : 1);
}

void StageActionList::add_segment(int first_step, int end_step,
                                  std::initializer_list<BlockKind> kinds,
                                  std::initializer_list<int> offsets) {
  if (end_step <= first_step) return;
  PIPEPLAN_ASSERT(num_segments_ < kMaxSegments && kinds.size() == offsets.size() &&
                  kinds.size() <= 3);
  Segment seg;
  if (num_segments_ > 0) {
    const Segment& before = segments_[num_segments_ - 1];
    seg.first_block = before.first_block + before.steps * before.period;
    seg.first_action =
        before.first_action + static_cast<size_t>(before.steps) * before.actions_per_step;
  }
  seg.first_step = first_step;
  seg.steps = end_step - first_step;
  seg.period = static_cast<int>(kinds.size());
  int elem = 0;
  for (BlockKind kind : kinds) {
    seg.kinds[elem++] = kind;
    seg.actions_per_step += block_actions(kind);
  }
  std::copy(offsets.begin(), offsets.end(), seg.offsets);
  segments_[num_segments_++] = seg;
  num_blocks_ = seg.first_block + seg.steps * seg.period;
}

size_t StageActionList::first_action(int block_idx) const {
  if (block_idx >= num_blocks_) return size_ - (all_reduce_ ? 2 : 1);
  const Segment& seg = segments_[segment_of_block(block_idx)];
  const int rel = block_idx - seg.first_block;
  size_t idx = seg.first_action + static_cast<size_t>(rel / seg.period) * seg.actions_per_step;
  for (int elem = 0; elem < rel % seg.period; ++elem) idx += block_actions(seg.kinds[elem]);
  return idx;
}

Action StageActionList::operator[](size_t idx) const {
  const size_t compute_end = size_ - (all_reduce_ ? 2 : 1);
  if (idx >= compute_end)
    return {idx + 1 == size_ ? ActionKind::kOptimizerStep : ActionKind::kAllReduce, -1, -1};
  int seg_idx = 0;
  while (idx >= segments_[seg_idx].first_action + static_cast<size_t>(segments_[seg_idx].steps) *
                                                      segments_[seg_idx].actions_per_step)
    ++seg_idx;
  const Segment& seg = segments_[seg_idx];
  const size_t rel = idx - seg.first_action;
  const int step = seg.first_step + static_cast<int>(rel / seg.actions_per_step);
  int offset = static_cast<int>(rel % seg.actions_per_step);
  int elem = 0;
  while (offset >= block_actions(seg.kinds[elem])) offset -= block_actions(seg.kinds[elem++]);
  const BlockKind kind = seg.kinds[elem];
  const int mb = step + seg.offsets[elem];
  if (kind == BlockKind::kBackwardWeight) return {ActionKind::kBackwardWeight, mb, -1};
  const bool forward = kind == BlockKind::kForward;
  const int upstream = stage_idx_ - 1;
  const int downstream = stage_idx_ + 1;
  const int compute_offset = (forward ? has_in_ : has_out_) ? 1 : 0;
  if (offset < compute_offset)
    return forward ? Action{ActionKind::kRecvActivation, mb, upstream}
                   : Action{ActionKind::kRecvGradient, mb, downstream};
  if (offset == compute_offset) {
    const ActionKind compute = forward                        ? ActionKind::kForward
                               : kind == BlockKind::kBackward ? ActionKind::kBackward
                                                              : ActionKind::kBackwardInput;
    return {compute, mb, -1};
  }
  return forward ? Action{ActionKind::kSendActivation, mb, downstream}
                 : Action{ActionKind::kSendGradient, mb, upstream};
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
