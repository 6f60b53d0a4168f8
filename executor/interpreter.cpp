// The schedule interpreter: one rank's actions, receives posted ahead, every action timed.
#include "executor/interpreter.h"

#include <cmath>

#include "common/error.h"
#include "runtime/device.h"

namespace pipeplan::executor {
namespace {

int queue_index(ActionKind kind) { return kind == ActionKind::kRecvActivation ? 0 : 1; }

// What the stage-wide timed events (all-reduce, optimizer, all-gather, the end-of-pass send-wait)
// stand for: no micro-batch, no peer.
const Action kWholeStage{ActionKind::kOptimizerStep, /*micro_batch=*/-1, /*peer=*/-1, /*chunk=*/0};

}  // namespace

Interpreter::Interpreter(const Plan& plan, int rank, StageRuntime& stage, Comm& comm,
                         ReplicaSync& sync, runtime::FlatOptimizer& optimizer,
                         runtime::LossScaler& scaler, Recorder& recorder, uint64_t seed)
    : plan_(plan),
      rank_(rank),
      replica_(plan.ranks.at(rank).replica),
      stage_(stage),
      comm_(comm),
      sync_(sync),
      optimizer_(optimizer),
      scaler_(scaler),
      recorder_(recorder),
      seed_(seed) {
  for (int chunk = 0; chunk < stage_.num_chunks(); ++chunk) {
    const StagePlan& me = plan_.stages.at(chunk_index(plan_.pp, stage_.stage(), chunk));
    queues_[0].sample_shapes.push_back(&me.input_sample_shape);  // activations into the chunk
    queues_[0].dtypes.push_back(boundary_dtype(me.input_dtype, "dtype"));
    queues_[1].sample_shapes.push_back(&me.output_sample_shape);  // gradients of its output
    queues_[1].dtypes.push_back(boundary_dtype(me.output_dtype, "dtype"));
  }
}

template <typename Body>
void Interpreter::timed(TimelineKind kind, const Action& action, Body&& body) {
  if (!timing_) {
    body();
    return;
  }
  const double start_ms = recorder_.now_ms();
  body();
  runtime::wait_for_stream(stage_.device());
  const bool transfer = kind == TimelineKind::kSend || kind == TimelineKind::kRecvWait;
  recorder_.record(kind, action.micro_batch, start_ms, recorder_.now_ms(),
                   transfer ? action.peer : -1, action.chunk);
}

size_t Interpreter::slot(const Action& action) const {
  return static_cast<size_t>(action.chunk) * num_micro_batches_ +
         static_cast<size_t>(action.micro_batch);
}

void Interpreter::begin_pass(const std::vector<Action>& actions, const PassData& data) {
  num_micro_batches_ = data.rows.size();
  const size_t slots = static_cast<size_t>(stage_.num_chunks()) * num_micro_batches_;
  received_.assign(slots, torch::Tensor());
  outgoing_.assign(slots, torch::Tensor());
  for (RecvQueue& queue : queues_) {
    queue.order.clear();
    queue.posted = queue.waited = 0;
  }
  for (const Action& action : actions)
    if (action.kind == ActionKind::kRecvActivation || action.kind == ActionKind::kRecvGradient)
      queues_[queue_index(action.kind)].order.push_back(&action);
  for (RecvQueue& queue : queues_) post_ahead(queue, data);
}

// Posts receives until kRecvLookahead are outstanding beyond those already waited.
void Interpreter::post_ahead(RecvQueue& queue, const PassData& data) {
  while (queue.posted < queue.order.size() && queue.posted < queue.waited + kRecvLookahead) {
    const Action& action = *queue.order[queue.posted++];
    const std::vector<int64_t>& sample_shape = *queue.sample_shapes.at(action.chunk);
    std::vector<int64_t> shape{data.rows.at(static_cast<size_t>(action.micro_batch))};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    comm_.post_recv(action, shape, queue.dtypes.at(action.chunk));
  }
}

void Interpreter::receive(const Action& action, const PassData& data) {
  RecvQueue& queue = queues_[queue_index(action.kind)];
  PIPEPLAN_ASSERT(queue.waited < queue.order.size() && *queue.order[queue.waited] == action,
                  "receives out of schedule order at ", to_string(action));
  timed(TimelineKind::kRecvWait, action,
        [&] { received_[slot(action)] = comm_.wait_recv(action); });
  ++queue.waited;
  post_ahead(queue, data);
}

void Interpreter::forward(const Action& action, const PassData& data) {
  const int mb = action.micro_batch;
  const int chunk = action.chunk;
  torch::Tensor input = std::move(received_[slot(action)]);
  received_[slot(action)] = torch::Tensor();
  torch::Tensor target;
  if (stage_.is_first(chunk) || stage_.is_last(chunk)) {
    timed(TimelineKind::kLoad, action, [&] {
      auto [loaded_input, loaded_target] = data.load(mb);
      if (stage_.is_first(chunk)) input = std::move(loaded_input);
      target = std::move(loaded_target);
    });
  }
  if (evaluating_) {
    outgoing_[slot(action)] = stage_.evaluate(chunk, input, target, correct_, total_);
    return;
  }
  // Every chunk of a micro-batch draws from the same seed; its layers reseed by model index.
  const int64_t global_micro_batch = static_cast<int64_t>(replica_) * plan_.num_micro_batches + mb;
  const uint64_t rng_seed = micro_batch_seed(seed_, data.step, global_micro_batch);
  torch::Tensor output;
  timed(TimelineKind::kForward, action,
        [&] { output = stage_.forward(chunk, mb, input, target, rng_seed); });
  if (stage_.is_last(chunk))
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + output : output;
  else
    outgoing_[slot(action)] = std::move(output);
}

// A whole backward, or zb-h1's B (the input gradient alone; W follows later).
void Interpreter::backward(const Action& action) {
  const int mb = action.micro_batch;
  const int chunk = action.chunk;
  const bool input_only = action.kind == ActionKind::kBackwardInput;
  if (stage_.checkpointed(chunk))
    timed(TimelineKind::kRecompute, action, [&] { stage_.recompute(chunk, mb); });
  const double loss_factor = scaler_.scale() / plan_.num_micro_batches;
  torch::Tensor& received = received_[slot(action)];
  torch::Tensor input_gradient;
  timed(input_only ? TimelineKind::kBackwardInput : TimelineKind::kBackward, action, [&] {
    if (input_only) {
      input_gradient = stage_.backward_input(chunk, mb, received, loss_factor);
      return;
    }
    input_gradient = stage_.backward(chunk, mb, received, loss_factor);
  });
  received = torch::Tensor();
  outgoing_[slot(action)] = std::move(input_gradient);
}

void Interpreter::backward_weight(const Action& action) {
  timed(TimelineKind::kBackwardWeight, action, [&] {
    stage_.backward_weight(action.chunk, action.micro_batch);
  });
}

void Interpreter::send(const Action& action) {
  torch::Tensor& outgoing = outgoing_[slot(action)];
  PIPEPLAN_ASSERT(outgoing.defined(), "nothing to send at ", to_string(action));
  timed(TimelineKind::kSendWait, action, [&] { comm_.wait_sends(kMaxOutstandingSends - 1); });
  timed(TimelineKind::kSend, action, [&] { comm_.send(action, outgoing); });
  outgoing = torch::Tensor();
}

// Sums tied parameters' gradients over their stages (after kAllReduce averaged them over the
// replicas: ZeRO-1 all-reduces the buckets that hold them whole, see ReplicaSync), unscales
// (fp16), checks the gradients this replica steps, steps unless loss scaling skips (every rank
// of the world, replicas included, decides alike), zeroes the gradients.
void Interpreter::optimizer_step(double lr, IterationOutcome* outcome) {
  timed(TimelineKind::kOptimizer, kWholeStage, [&] {
    torch::Tensor& gradients = stage_.gradients();
    // A parameter tied across stages takes the sum of its stages' gradients, as in one process.
    const std::vector<torch::Tensor>& tied = stage_.tied_gradients();
    for (size_t tie = 0; tie < tied.size(); ++tie)
      if (tied[tie].defined()) comm_.sum_over_tie(tie, tied[tie]);
    if (scaler_.enabled()) gradients.mul_(1.0 / scaler_.scale());
    const bool finite = sync_.gradients_finite();
    if (scaler_.enabled()) {
      // Every rank must agree on skipping, or the stages would step out of lockstep.
      torch::Tensor found_inf = torch::full({1}, finite ? 0.0 : 1.0, torch::kFloat64);
      comm_.world_sum(found_inf);
      outcome->step_applied = scaler_.update(found_inf.item<double>() > 0);
    } else {
      outcome->gradients_finite = finite;
    }
    if (outcome->step_applied) optimizer_.step(lr);
    gradients.zero_();
  });
}

void Interpreter::end_pass() {
  timed(TimelineKind::kSendWait, kWholeStage, [&] { comm_.wait_sends(); });
  for (const RecvQueue& queue : queues_)
    PIPEPLAN_ASSERT(queue.waited == queue.order.size(), "receives left unwaited");
}

IterationOutcome Interpreter::train(const std::vector<Action>& actions, const PassData& data,
                                    double lr) {
  IterationOutcome outcome;
  // Only measured steps are timed action by action (on a GPU each timing waits for the device);
  // warm-up steps keep only their iteration time.
  timing_ = recorder_.measuring();
  evaluating_ = false;
  loss_sum_ = torch::Tensor();
  stage_.begin_iteration(static_cast<int>(data.rows.size()));
  begin_pass(actions, data);
  for (size_t idx = 0; idx < actions.size(); ++idx) {
    const Action& action = actions[idx];
    // The compute a kAllReduceStart follows starts its chunk's buckets from hooks as their
    // gradients complete (overlap); the kAllReduceStart starts the rest.
    if (idx + 1 < actions.size() && actions[idx + 1].kind == ActionKind::kAllReduceStart)
      sync_.arm(actions[idx + 1].chunk);
    switch (action.kind) {
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGradient: receive(action, data); break;
      case ActionKind::kForward: forward(action, data); break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput: backward(action); break;
      case ActionKind::kBackwardWeight:
        backward_weight(action);
        break;
      case ActionKind::kSendActivation:
      case ActionKind::kSendGradient: send(action); break;
      case ActionKind::kAllReduceStart: sync_.disarm(); break;
      case ActionKind::kAllReduce:
        timed(TimelineKind::kAllReduce, kWholeStage, [&] { sync_.reduce(); });
        break;
      case ActionKind::kOptimizerStep: optimizer_step(lr, &outcome); break;
      case ActionKind::kAllGather:
        timed(TimelineKind::kAllGather, kWholeStage, [&] { sync_.all_gather(); });
        break;
    }
  }
  end_pass();
  if (stage_.is_last()) {
    outcome.loss_sum = loss_sum_.item<double>();
    outcome.loss_finite = std::isfinite(outcome.loss_sum);
  }
  return outcome;
}

void Interpreter::evaluate(const std::vector<Action>& actions, const PassData& data,
                           int64_t* correct, int64_t* total) {
  timing_ = false;
  evaluating_ = true;
  correct_ = correct;
  total_ = total;
  stage_.set_training(false);
  begin_pass(actions, data);
  for (const Action& action : actions) {
    switch (action.kind) {
      case ActionKind::kRecvActivation: receive(action, data); break;
      case ActionKind::kForward: forward(action, data); break;
      case ActionKind::kSendActivation: send(action); break;
      default: PIPEPLAN_ASSERT(false, "evaluation runs forward actions only, not ", to_string(action));
    }
  }
  end_pass();
  stage_.set_training(true);
  evaluating_ = false;
}

}  // namespace pipeplan::executor
