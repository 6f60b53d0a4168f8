// The schedule interpreter: one rank's actions, receives posted ahead, every action timed.
#include "executor/interpreter.h"

#include <cmath>

#include "common/error.h"

namespace pipeplan::executor {
namespace {

// CUDA work is asynchronous: wait for this device's current stream so that a steady-clock
// interval covers the compute itself. A no-op on CPU.
void wait_for_device(const torch::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->getStream(device).synchronize();
}

int queue_index(ActionKind kind) { return kind == ActionKind::kRecvActivation ? 0 : 1; }

}  // namespace

Interpreter::Interpreter(const Plan& plan, int rank, StageRuntime& stage, Comm& comm,
                         runtime::FlatOptimizer& optimizer, runtime::LossScaler& scaler, Recorder& recorder,
                         uint64_t seed)
    : plan_(plan),
      rank_(rank),
      replica_(plan.ranks.at(rank).replica),
      stage_(stage),
      comm_(comm),
      optimizer_(optimizer),
      scaler_(scaler),
      recorder_(recorder),
      seed_(seed) {
  const StagePlan& me = plan_.stages[stage_.stage()];
  queues_[0].sample_shape = &me.input_sample_shape;  // activations from the previous stage
  queues_[0].dtype = boundary_dtype(me.input_dtype, "dtype");
  queues_[1].sample_shape = &me.output_sample_shape;  // gradients of this stage's output
  queues_[1].dtype = boundary_dtype(me.output_dtype, "dtype");
}

template <typename Body>
void Interpreter::timed(TimelineKind kind, int micro_batch, Body&& body, int peer) {
  if (!timing_) {
    body();
    return;
  }
  const double start_ms = recorder_.now_ms();
  body();
  wait_for_device(stage_.device());
  recorder_.record(kind, micro_batch, start_ms, recorder_.now_ms(), peer);
}

void Interpreter::begin_pass(const std::vector<Action>& actions, const PassData& data) {
  const size_t num_micro_batches = data.rows.size();
  received_.assign(num_micro_batches, torch::Tensor());
  outgoing_.assign(num_micro_batches, torch::Tensor());
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
    std::vector<int64_t> shape{data.rows.at(static_cast<size_t>(action.micro_batch))};
    shape.insert(shape.end(), queue.sample_shape->begin(), queue.sample_shape->end());
    comm_.post_recv(action.kind, action.peer, action.micro_batch, shape, queue.dtype);
  }
}

void Interpreter::receive(const Action& action, const PassData& data) {
  RecvQueue& queue = queues_[queue_index(action.kind)];
  PIPEPLAN_ASSERT(queue.waited < queue.order.size() && *queue.order[queue.waited] == action,
                  "receives out of schedule order at ", to_string(action));
  timed(
      TimelineKind::kRecvWait, action.micro_batch,
      [&] { received_[action.micro_batch] = comm_.wait_recv(action.kind, action.micro_batch); },
      action.peer);
  ++queue.waited;
  post_ahead(queue, data);
}

void Interpreter::forward(const Action& action, const PassData& data) {
  const int mb = action.micro_batch;
  torch::Tensor input = received_[mb];
  torch::Tensor target;
  received_[mb] = torch::Tensor();
  if (stage_.is_first() || stage_.is_last()) {
    timed(TimelineKind::kLoad, mb, [&] {
      auto [loaded_input, loaded_target] = data.load(mb);
      if (stage_.is_first()) input = std::move(loaded_input);
      target = std::move(loaded_target);
    });
  }
  if (evaluating_) {
    outgoing_[mb] = stage_.evaluate(input, target, correct_, total_);
    return;
  }
  const int64_t global_micro_batch = static_cast<int64_t>(replica_) * plan_.num_micro_batches + mb;
  const uint64_t rng_seed = micro_batch_seed(seed_, data.step, global_micro_batch);
  torch::Tensor output;
  timed(TimelineKind::kForward, mb, [&] { output = stage_.forward(mb, input, target, rng_seed); });
  if (stage_.is_last())
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + output : output;
  else
    outgoing_[mb] = std::move(output);
}

// A whole backward, or zb-h1's B (the input gradient alone; W follows later).
void Interpreter::backward(const Action& action) {
  const int mb = action.micro_batch;
  const bool input_only = action.kind == ActionKind::kBackwardInput;
  if (stage_.checkpointed()) timed(TimelineKind::kRecompute, mb, [&] { stage_.recompute(mb); });
  const double loss_factor = scaler_.scale() / plan_.num_micro_batches;
  torch::Tensor input_gradient;
  timed(input_only ? TimelineKind::kBackwardInput : TimelineKind::kBackward, mb, [&] {
    input_gradient = input_only ? stage_.backward_input(mb, received_[mb], loss_factor)
                                : stage_.backward(mb, received_[mb], loss_factor);
  });
  received_[mb] = torch::Tensor();
  outgoing_[mb] = std::move(input_gradient);
}

void Interpreter::send(const Action& action) {
  const int mb = action.micro_batch;
  PIPEPLAN_ASSERT(outgoing_[mb].defined(), "nothing to send at ", to_string(action));
  timed(TimelineKind::kSendWait, mb, [&] { comm_.wait_sends(kMaxOutstandingSends - 1); });
  timed(
      TimelineKind::kSend, mb, [&] { comm_.send(action.kind, action.peer, mb, outgoing_[mb]); },
      action.peer);
  outgoing_[mb] = torch::Tensor();
}

// Sums tied parameters' gradients over their stages, unscales (fp16), checks the gradients,
// steps unless loss scaling skips, zeroes the gradients.
void Interpreter::optimizer_step(double lr, IterationOutcome* outcome) {
  timed(TimelineKind::kOptimizer, -1, [&] {
    torch::Tensor& gradients = stage_.gradients();
    // A parameter tied across stages takes the sum of its stages' gradients, as in one process.
    const std::vector<torch::Tensor>& tied = stage_.tied_gradients();
    for (size_t tie = 0; tie < tied.size(); ++tie)
      if (tied[tie].defined()) comm_.sum_over_tie(tie, tied[tie]);
    if (scaler_.enabled()) gradients.mul_(1.0 / scaler_.scale());
    const bool finite = runtime::all_finite(gradients);
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
  timed(TimelineKind::kSendWait, -1, [&] { comm_.wait_sends(); });
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
  for (const Action& action : actions) {
    switch (action.kind) {
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGradient: receive(action, data); break;
      case ActionKind::kForward: forward(action, data); break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput: backward(action); break;
      case ActionKind::kBackwardWeight:
        timed(TimelineKind::kBackwardWeight, action.micro_batch,
              [&] { stage_.backward_weight(action.micro_batch); });
        break;
      case ActionKind::kSendActivation:
      case ActionKind::kSendGradient: send(action); break;
      case ActionKind::kAllReduce:
        timed(TimelineKind::kAllReduce, -1, [&] {
          comm_.average_over_replicas(stage_.gradients(), kGradientBucketBytes);
        });
        break;
      case ActionKind::kOptimizerStep: optimizer_step(lr, &outcome); break;
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
