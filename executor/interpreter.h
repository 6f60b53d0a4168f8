// The schedule interpreter: runs one rank's action list from plans/schedule.h, posting
// receives ahead so that transfers overlap compute, and timing every action.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
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

/// The samples of one pass on this rank.
struct PassData {
  int64_t step = 0;           ///< training step (1-based), or the step an evaluation follows
  std::vector<int64_t> rows;  ///< samples in each micro-batch (the last may be short in evaluation)
  /// Stage 0 and the last stage: the (input, target) of a micro-batch, on the device.
  std::function<std::pair<torch::Tensor, torch::Tensor>(int micro_batch)> load;
};

/// What a training iteration leaves for the step's metrics.
struct IterationOutcome {
  double loss_sum = 0;  ///< last stage: sum of its micro-batches' mean losses; else 0
  bool loss_finite = true;
  bool gradients_finite = true;  ///< false when the (unscaled) gradients hold a NaN or Inf
  bool step_applied = true;      ///< false when fp16 loss scaling skipped the step
};

/// Runs action lists for one rank. Under interleaved-1f1b every action names the local chunk it
/// runs on; tensors received and to be sent are kept per (chunk, micro-batch).
///
/// Receive policy: each kind (activations, gradients) keeps up to kRecvLookahead receives posted
/// ahead of the one the schedule waits for next: the first ones when the pass starts, the next
/// one each time one is consumed. A receive is waited only right before the forward or backward
/// that needs it, so its transfer overlaps the compute before it (Gloo moves data only once the
/// receiver has posted). Memory cost: kRecvLookahead extra boundary tensors per kind beyond the
/// in-flight activations. Sends are asynchronous (with blocking sends, 1f1b deadlocks: stage 0
/// sends its next activation while stage 1 sends a gradient back); at most kMaxOutstandingSends
/// are outstanding (a further send first waits for the oldest) and the rest are waited at the
/// end of the pass, so sent tensors never pile up (a forward-only evaluation pass would
/// otherwise hold every test micro-batch's activation).
class Interpreter {
 public:
  /// The policy is plans/schedule.h's, which the memory model's communication buffers count.
  static constexpr int kRecvLookahead = pipeplan::kRecvLookahead;
  /// Outstanding sends at most; a further send first waits for the oldest, so a rank holds at
  /// most this many sent tensors.
  static constexpr int kMaxOutstandingSends = pipeplan::kMaxSendsInFlight;

  /// `sync` exchanges the stage's gradients (kAllReduce, and the hooks of each chunk's last
  /// weight-gradient action with overlap) and ZeRO-1's parameters (kAllGather); `optimizer`
  /// steps what this replica updates (ZeRO-1: its shard).
  Interpreter(const Plan& plan, int rank, StageRuntime& stage, Comm& comm, ReplicaSync& sync,
              runtime::FlatOptimizer& optimizer, runtime::LossScaler& scaler, Recorder& recorder,
              uint64_t seed);

  /// One training iteration of `actions` (this rank's list from expand_schedule) at learning
  /// rate `lr`. Timed into the recorder's current step.
  IterationOutcome train(const std::vector<Action>& actions, const PassData& data, double lr);
  /// A forward-only pass (expand_forward_only); the last stage adds correct predictions and
  /// predictions made to `correct` and `total`. Not timed. Under interleaved-1f1b a pass of more
  /// than kRecvLookahead + kMaxOutstandingSends micro-batches deadlocks (the chunk-by-chunk order
  /// has stage pp − 1 send all of chunk v before stage 0 posts receives beyond its lookahead):
  /// the caller splits longer evaluations into passes (Trainer does).
  void evaluate(const std::vector<Action>& actions, const PassData& data, int64_t* correct,
                int64_t* total);

 private:
  // The receives of one kind in schedule order, and how far posting and waiting have got.
  struct RecvQueue {
    std::vector<const Action*> order;
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
  void forward(const Action& action, const PassData& data);
  void backward(const Action& action);  // kBackward, or zb-h1's kBackwardInput
  void backward_weight(const Action& action);  // zb-h1's kBackwardWeight
  void send(const Action& action);
  void optimizer_step(double lr, IterationOutcome* outcome);
  void end_pass();
  // Runs `body`, timing it into the recorder as one event of `action`'s micro-batch and chunk
  // (and peer, for a send or receive wait) when training.
  template <typename Body>
  void timed(TimelineKind kind, const Action& action, Body&& body);
  // Where `action`'s micro-batch of its chunk sits in received_ and outgoing_.
  size_t slot(const Action& action) const;

  const Plan& plan_;
  int rank_;
  int replica_;
  StageRuntime& stage_;
  Comm& comm_;
  ReplicaSync& sync_;
  runtime::FlatOptimizer& optimizer_;
  runtime::LossScaler& scaler_;
  Recorder& recorder_;
  uint64_t seed_;
  bool timing_ = false;
  RecvQueue queues_[2];                    // [0] activations, [1] gradients
  size_t num_micro_batches_ = 0;           // of the current pass
  std::vector<torch::Tensor> received_;    // by slot(): activation or gradient in
  std::vector<torch::Tensor> outgoing_;    // by slot(): activation or gradient out
  torch::Tensor loss_sum_;
  bool evaluating_ = false;
  int64_t* correct_ = nullptr;
  int64_t* total_ = nullptr;
};

}  // namespace pipeplan::executor
