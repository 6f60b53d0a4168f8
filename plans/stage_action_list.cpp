// The lazy action list of one stage: segments of repeated block patterns, interleaved-1f1b's
// counts mapped to chunks and micro-batches, transfers missing at the model's ends.
#include "plans/stage_action_list.h"

#include <algorithm>

#include "common/error.h"

namespace pipeplan {

StageActionList::StageActionList(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                                 ReplicaActions replicas, int virtual_stages)
    : stage_idx_(stage_idx),
      pp_(pp),
      virtual_stages_(virtual_stages),
      has_in_(stage_idx > 0 || virtual_stages > 1),
      has_out_(stage_idx < pp - 1 || virtual_stages > 1),
      replicas_(replicas),
      num_micro_batches_(num_micro_batches) {
  PIPEPLAN_ASSERT(pp >= 1 && stage_idx >= 0 && stage_idx < pp && num_micro_batches >= 1);
  PIPEPLAN_ASSERT(!replicas.overlap || replicas.all_reduce, "overlap needs the all-reduce");
  PIPEPLAN_ASSERT((schedule == Schedule::kInterleaved1F1B) == (virtual_stages > 1),
                  "interleaved-1f1b needs V >= 2 chunks, the other schedules one");
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
    case Schedule::kInterleaved1F1B: {
      // 1f1b's three runs over the rank's m·V forwards and backwards; block() maps each count
      // to its chunk and micro-batch.
      PIPEPLAN_ASSERT(pp >= 2 && m % pp == 0, "interleaved-1f1b needs pp >= 2 and m a multiple");
      const int total = m * virtual_stages;
      warmup_ = interleaved_warmup(pp, virtual_stages, stage_idx, m);
      add_segment(0, warmup_, {K::kForward}, {0});
      add_segment(0, total - warmup_, {K::kForward, K::kBackward}, {warmup_, 0});
      add_segment(total - warmup_, total, {K::kBackward}, {0});
      break;
    }
  }
  const Segment& last = segments_[num_segments_ - 1];  // m >= 1: some segment is not empty
  size_ = last.first_action + static_cast<size_t>(last.steps) * last.actions_per_step -
          static_cast<size_t>(missing_transfers(num_blocks_)) + tail_size();
  if (!replicas_.overlap) return;
  for (int chunk = 0; chunk < virtual_stages_; ++chunk) {
    // After the compute: past the block's gradient receive (a backward of a chunk with output).
    const int block_idx = last_weight_block(chunk);
    const BlockKind kind = block_kind(block_idx);
    const bool receives = kind != BlockKind::kBackwardWeight &&
                          (virtual_stages_ > 1 ? chunk_has_output(chunk) : has_out_);
    reduce_starts_.push_back({base_first_action(block_idx) + (receives ? 2 : 1), 0, chunk});
  }
  std::sort(reduce_starts_.begin(), reduce_starts_.end(),
            [](const ReduceStart& a, const ReduceStart& b) { return a.base_idx < b.base_idx; });
  for (size_t idx = 0; idx < reduce_starts_.size(); ++idx)
    reduce_starts_[idx].idx = reduce_starts_[idx].base_idx + idx;
  size_ += reduce_starts_.size();
}

int StageActionList::last_weight_block(int chunk) const {
  const int m = num_micro_batches_;
  int block_idx = num_blocks_ - 1;  // gpipe, 1f1b: B(m − 1); zb-h1: W(m − 1)
  if (virtual_stages_ > 1) {
    // interleaved-1f1b: the rank's backward k of micro-batch m − 1 of the chunk (see
    // interleaved_warmup) is in the last round of its chunk, its last slot; backward k is block
    // w + 2k + 1 in the steady state and total + k in the cool-down.
    const int total = m * virtual_stages_;
    const int round = (m / pp_ - 1) * virtual_stages_ + virtual_stages_ - 1 - chunk;
    const int k = round * pp_ + pp_ - 1;
    block_idx = k < total - warmup_ ? warmup_ + 2 * k + 1 : total + k;
  }
  const ComputeBlock block = this->block(block_idx);
  PIPEPLAN_ASSERT(
      block.micro_batch == m - 1 && block.chunk == chunk &&
          (block.kind == BlockKind::kBackward || block.kind == BlockKind::kBackwardWeight),
      "chunk ", chunk, "'s last weight-gradient block is not block ", block_idx);
  return block_idx;
}

StageActionList StageActionList::forward_only(int pp, int stage_idx, int num_micro_batches) {
  StageActionList list(Schedule::kGpipe, pp, stage_idx, num_micro_batches);
  // gpipe's first segment is the forwards in micro-batch order; drop its backwards and tail.
  list.forward_only_ = true;
  list.num_segments_ = 1;
  const Segment& forwards = list.segments_[0];
  list.num_blocks_ = forwards.steps * forwards.period;
  list.size_ =
      forwards.first_action + static_cast<size_t>(forwards.steps) * forwards.actions_per_step;
  return list;
}

