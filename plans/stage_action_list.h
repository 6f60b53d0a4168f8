// The lazy form of one stage's action list (plans/schedule.h): blocks and actions computed
// from their indices, for players of long pipelines that hold no list (the simulator).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "plans/schedule.h"

namespace pipeplan {

/// The compute of one block: a whole backward, or zb-h1's two halves of one.
enum class BlockKind { kForward, kBackward, kBackwardInput, kBackwardWeight };

/// One micro-batch's forward with its transfers ([recv-act] F [send-act]), backward or B with
/// its own ([recv-grad] B [send-grad]), or W alone: the units stage_actions is made of.
struct ComputeBlock {
  BlockKind kind = BlockKind::kForward;
  int micro_batch = 0;
  int chunk = 0;  ///< local chunk (interleaved-1f1b), else 0
};

/// stage_actions(schedule, pp, stage_idx, num_micro_batches, replicas, V) without the list:
/// each action (or block of actions) is computed from its index, so that a player of long
/// pipelines (the simulator) holds no stage's list in memory. Equal to stage_actions element by
/// element (a test checks). The blocks form at most kMaxSegments runs, each a repeated pattern
/// of up to three blocks (1f1b's steady state: F(w+i) B(i)); an index is found by scanning them.
/// The kAllReduceStart actions (one per chunk, with replicas.overlap) sit inside the blocks
/// holding their chunk's last weight-gradient compute, after it: an index is first checked
/// against their V positions, then mapped to the list without them.
class StageActionList {
 public:
  StageActionList(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                  ReplicaActions replicas = {}, int virtual_stages = 1);
  /// The forward-only list of stage `stage_idx` (inference, one chunk per stage): equal to
  /// expand_forward_only(plan, num_micro_batches)'s list of the stage's rank, with peers as
  /// stage indices — gpipe's forward half, each micro-batch's [recv-act] F [send-act] in order,
  /// and no tail (no backward, all-reduce or optimizer step).
  static StageActionList forward_only(int pp, int stage_idx, int num_micro_batches);
  /// stage_actions(...).size(): the blocks' actions, then the tail: the all-reduce (when asked
  /// for), the optimizer step and the all-gather (when asked for).
  size_t size() const { return size_; }
  /// The index of the tail's first action: the number of the blocks' actions.
  size_t compute_end() const { return size_ - tail_size(); }
  /// The tail's length: 1 to 3; 0 for a forward-only list.
  size_t tail_size() const {
    return forward_only_ ? 0 : 1 + (replicas_.all_reduce ? 1 : 0) + (replicas_.all_gather ? 1 : 0);
  }
  /// Whether this is a forward-only list (forward_only()): forwards alone, no tail.
  bool is_forward_only() const { return forward_only_; }
  /// stage_actions(...)[idx]; idx < size().
  Action operator[](size_t idx) const;
  /// 2 · num_micro_batches (zb-h1: 3 · num_micro_batches; interleaved-1f1b: 2 · V · m;
  /// forward-only: num_micro_batches).
  int num_blocks() const { return num_blocks_; }
  /// Block `block_idx` < num_blocks(), in list order.
  ComputeBlock block(int block_idx) const {
    const Segment& seg = segments_[segment_of_block(block_idx)];
    const int rel = block_idx - seg.first_block;
    const BlockKind kind = seg.kinds[rel % seg.period];
    const int step = seg.first_step + rel / seg.period + seg.offsets[rel % seg.period];
    if (virtual_stages_ == 1) return {kind, step, 0};
    // interleaved-1f1b: `step` is the rank's forward (backward) count; see interleaved_warmup.
    const int round = step / pp_;
    const int micro_batch = (round / virtual_stages_) * pp_ + step % pp_;
    const int chunk = kind == BlockKind::kForward ? round % virtual_stages_
                                                  : virtual_stages_ - 1 - round % virtual_stages_;
    return {kind, micro_batch, chunk};
  }
  /// block(block_idx).kind alone: no chunk or micro-batch to work out (the simulator follows
  /// interleaved-1f1b's with counters).
  BlockKind block_kind(int block_idx) const {
    const Segment& seg = segments_[segment_of_block(block_idx)];
    return seg.kinds[(block_idx - seg.first_block) % seg.period];
  }
  /// A walk of the blocks in list order, for players: each block's kind and step without
  /// block()'s scan of the segments and its division.
  struct BlockCursor {
    int block = 0;  ///< the block's index; num_blocks() once past the last
    BlockKind kind = BlockKind::kForward;
    /// block().micro_batch with V = 1; interleaved-1f1b: the rank's count of blocks of its kind.
    int step = 0;
    int segment = 0, step_in_segment = 0, elem = 0;  ///< where the block is in the segments
  };
  /// A cursor at block 0.
  BlockCursor first_block() const {
    const Segment& seg = segments_[0];
    return {0, seg.kinds[0], seg.first_step + seg.offsets[0], 0, 0, 0};
  }
  /// Moves `cursor` (not past the last block) to the next block.
  void next_block(BlockCursor* cursor) const {
    ++cursor->block;
    const Segment* seg = &segments_[cursor->segment];
    if (++cursor->elem == seg->period) {
      cursor->elem = 0;
      if (++cursor->step_in_segment == seg->steps) {
        cursor->step_in_segment = 0;
        if (++cursor->segment == num_segments_) return;
        seg = &segments_[cursor->segment];
      }
    }
    cursor->kind = seg->kinds[cursor->elem];
    cursor->step = seg->first_step + cursor->step_in_segment + seg->offsets[cursor->elem];
  }
  /// The index in the list of block `block_idx`'s first action (size() − tail for num_blocks()).
  size_t first_action(int block_idx) const;
  /// Actions of one block of `kind` on this stage: the compute plus its transfers (for
  /// interleaved-1f1b, of a chunk with both neighbours; chunk_block_actions has the rest).
  int block_actions(BlockKind kind) const {
    switch (kind) {
      case BlockKind::kForward:
        return 1 + has_in_ + has_out_;
      case BlockKind::kBackward:
      case BlockKind::kBackwardInput:
        return 1 + has_out_ + has_in_;
      case BlockKind::kBackwardWeight:
        return 1;
    }
    return 1;
  }
  /// Whether local chunk `chunk` receives activations (and sends gradients) and sends activations
  /// (and receives gradients): every chunk but the model's first and last.
  bool chunk_has_input(int chunk) const { return stage_idx_ > 0 || chunk > 0; }
  bool chunk_has_output(int chunk) const {
    return stage_idx_ < pp_ - 1 || chunk < virtual_stages_ - 1;
  }
  /// Whether the list ends with an all-reduce before the optimizer step.
  bool all_reduce() const { return replicas_.all_reduce; }
  /// Whether the optimizer step is followed by an all-gather of the parameters (ZeRO-1).
  bool all_gather() const { return replicas_.all_gather; }

