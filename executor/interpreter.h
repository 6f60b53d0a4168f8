// The schedule interpreter: runs one rank's action list from plans/schedule.h, posting
// receives ahead so that transfers overlap compute, and timing every action.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "executor/comm.h"
#include "executor/data_parallel.h"
#include "executor/metrics.h"
#include "executor/stage.h"
#include "plans/plan.h"
#include "plans/schedule.h"
#include "runtime/optimizer.h"

namespace pipeplan::executor {

/// The samples of one pass on this rank. A forward-only pass may run its list `num_groups`
/// times back to back (requests): micro-batch k of group g is item g·rows.size() + k.
struct PassData {
  int64_t step = 0;           ///< training step (1-based), or the step an evaluation follows
  std::vector<int64_t> rows;  ///< samples in each micro-batch of a group (the last may be short)
  int64_t num_groups = 1;     ///< forward-only: groups run back to back; training: 1
  /// Stage 0 and the last stage: the (input, target) of an item, on the device.
  std::function<std::pair<torch::Tensor, torch::Tensor>(int64_t item)> load;
  /// Forward-only, last stage: what an item's output (the model's, e.g. logits) and target are
  /// for; called after the forward, the item's input already freed.
  std::function<void(int64_t item, const torch::Tensor& output, const torch::Tensor& target)>
      output;
};

/// What a training iteration needs besides the stage and its transfers.
struct TrainingParts {
  ReplicaSync& sync;                  ///< the replicas' gradient exchange and ZeRO-1's all-gather
  runtime::FlatOptimizer& optimizer;  ///< steps what this replica updates (ZeRO-1: its shard)
  runtime::LossScaler& scaler;
};

/// What a training iteration leaves for the step's metrics.
struct IterationOutcome {
  double loss_sum = 0;  ///< last stage: sum of its micro-batches' mean losses; else 0
  bool loss_finite = true;
  bool gradients_finite = true;  ///< false when the (unscaled) gradients hold a NaN or Inf
  bool step_applied = true;      ///< false when fp16 loss scaling skipped the step
};

/// Runs action lists for one rank: a training iteration, or forward-only passes (evaluation, and
/// serving's requests) as PyTorch's and Megatron's schedules run forward-only with a flag. Under
/// interleaved-1f1b every action names the local chunk it runs on; tensors received and to be
/// sent are kept per (chunk, micro-batch).
///
/// Receive policy: each kind (activations, gradients) keeps up to kRecvLookahead receives posted
/// ahead of the one the schedule waits for next: the first ones when the pass starts, the next
/// one each time one is consumed. A receive is waited only right before the forward or backward
/// that needs it, so its transfer overlaps the compute before it (Gloo moves data only once the
/// receiver has posted). Memory cost: kRecvLookahead extra boundary tensors per kind beyond the
/// in-flight activations. Sends are asynchronous (with blocking sends, 1f1b deadlocks: stage 0
/// sends its next activation while stage 1 sends a gradient back); at most kMaxOutstandingSends
/// are outstanding (a further send first waits for the oldest) and the rest are waited at the
/// end of the pass, so sent tensors never pile up (a forward-only pass would otherwise hold
/// every micro-batch's activation).
class Interpreter {
 public:
  /// The policy is plans/schedule.h's, which the memory model's communication buffers count.
  static constexpr int kRecvLookahead = pipeplan::kRecvLookahead;
  /// Outstanding sends at most; a further send first waits for the oldest, so a rank holds at
  /// most this many sent tensors.
  static constexpr int kMaxOutstandingSends = pipeplan::kMaxSendsInFlight;
  /// Groups after which a forward-only pass's transfer tags repeat: receives posted ahead never
  /// span that many, and tags stay below kMaxMicroBatches times this, far below INT_MAX.
  static constexpr int64_t kTagGroupCycle = 1024;

