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
                         Recorder& recorder, uint64_t seed, std::optional<TrainingParts> training)
    : plan_(plan),
      rank_(rank),
      replica_(plan.ranks.at(rank).replica),
      stage_(stage),
      comm_(comm),
      recorder_(recorder),
      seed_(seed),
      training_(std::move(training)) {
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

Action Interpreter::tagged(const Action& action, int64_t group) const {
  Action peer_view = action;
  peer_view.micro_batch +=
      static_cast<int>((group % kTagGroupCycle) * static_cast<int64_t>(num_micro_batches_));
  return peer_view;
}

void Interpreter::begin_pass(const std::vector<Action>& actions, const PassData& data) {
  num_micro_batches_ = data.rows.size();
  group_ = 0;
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
  for (RecvQueue& queue : queues_) {
    queue.total = queue.order.size() * static_cast<size_t>(data.num_groups);
    post_ahead(queue, data);
  }
}

// Posts receives until kRecvLookahead are outstanding beyond those already waited.
void Interpreter::post_ahead(RecvQueue& queue, const PassData& data) {
  while (queue.posted < queue.total && queue.posted < queue.waited + kRecvLookahead) {
    const size_t per_group = queue.order.size();
    const Action& action = *queue.order[queue.posted % per_group];
    const std::vector<int64_t>& sample_shape = *queue.sample_shapes.at(action.chunk);
    std::vector<int64_t> shape{data.rows.at(static_cast<size_t>(action.micro_batch))};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    comm_.post_recv(tagged(action, static_cast<int64_t>(queue.posted / per_group)), shape,
                    queue.dtypes.at(action.chunk));
    ++queue.posted;
  }
}

void Interpreter::receive(const Action& action, const PassData& data) {
  RecvQueue& queue = queues_[queue_index(action.kind)];
  PIPEPLAN_ASSERT(queue.waited < queue.total &&
                      queue.waited / queue.order.size() == static_cast<size_t>(group_) &&
                      *queue.order[queue.waited % queue.order.size()] == action,
                  "receives out of schedule order at ", to_string(action));
  timed(TimelineKind::kRecvWait, action,
        [&] { received_[slot(action)] = comm_.wait_recv(tagged(action, group_)); });
  ++queue.waited;
  post_ahead(queue, data);
}

void Interpreter::load(const Action& action, const PassData& data, torch::Tensor* input,
                       torch::Tensor* target) {
  const bool first = stage_.is_first(action.chunk), last = stage_.is_last(action.chunk);
  if (!first && !last) return;
  const int64_t item = group_ * static_cast<int64_t>(num_micro_batches_) + action.micro_batch;
  timed(TimelineKind::kLoad, action, [&] {
    auto [loaded_input, loaded_target] = data.load(item);
    if (first) *input = std::move(loaded_input);
    if (last) *target = std::move(loaded_target);
  });
}

void Interpreter::forward(const Action& action, const PassData& data) {
  const int mb = action.micro_batch;
  const int chunk = action.chunk;
  torch::Tensor input = std::move(received_[slot(action)]);
  received_[slot(action)] = torch::Tensor();
  torch::Tensor target;
  load(action, data, &input, &target);
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

// A forward-only pass's forward: no graph, no loss; the last chunk's output goes to data.output.
void Interpreter::forward_without_graph(const Action& action, const PassData& data) {
  torch::Tensor input = std::move(received_[slot(action)]);
  received_[slot(action)] = torch::Tensor();
  torch::Tensor target;
  load(action, data, &input, &target);
  torch::Tensor output;
  timed(TimelineKind::kForward, action, [&] { output = stage_.infer(action.chunk, input); });
  input = torch::Tensor();
  if (!stage_.is_last(action.chunk)) {
    outgoing_[slot(action)] = std::move(output);
    return;
  }
  data.output(group_ * static_cast<int64_t>(num_micro_batches_) + action.micro_batch, output,
              target);
}

// A whole backward, or zb-h1's B (the input gradient alone; W follows later).
void Interpreter::backward(const Action& action) {
  const int mb = action.micro_batch;
  const int chunk = action.chunk;
  const bool input_only = action.kind == ActionKind::kBackwardInput;
  if (stage_.recomputes(chunk))
    timed(TimelineKind::kRecompute, action, [&] { stage_.recompute(chunk, mb); });
  const double loss_factor = training_->scaler.scale() / plan_.num_micro_batches;
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
  timed(TimelineKind::kSend, action, [&] { comm_.send(tagged(action, group_), outgoing); });
  outgoing = torch::Tensor();
}

// Sums tied parameters' gradients over their stages (after kAllReduce averaged them over the
// replicas: ZeRO-1 all-reduces the buckets that hold them whole, see ReplicaSync), unscales
// (fp16), checks the gradients this replica steps, steps unless loss scaling skips (every rank
// of the world, replicas included, decides alike), zeroes the gradients.
void Interpreter::optimizer_step(double lr, IterationOutcome* outcome) {
  runtime::LossScaler& scaler = training_->scaler;
  timed(TimelineKind::kOptimizer, kWholeStage, [&] {
    torch::Tensor& gradients = stage_.gradients();
    // A parameter tied across stages takes the sum of its stages' gradients, as in one process.
    const std::vector<torch::Tensor>& tied = stage_.tied_gradients();
    for (size_t tie = 0; tie < tied.size(); ++tie)
      if (tied[tie].defined()) comm_.sum_over_tie(tie, tied[tie]);
    if (scaler.enabled()) gradients.mul_(1.0 / scaler.scale());
    const bool finite = training_->sync.gradients_finite();
    if (scaler.enabled()) {
      // Every rank must agree on skipping, or the stages would step out of lockstep.
      torch::Tensor found_inf = torch::full({1}, finite ? 0.0 : 1.0, torch::kFloat64);
      comm_.world_sum(found_inf);
      outcome->step_applied = scaler.update(found_inf.item<double>() > 0);
    } else {
      outcome->gradients_finite = finite;
    }
    runtime::FlatOptimizer& optimizer = training_->optimizer;
    if (outcome->step_applied) optimizer.step(lr);  // zeroes the gradients it steps
    // What the step left: every gradient when skipped, the other replicas' shards under ZeRO-1.
    if (!outcome->step_applied || optimizer.numel() < gradients.numel()) gradients.zero_();
  });
}

void Interpreter::end_pass() {
  timed(TimelineKind::kSendWait, kWholeStage, [&] { comm_.wait_sends(); });
  for (const RecvQueue& queue : queues_)
    PIPEPLAN_ASSERT(queue.waited == queue.total, "receives left unwaited");
}

void Interpreter::run_training_action(const Action& action, const PassData& data, double lr,
                                      IterationOutcome* outcome) {
  ReplicaSync& sync = training_->sync;
  switch (action.kind) {
    case ActionKind::kRecvActivation:
    case ActionKind::kRecvGradient: receive(action, data); break;
    case ActionKind::kForward: forward(action, data); break;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput: backward(action); break;
    case ActionKind::kBackwardWeight: backward_weight(action); break;
    case ActionKind::kSendActivation:
    case ActionKind::kSendGradient: send(action); break;
    case ActionKind::kAllReduceStart: sync.disarm(); break;
    case ActionKind::kAllReduce:
      timed(TimelineKind::kAllReduce, kWholeStage, [&] { sync.reduce(); });
      break;
    case ActionKind::kOptimizerStep: optimizer_step(lr, outcome); break;
    case ActionKind::kAllGather:
      timed(TimelineKind::kAllGather, kWholeStage, [&] { sync.all_gather(); });
      break;
  }
}

IterationOutcome Interpreter::train(const std::vector<Action>& actions, const PassData& data,
                                    double lr) {
  PIPEPLAN_ASSERT(training_.has_value() && data.num_groups == 1,
                  "a training iteration needs the training parts and one group");
  IterationOutcome outcome;
  // Only measured steps are timed action by action (on a GPU each timing waits for the device);
  // warm-up steps keep only their iteration time.
  timing_ = recorder_.measuring();
  loss_sum_ = torch::Tensor();
  stage_.begin_iteration(static_cast<int>(data.rows.size()));
  begin_pass(actions, data);
  for (size_t idx = 0; idx < actions.size(); ++idx) {
    // The compute a kAllReduceStart follows starts its chunk's buckets from hooks as their
    // gradients complete (overlap); the kAllReduceStart starts the rest.
    if (idx + 1 < actions.size() && actions[idx + 1].kind == ActionKind::kAllReduceStart)
      training_->sync.arm(actions[idx + 1].chunk);
    run_training_action(actions[idx], data, lr, &outcome);
  }
  end_pass();
  if (stage_.is_last()) {
    outcome.loss_sum = loss_sum_.item<double>();
    outcome.loss_finite = std::isfinite(outcome.loss_sum);
  }
  return outcome;
}

void Interpreter::forward_only(const std::vector<Action>& actions, const PassData& data,
                               bool timed_groups) {
  timing_ = false;
  begin_pass(actions, data);
  for (group_ = 0; group_ < data.num_groups; ++group_) {
    if (timed_groups) {
      recorder_.begin_step(group_ + 1);
      timing_ = recorder_.measuring();
    }
    for (const Action& action : actions) {
      switch (action.kind) {
        case ActionKind::kRecvActivation: receive(action, data); break;
        case ActionKind::kForward: forward_without_graph(action, data); break;
        case ActionKind::kSendActivation: send(action); break;
        default:
          PIPEPLAN_ASSERT(false, "a forward-only pass runs no ", to_string(action));
      }
    }
    if (timed_groups) recorder_.end_step();
  }
  // The last sends are waited untimed, after the last group's step.
  timing_ = false;
  end_pass();
}

}  // namespace pipeplan::executor