  /// Runs of repeated block patterns; gpipe has 2, 1f1b 3, zb-h1 up to 5.
  static constexpr int kMaxSegments = 6;

 private:
  // Steps [first_step, first_step + steps) of `period` blocks each: block e of step i is
  // kinds[e] of micro-batch i + offsets[e].
  struct Segment {
    int first_block = 0;
    size_t first_action = 0;
    int first_step = 0;
    int steps = 0;
    int period = 1;
    int actions_per_step = 0;
    BlockKind kinds[3] = {};
    int offsets[3] = {};
  };
  void add_segment(int first_step, int end_step, std::initializer_list<BlockKind> kinds,
                   std::initializer_list<int> offsets);
  // The segment holding block `block_idx` < num_blocks_ (a scan of at most kMaxSegments).
  int segment_of_block(int block_idx) const {
    int seg_idx = 0;
    while (seg_idx + 1 < num_segments_ && block_idx >= segments_[seg_idx + 1].first_block)
      ++seg_idx;
    return seg_idx;
  }

  // first_action and operator[] of the list without kAllReduceStart (`base` indices).
  size_t base_first_action(int block_idx) const;
  Action base_action(size_t base_idx) const;
  // interleaved-1f1b's base_action: the block holding base action idx, found by bisection.
  Action interleaved_action(size_t base_idx) const;
  // The last weight-gradient block of local chunk `chunk` (the backward, or W, of micro-batch
  // m − 1).
  int last_weight_block(int chunk) const;
  // interleaved-1f1b: blocks before `block_idx` of the chunk that has no input (stage 0's chunk
  // 0) and of the one without output (stage pp − 1's chunk V − 1), each a transfer short.
  int64_t missing_transfers(int block_idx) const;
  // Of the first `count` forwards (backwards) of the rank, those of local chunk `chunk`.
  int64_t forwards_of_chunk(int64_t count, int chunk) const;
  int64_t backwards_of_chunk(int64_t count, int chunk) const;

  int stage_idx_;
  int pp_;
  int virtual_stages_;
  int warmup_ = 0;  // forwards before the first backward
  bool has_in_;     // stage > 0: receives activations, sends gradients (interleaved: true)
  bool has_out_;    // stage < pp − 1 (interleaved: true)
  ReplicaActions replicas_;
  bool forward_only_ = false;
  int num_micro_batches_ = 0;
  int num_blocks_ = 0;
  int num_segments_ = 0;
  size_t size_ = 0;
  Segment segments_[kMaxSegments];
  // replicas_.overlap: the kAllReduceStarts, ordered by place: each one's base index (that of
  // the action it precedes), its index in the list, its chunk.
  struct ReduceStart {
    size_t base_idx = 0;
    size_t idx = 0;
    int chunk = 0;
  };
  std::vector<ReduceStart> reduce_starts_;
};

}  // namespace pipeplan
