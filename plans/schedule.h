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

/// The actions of every rank of `plan` (indexed by rank), peers as ranks of the same replica.
std::vector<std::vector<Action>> expand_schedule(const Plan& plan);

/// Short text for logs and tests: "F3", "B0", "recv-act 2 <- r1", "all-reduce", "step".
std::string to_string(const Action& action);

/// A forward-only pass over `num_micro_batches` (evaluation): for every rank of `plan`, each
/// micro-batch's receive (stage > 0), forward, and send (stage < pp-1), in micro-batch order;
/// no backward, all-reduce or optimizer step. Peers are ranks of the same replica.
std::vector<std::vector<Action>> expand_forward_only(const Plan& plan, int num_micro_batches);

}  // namespace pipeplan