int64_t StageActionList::forwards_of_chunk(int64_t count, int chunk) const {
  return interleaved_chunk_slots(count - int64_t{chunk} * pp_, pp_, virtual_stages_);
}

int64_t StageActionList::backwards_of_chunk(int64_t count, int chunk) const {
  return interleaved_chunk_slots(count - int64_t{virtual_stages_ - 1 - chunk} * pp_, pp_,
                                 virtual_stages_);
}

int64_t StageActionList::missing_transfers(int block_idx) const {
  if (virtual_stages_ == 1) return 0;
  // Forwards and backwards among the first block_idx blocks: warm-up forwards, then pairs.
  const int total = num_blocks_ / 2;
  int64_t forwards = 0, backwards = 0;
  if (block_idx <= warmup_) {
    forwards = block_idx;
  } else if (block_idx <= 2 * total - warmup_) {
    const int steady = block_idx - warmup_;
    forwards = warmup_ + (steady + 1) / 2;
    backwards = steady / 2;
  } else {
    forwards = total;
    backwards = block_idx - total;
  }
  int64_t missing = 0;
  if (stage_idx_ == 0) missing += forwards_of_chunk(forwards, 0) + backwards_of_chunk(backwards, 0);
  if (stage_idx_ == pp_ - 1)
    missing += forwards_of_chunk(forwards, virtual_stages_ - 1) +
               backwards_of_chunk(backwards, virtual_stages_ - 1);
  return missing;
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
  if (block_idx >= num_blocks_) return compute_end();
  const size_t base_idx = base_first_action(block_idx);
  size_t idx = base_idx;
  for (const ReduceStart& start : reduce_starts_) idx += start.base_idx <= base_idx ? 1 : 0;
  return idx;
}

size_t StageActionList::base_first_action(int block_idx) const {
  const Segment& seg = segments_[segment_of_block(block_idx)];
  const int rel = block_idx - seg.first_block;
  size_t idx = seg.first_action + static_cast<size_t>(rel / seg.period) * seg.actions_per_step;
  for (int elem = 0; elem < rel % seg.period; ++elem) idx += block_actions(seg.kinds[elem]);
  return idx - static_cast<size_t>(missing_transfers(block_idx));
}

Action StageActionList::operator[](size_t idx) const {
  if (idx >= compute_end()) {
    size_t tail_idx = idx - compute_end();
    if (!replicas_.all_reduce) ++tail_idx;  // the tail is [all-reduce], step, [all-gather]
    constexpr ActionKind kTail[] = {ActionKind::kAllReduce, ActionKind::kOptimizerStep,
                                    ActionKind::kAllGather};
    return {kTail[tail_idx], -1, -1};
  }
  size_t before = 0;  // kAllReduceStarts before idx
  for (const ReduceStart& start : reduce_starts_) {
    if (start.idx == idx) return {ActionKind::kAllReduceStart, -1, -1, start.chunk};
    before += start.idx < idx ? 1 : 0;
  }
  return base_action(idx - before);
}

Action StageActionList::base_action(size_t idx) const {
  if (virtual_stages_ > 1) return interleaved_action(idx);
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

Action StageActionList::interleaved_action(size_t idx) const {
  int low = 0, high = num_blocks_ - 1;  // the last block whose first action is at most idx
  while (low < high) {
    const int mid = low + (high - low + 1) / 2;
    if (base_first_action(mid) <= idx)
      low = mid;
    else
      high = mid - 1;
  }
  const ComputeBlock block = this->block(low);
  const int offset = static_cast<int>(idx - base_first_action(low));
  const int mb = block.micro_batch;
  const int v = block.chunk;
  const int upstream = (stage_idx_ + pp_ - 1) % pp_;
  const int downstream = (stage_idx_ + 1) % pp_;
  if (block.kind == BlockKind::kForward) {
    const int compute_offset = chunk_has_input(v) ? 1 : 0;
    if (offset < compute_offset) return {ActionKind::kRecvActivation, mb, upstream, v};
    if (offset == compute_offset) return {ActionKind::kForward, mb, -1, v};
    return {ActionKind::kSendActivation, mb, downstream, v};
  }
  const int compute_offset = chunk_has_output(v) ? 1 : 0;
  if (offset < compute_offset) return {ActionKind::kRecvGradient, mb, downstream, v};
  if (offset == compute_offset) return {ActionKind::kBackward, mb, -1, v};
  return {ActionKind::kSendGradient, mb, upstream, v};
}

}  // namespace pipeplan
