// Schedule expansion: a plan -> the ordered action list of every rank for one iteration.
// The executor interprets exactly these lists and the simulator plays them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "plans/plan.h"

namespace pipeplan {

/// What a rank does. Sends are asynchronous: the rank goes on without waiting for its peer to
/// receive, except that it keeps at most kMaxSendsInFlight outstanding (a further send first
/// waits for the oldest) and that on Gloo a send call whose receive is already posted writes
/// the message itself (plans/comm_backend.h); a receive blocks the rank's next compute until
/// the data has arrived.
enum class ActionKind {
  kRecvActivation,  ///< input activation of a micro-batch, from the previous stage
  kForward,
  kSendActivation,  ///< output activation, to the next stage
  kRecvGradient,    ///< gradient of the output, from the next stage
  kBackward,
  kSendGradient,  ///< gradient of the input, to the previous stage
  kAllReduce,     ///< average gradients over the stage's replicas (dp > 1 only)
  kOptimizerStep,
  /// zb-h1's B: the gradient of the stage input (sent upstream next) and of every layer output
  /// inside the stage, kept with the micro-batch's activations until its W.
  kBackwardInput,
  /// zb-h1's W: the weight gradients of a micro-batch whose B has run; frees its activations.
  kBackwardWeight,
  /// ZeRO-1, after the optimizer step: every replica gathers the others' updated parameter
  /// shards (dp > 1 with data_parallel.zero = 1 only).
  kAllGather,
  /// data_parallel.overlap (dp > 1): right after the compute of a chunk's last weight-gradient
  /// action (the backward, or zb-h1's W, of micro-batch m − 1), the point by which every gradient
  /// bucket of the chunk has started its all-reduce (ZeRO-1: reduce-scatter). The buckets whose
  /// gradients were complete earlier started inside that compute, from hooks; this action starts
  /// the rest and goes on without waiting (kAllReduce waits). One per chunk, in `chunk`.
  kAllReduceStart,
};

/// How many transfers a rank keeps going at once — the executor's policy, which the memory
/// model's communication buffers count (planner/memory_model.h):
/// receives of each kind (activations, gradients) posted ahead of the one the rank waits for
/// next; each holds a buffer of one boundary tensor from the moment it is posted.
inline constexpr int kRecvLookahead = 2;
/// Sends in flight at most; a further send first waits for the oldest. Each keeps the tensor
/// it sends alive until it completes.
inline constexpr int kMaxSendsInFlight = 2;

/// One action. `micro_batch` is -1 for kAllReduce, kAllReduceStart, kOptimizerStep and
/// kAllGather; `peer` is the rank (or, from stage_actions, the stage) on the other end of a send
/// or receive, else -1; `chunk` the rank's local chunk the action belongs to (interleaved-1f1b:
/// v of global chunk v·pp + stage; 0 under the other schedules and for kAllReduce,
/// kOptimizerStep and kAllGather). A transfer's chunk is
/// this rank's: a send-act of chunk v on the last stage arrives as chunk v + 1 of stage 0.
struct Action {
  ActionKind kind = ActionKind::kForward;
  int micro_batch = -1;
  int peer = -1;
  int chunk = 0;
  bool operator==(const Action& other) const {
    return kind == other.kind && micro_batch == other.micro_batch && peer == other.peer &&
           chunk == other.chunk;
  }
};

/// interleaved-1f1b's order on stage s of pp with V chunks and m micro-batches (m a multiple of
/// pp), after Megatron-LM: the rank's k-th forward is of local chunk (k / pp) mod V and
/// micro-batch ⌊k / (pp·V)⌋·pp + k mod pp, its k-th backward of chunk V − 1 − (k / pp) mod V
/// and the same micro-batch; w = min(2·(pp − s − 1) + (V − 1)·pp, m·V) warm-up forwards, then
/// 1f1b's alternation F(w + i) B(i), then the cool-down backwards.
///
///   pp=2, V=2, m=4 (F3v1: micro-batch 3 of local chunk 1)
///   stage 0: F0 F1 F0v1 F1v1 F2 B0v1 F3 B1v1 F2v1 B0 F3v1 B1 B2v1 B3v1 B2 B3
///   stage 1:    F0 F1 F0v1 B0v1 F1v1 B1v1 F2 B0 F3 B1 F2v1 B2v1 F3v1 B3v1 B2 B3
inline int interleaved_warmup(int pp, int virtual_stages, int stage_idx, int num_micro_batches) {
  return std::min(2 * (pp - stage_idx - 1) + (virtual_stages - 1) * pp,
                  num_micro_batches * virtual_stages);
}

/// ℓ_{s,v}, interleaved-1f1b's most micro-batches of local chunk v that stage s holds past their
/// forward and before their backward: min(m, h(D)) with D = w + 1 + (V − 1 − 2v)·pp and
/// h(t) = ⌊t / (pp·V)⌋·pp + min(t mod (pp·V), pp). Derivation: once the rank has run n forwards
/// and j backwards, chunk v has run h(n − v·pp) forwards and h(j − (V − 1 − v)·pp) backwards
/// (h counts the first t slots of a period of pp·V whose first pp belong to the chunk). Through
/// the steady state n = j + w + 1 just after each forward, so chunk v holds the chunk's slots in
/// a window of D consecutive slots, at most h(D) (a window starting at a period). Summed over the
/// chunks it is the rank's activation peak the memory model counts (an upper bound: the chunks
/// need not peak together). schedule_test finds it equal to each chunk's peak in every list of
/// pp <= 8, V <= 4, m <= 32.
int interleaved_in_flight(int pp, int virtual_stages, int stage_idx, int chunk,
                          int num_micro_batches);

/// The most chunk micro-batches stage s holds at once over all its chunks: min(w + 1, m·V), w
/// warm-up forwards and one more in each steady step (each backward then frees one). Chunks
/// peak at different times, so this is below Σ_v ℓ_{s,v} (up to 1.5× in schedule_test's cases);
/// with equal chunks, (this) · A_chunk is the rank's activation peak.
inline int interleaved_rank_in_flight(int pp, int virtual_stages, int stage_idx,
                                      int num_micro_batches) {
  return std::min(interleaved_warmup(pp, virtual_stages, stage_idx, num_micro_batches) + 1,
                  num_micro_batches * virtual_stages);
}

/// h(t) of interleaved_in_flight: of the first `slots` forwards (or backwards) of a rank, those
/// of one chunk whose pp-slot share of each pp·V round starts at slot 0; 0 for slots <= 0.
int64_t interleaved_chunk_slots(int64_t slots, int pp, int virtual_stages);

/// What a stage's list does for data parallelism (dp > 1): kAllReduce before the optimizer
/// step, a kAllReduceStart after each chunk's last weight-gradient compute (overlap), kAllGather
/// after the step (ZeRO-1). All false for dp = 1.
struct ReplicaActions {
  bool all_reduce = false;
  bool overlap = false;  ///< needs all_reduce
  bool all_gather = false;
};

/// The replica actions of `plan`'s lists: dp > 1, data_parallel.overlap and zero = 1.
ReplicaActions replica_actions(const Plan& plan);

/// The actions of stage `stage_idx` of a `pp`-stage pipeline over `num_micro_batches`, with
/// peers given as stage indices; ends with kAllReduce when `replicas.all_reduce`, then
/// kOptimizerStep, then kAllGather when `replicas.all_gather` (ZeRO-1).
///
/// The data-parallel actions. Under ZeRO-1 kAllReduce reduce-scatters instead of all-reducing
/// (each replica gets the sum of its shard). With `replicas.overlap` the all-reduce of each
/// gradient bucket (plans/buckets.h) starts inside the last weight-gradient compute of its chunk
/// (the backward, or zb-h1's W, of micro-batch m − 1) as soon as the bucket's gradients are
/// complete, the kAllReduceStart of the chunk right after that compute (before its gradient
/// send) starts the chunk's remaining buckets, and kAllReduce waits for them all; without
/// overlap kAllReduce runs every bucket then. Under interleaved-1f1b a chunk's last backward
/// comes in the cool-down, so its buckets overlap the backwards of the chunks after it:
///
///   interleaved-1f1b, pp=2, V=2, m=2, stage 1, overlap (ar-start v1: chunk 1's start)
///   F0 F1 F0v1 B0v1 F1v1 B1v1 ar-start v1 recv-grad 0 B0 recv-grad 1 B1 ar-start all-reduce step
///   (activation transfers and gradient sends left out)
///
/// gpipe, stage s:  F0 F1 .. F(m-1)  B0 B1 .. B(m-1)            in flight: m
/// 1f1b,  stage s:  w = min(pp-s-1, m) warm-up forwards, then alternating F(w+i) B(i),
///                  then the remaining backwards                 in flight: min(m, pp-s)
/// zb-h1, stage s:  1f1b's order with each B split into Bi (input gradient) and W (weight
///                  gradients); W(i-s) follows Bi(i) once i >= s, the s deferred Ws close the
///                  list, filling the cool-down that 1f1b leaves idle on later stages
///                  in flight: min(m, pp) activations, min(m, s+1) of them past their Bi
///
///   1f1b, pp=3, m=4   time ->
///   stage 0: F0 F1 F2 B0 F3 B1 B2 B3
///   stage 1:    F0 F1 B0 F2 B1 F3 B2 B3
///   stage 2:       F0 B0 F1 B1 F2 B2 F3 B3
///
///   zb-h1, pp=3, m=4  (Bi and W each about half a backward)
///   stage 0: F0 F1 F2 Bi0 W0 F3 Bi1 W1 Bi2 W2 Bi3 W3
///   stage 1:    F0 F1 Bi0 F2 Bi1 W0 F3 Bi2 W1 Bi3 W2 W3
///   stage 2:       F0 Bi0 F1 Bi1 F2 Bi2 W0 F3 Bi3 W1 W2 W3
/// Each F is preceded by its activation receive (stage > 0) and followed by its send
/// (stage < pp-1); each B or Bi likewise with gradients in the other direction; W has none.
/// interleaved-1f1b: see interleaved_warmup; `virtual_stages` is V (1 for the other schedules).
/// Peers of the last stage's activation sends and the first stage's gradient sends wrap around
/// (stage pp − 1 sends chunk v's output to stage 0's chunk v + 1).
std::vector<Action> stage_actions(Schedule schedule, int pp, int stage_idx, int num_micro_batches,
                                  ReplicaActions replicas, int virtual_stages = 1);

/// The actions of every rank of `plan` (indexed by rank), peers as ranks of the same replica.
std::vector<std::vector<Action>> expand_schedule(const Plan& plan);

/// Short text for logs and tests: "F3", "B0", "Bi0", "W0", "recv-act 2 <- r1", "ar-start",
/// "all-reduce", "step", "all-gather"; an action of local chunk v > 0 adds "v<chunk>" after its
/// micro-batch ("F3v1", "send-act 3v1 -> r0", "ar-start v1").
std::string to_string(const Action& action);

/// A forward-only pass over `num_micro_batches` (evaluation): for every rank of `plan`, each
/// micro-batch's receive (stage > 0), forward, and send (stage < pp-1), in micro-batch order
/// (interleaved-1f1b: rounds of pp micro-batches, each through local chunk 0, then 1, ..., as
/// its training order runs forwards; without chunks that is micro-batch order). No backward,
/// all-reduce or optimizer step. Peers are ranks of the same replica.
std::vector<std::vector<Action>> expand_forward_only(const Plan& plan, int num_micro_batches);

}  // namespace pipeplan