  /// `training`: what train() steps (sync exchanges the stage's gradients, with overlap from the
  /// hooks of each chunk's last weight-gradient action, and ZeRO-1's parameters); none for an
  /// interpreter that runs forward-only passes alone (serving).
  Interpreter(const Plan& plan, int rank, StageRuntime& stage, Comm& comm, Recorder& recorder,
              uint64_t seed, std::optional<TrainingParts> training);

  /// One training iteration of `actions` (this rank's list from expand_schedule) at learning
  /// rate `lr`. Timed into the recorder's current step. Needs the training parts.
  IterationOutcome train(const std::vector<Action>& actions, const PassData& data, double lr);
  /// A forward-only pass: `actions` (this rank's list from expand_forward_only for
  /// data.rows.size() micro-batches) run data.num_groups times back to back, receives posted
  /// ahead across groups, so that stage 0 starts group g + 1 once it has sent group g (a
  /// pipeline). The stage's layers run without a graph in the mode they are in; the last stage
  /// hands every item's output to data.output. With `timed_groups`, group g is the recorder's step
  /// g + 1 and its actions are timed once the recorder measures; otherwise nothing is recorded.
  void forward_only(const std::vector<Action>& actions, const PassData& data, bool timed_groups);

 private:
  // The receives of one kind in one group's order, and how far posting and waiting have got
  // over all groups (receive n is order[n % order.size()] of group n / order.size()).
  struct RecvQueue {
    std::vector<const Action*> order;
    size_t total = 0;
    size_t posted = 0;
    size_t waited = 0;
    // By local chunk: the sample shape and dtype of what arrives, from the plan (an activation
    // is the chunk's input, a gradient that of its output).
    std::vector<const std::vector<int64_t>*> sample_shapes;
    std::vector<torch::Dtype> dtypes;
  };
  void begin_pass(const std::vector<Action>& actions, const PassData& data);
  void post_ahead(RecvQueue& queue, const PassData& data);
  void receive(const Action& action, const PassData& data);
  // The item's (input, target) where the chunk is the model's first or last: the target only on
  // the last, the input only on the first (else `*input` stays the received activation).
  void load(const Action& action, const PassData& data, torch::Tensor* input,
            torch::Tensor* target);
  void forward(const Action& action, const PassData& data);
  void forward_without_graph(const Action& action, const PassData& data);
  void backward(const Action& action);         // kBackward, or zb-h1's kBackwardInput
  void backward_weight(const Action& action);  // zb-h1's kBackwardWeight
  void send(const Action& action);
  void optimizer_step(double lr, IterationOutcome* outcome);
  void run_training_action(const Action& action, const PassData& data, double lr,
                           IterationOutcome* outcome);
  void end_pass();
  // Runs `body`, timing it into the recorder as one event of `action`'s micro-batch and chunk
  // (and peer, for a send or receive wait) when timing.
  template <typename Body>
  void timed(TimelineKind kind, const Action& action, Body&& body);
  // Where `action`'s micro-batch of its chunk sits in received_ and outgoing_.
  size_t slot(const Action& action) const;
  // `action` of group `group` as its peer knows it: the micro-batch offset by the group's place
  // in the tag cycle.
  Action tagged(const Action& action, int64_t group) const;

  const Plan& plan_;
  int rank_;
  int replica_;
  StageRuntime& stage_;
  Comm& comm_;
  Recorder& recorder_;
  uint64_t seed_;
  std::optional<TrainingParts> training_;
  bool timing_ = false;
  RecvQueue queues_[2];                  // [0] activations, [1] gradients
  size_t num_micro_batches_ = 0;         // of a group of the current pass
  int64_t group_ = 0;                    // the group running
  std::vector<torch::Tensor> received_;  // by slot(): activation or gradient in
  std::vector<torch::Tensor> outgoing_;  // by slot(): activation or gradient out
  torch::Tensor loss_sum_;
};

}  // namespace pipeplan::executor
