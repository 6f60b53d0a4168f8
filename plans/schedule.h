// Schedule expansion: a plan -> the ordered action list of every rank for one iteration.
// The executor interprets exactly these lists and the simulator plays them.
#pragma once

#include <string>
#include <vector>

#include "plans/plan.h"

namespace pipeplan {

/// What a rank does. Sends are asynchronous: the rank never waits for its peer to receive,
/// though on Gloo the send call itself writes the message (plans/comm_backend.h); a receive
/// blocks the rank's next compute until the data has arrived.
enum class ActionKind {
  kRecvActivation,  ///< input activation of a micro-batch, from the previous stage
  kForward,
  kSendActivation,  ///< output activation, to the next stage
  kRecvGradient,    ///< gradient of the output, from the next stage
  kBackward,
  kSendGradient,  ///< gradient of the input, to the previous stage
  kAllReduce,     ///< average gradients over the stage's replicas (dp > 1 only)
  kOptimizerStep,
};

/// How many transfers a rank keeps going at once — the executor's policy, which the memory
/// model's communication buffers count (planner/memory_model.h):
/// receives of each kind (activations, gradients) posted ahead of the one the rank waits for
/// next; each holds a buffer of one boundary tensor from the moment it is posted.
inline constexpr int kRecvLookahead = 2;
/// Sends in flight at most; a further send first waits for the oldest. Each keeps the tensor
/// it sends alive until it completes.
inline constexpr int kMaxSendsInFlight = 2;

/// One action. `micro_batch` is -1 for kAllReduce and kOptimizerStep; `peer` is the rank (or,
/// from stage_actions, the stage) on the other end of a send or receive, else -1.
struct Action {
  ActionKind kind = ActionKind::kForward;
  int micro_batch = -1;
  int peer = -1;
  bool operator==(const Action& other) const {
    return kind == other.kind && micro_batch == other.micro_batch && peer == other.peer;
  }
};

/// The actions of stage `stage_idx` of a `pp`-stage pipeline over `num_micro_batches`, with
/// peers given as stage indices; ends with kAllReduce when `all_reduce`, then kOptimizerStep.
///
/// gpipe, stage s:  F0 F1 .. F(m-1)  B0 B1 .. B(m-1)            in flight: m
/// 1f1b,  stage s:  w = min(pp-s-1, m) warm-up forwards, then alternating F(w+i) B(i),
///                  then the remaining backwards                 in flight: min(m, pp-s)
///
///   1f1b, pp=3, m=4   time ->
///   stage 0: F0 F1 F2 B0 F3 B1 B2 B3
///   stage 1:    F0 F1 B0 F2 B1 F3 B2 B3
///   stage 2:       F0 B0 F1 B1 F2 B2 F3 B3
/// Each F is preceded by its activation receive (stage > 0) and followed by its send
/// (stage < pp-1); each B likewise with gradients in the other direction.
std::vector<Action> stage_actions(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                                  bool all_reduce);

/// One micro-batch's forward with its transfers ([recv-act] F [send-act]) or backward with its
/// own ([recv-grad] B [send-grad]): the unit stage_actions repeats, 2m times per stage.
struct ComputeBlock {
  bool forward = true;
  int micro_batch = 0;
};

/// stage_actions(schedule, pp, stage_idx, num_micro_batches, all_reduce) without the list:
/// each action (or block of actions) is computed from its index, so that a player of long
/// pipelines (the simulator) holds no stage's list in memory. Equal to stage_actions element by
/// element (a test checks).
class StageActionList {
 public:
  StageActionList(Schedule schedule, int pp, int stage_idx, int num_micro_batches, bool all_reduce);
  /// stage_actions(...).size(): num_blocks() · block_size(), then the all-reduce (when asked
  /// for) and the optimizer step.
  size_t size() const { return size_; }
  /// stage_actions(...)[idx]; idx < size().
  Action operator[](size_t idx) const;
  /// 2 · num_micro_batches.
  int num_blocks() const { return 2 * num_micro_batches_; }
  /// Actions per block: 1 + (stage_idx > 0) + (stage_idx < pp − 1).
  int block_size() const { return block_size_; }
  /// Block `block_idx` < num_blocks(), in list order.
  ComputeBlock block(int block_idx) const {
    const int m = num_micro_batches_;
    if (schedule_ == Schedule::kGpipe || block_idx < warmup_ || block_idx >= steady_end_)
      return block_idx < m ? ComputeBlock{true, block_idx} : ComputeBlock{false, block_idx - m};
    const int step = block_idx - warmup_;  // steady state: F(warmup + i), B(i), ...
    return step % 2 == 0 ? ComputeBlock{true, warmup_ + step / 2} : ComputeBlock{false, step / 2};
  }
  /// Whether the list ends with an all-reduce before the optimizer step.
  bool all_reduce() const { return all_reduce_; }

 private:
  Schedule schedule_;
  int pp_;
  int stage_idx_;
  int num_micro_batches_;
  int warmup_;      // 1f1b: forwards before the first backward
  int steady_end_;  // 1f1b: first block after the last forward
  int block_size_;
  bool all_reduce_;
  size_t size_;
};

/// The actions of every rank of `plan` (indexed by rank), peers as ranks of the same replica.
std::vector<std::vector<Action>> expand_schedule(const Plan& plan);

/// Short text for logs and tests: "F3", "B0", "recv-act 2 <- r1", "all-reduce", "step".
std::string to_string(const Action& action);

/// A forward-only pass over `num_micro_batches` (evaluation): for every rank of `plan`, each
/// micro-batch's receive (stage > 0), forward, and send (stage < pp-1), in micro-batch order;
/// no backward, all-reduce or optimizer step. Peers are ranks of the same replica.
std::vector<std::vector<Action>> expand_forward_only(const Plan& plan, int num_micro_batches);

}  // namespace pipeplan
