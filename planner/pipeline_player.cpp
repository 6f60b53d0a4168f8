// The simulator's discrete-event core: ranks run until they block, in dataflow order.
#include "planner/pipeline_player.h"

#include <algorithm>

#include "common/error.h"

namespace pipeplan {
namespace {

constexpr int kActivation = 0;  // message directions on a boundary
constexpr int kGradient = 1;
constexpr size_t kInitialChannelCapacity = 8;  // messages; a power of two

}  // namespace

// Doubles the ring, keeping every message a receiver or a send limit may still look at: the
// last `capacity` sent.
void PipelinePlayer::Channel::grow() {
  const size_t old_capacity = ring.size();
  std::vector<Message> larger(std::max(kInitialChannelCapacity, 2 * old_capacity));
  const int kept = static_cast<int>(std::min<size_t>(old_capacity, static_cast<size_t>(sent)));
  for (int seq = sent - kept; seq < sent; ++seq)
    larger[static_cast<size_t>(seq) & (larger.size() - 1)] =
        ring[static_cast<size_t>(seq) & (old_capacity - 1)];
  ring.swap(larger);
  mask = ring.size() - 1;
}

PipelinePlayer::PipelinePlayer(const SimulationInput& input, std::vector<int> pipelines,
                               bool record_timeline)
    : in_(input),
      pp_(input.pp),
      virtual_stages_(input.virtual_stages),
      num_boundaries_(input.virtual_stages > 1 ? input.pp : input.pp - 1),
      record_timeline_(record_timeline),
      pipelines_(std::move(pipelines)) {
  PIPEPLAN_ASSERT(!pipelines_.empty());
  PIPEPLAN_ASSERT(!in_.forward_only || (in_.schedule == Schedule::kGpipe && virtual_stages_ == 1));
  for (int stage = 0; stage < pp_; ++stage) {
    if (in_.forward_only)
      lists_.push_back(StageActionList::forward_only(pp_, stage, in_.num_micro_batches));
    else
      lists_.emplace_back(
          in_.schedule, pp_, stage, in_.num_micro_batches,
          ReplicaActions{in_.dp > 1, in_.dp > 1 && in_.overlap_allreduce, in_.all_gather},
          virtual_stages_);
  }
  channels_.resize(pipelines_.size() * std::max(num_boundaries_, 0) * 2);
  for (Channel& channel : channels_) channel.grow();
  for (std::vector<int>& arrived : arrived_) arrived.assign(pp_, 0);
  ranks_.resize(pipelines_.size() * pp_);
  if (record_timeline_) events_.resize(ranks_.size());
  for (size_t pipeline_idx = 0; pipeline_idx < pipelines_.size(); ++pipeline_idx)
    for (int stage = 0; stage < pp_; ++stage) connect(static_cast<int>(pipeline_idx), stage);
}

// Points the rank of `stage` of a pipeline at its channels and transfer times.
void PipelinePlayer::connect(int pipeline_idx, int stage) {
  SimRank& rank = ranks_[sim_index(pipeline_idx, stage)];
  rank.stage = stage;
  const int replica = pipelines_[pipeline_idx];
  auto channel = [&](int boundary, int direction) {
    return &channels_[(pipeline_idx * num_boundaries_ + boundary) * 2 + direction];
  };
  rank.activation_ms = &in_.activation_ms[replica];
  rank.gradient_ms = &in_.gradient_ms[replica];
  const bool wraps = virtual_stages_ > 1;
  if (stage + 1 < pp_ || wraps) {  // activations out, gradients in, over link `stage`
    rank.outbox[kActivation] = channel(stage, kActivation);
    if (!wraps) rank.transfer_ms[kActivation] = in_.activation_ms[replica][stage];
    rank.inbox[kGradient] = channel(stage, kGradient);
  }
  if (stage > 0 || wraps) {  // activations in, gradients out, over the link before `stage`
    const int link = (stage + pp_ - 1) % pp_;
    rank.inbox[kActivation] = channel(link, kActivation);
    rank.outbox[kGradient] = channel(link, kGradient);
    if (!wraps) rank.transfer_ms[kGradient] = in_.gradient_ms[replica][stage - 1];
  }
  const int idx = sim_index(pipeline_idx, stage);
  for (int direction : {kActivation, kGradient}) {
    if (rank.outbox[direction]) rank.outbox[direction]->sender = idx;
    if (rank.inbox[direction]) rank.inbox[direction]->receiver = idx;
  }
}

void PipelinePlayer::reset() {
  abandoned_ = false;
  for (SimRank& rank : ranks_) {
    rank.next = lists_[rank.stage].first_block();
    rank.next_forward = rank.next_backward = ChunkCursor{};
    rank.tail = kTailAllReduce;
    rank.clock_ms = 0;
    rank.busy_ms = 0;
    rank.allreduce_ms = 0;
    rank.computed = rank.deciding = rank.not_posted = false;
    rank.sends = 0;
  }
  for (std::vector<TimelineEvent>& events : events_) events.clear();
  for (Channel& channel : channels_) {
    channel.sent = channel.placed = channel.received = 0;
    std::fill(std::begin(channel.post_ms), std::end(channel.post_ms), 0.0);
    channel.link_free_ms = 0;
    channel.sender_waits = channel.receiver_waits = false;
  }
  for (std::vector<int>& arrived : arrived_) std::fill(arrived.begin(), arrived.end(), 0);
  ready_.clear();
  decisions_ = {};
}

double PipelinePlayer::play() {
  reset();
  const double stop_ms = stop_above_ms_;
  if (!prepare_stop()) stop_above_ms_ = kNever;
  for (size_t idx = 0; idx < ranks_.size(); ++idx) ready_.push_back(static_cast<int>(idx));
  do {
    while (!ready_.empty() && !abandoned_) {
      const int idx = ready_.back();
      ready_.pop_back();
      if (record_timeline_)
        run<true>(idx);
      else
        run<false>(idx);
    }
  } while (!abandoned_ && release_earliest_decision());
  stop_above_ms_ = stop_ms;
  double iteration_ms = 0;
  for (const SimRank& rank : ranks_)
    iteration_ms = std::max(iteration_ms, abandoned_ ? rank.clock_ms - rank.busy_ms + rank.work_ms
                                                     : rank.clock_ms);
  if (!abandoned_) check_finished();
  return iteration_ms;
}

// A rank ends no earlier than its clock plus the compute it has left, work_ms less what it
// computed so far, which is busy_ms less its collectives: so no earlier than clock − busy + work.
// The limit is raised by a millionth (work_ms and the clock add their terms in other orders).
bool PipelinePlayer::prepare_stop() {
  constexpr double kStopSlack = 1e-6;
  if (stop_above_ms_ == kNever || in_.forward_only) return false;
  const int m = in_.num_micro_batches;
  for (SimRank& rank : ranks_) {
    if (rank.times) return false;
    const StageCosts& stage = in_.stages[rank.stage];
    double work_ms = 0;
    for (int chunk = 0; chunk < virtual_stages_; ++chunk) {
      const StageCosts& costs =
          virtual_stages_ > 1 ? in_.chunks[chunk_index(pp_, rank.stage, chunk)] : stage;
      work_ms += m * (costs.fwd_ms + costs.recompute_ms + costs.bwd_ms + costs.bwd_weight_ms);
    }
    rank.work_ms = work_ms + stage.optimizer_ms;
  }
  stop_above_ms_ = stop_above_ms_ * (1 + kStopSlack);
  return true;
}

void PipelinePlayer::check_finished() const {
  for (const SimRank& rank : ranks_) {
    if (rank.tail == kTailDone) continue;
    const StageActionList& list = lists_[rank.stage];
    // In the tail: the all-reduce (when the list has one) or the all-gather, the last action.
    const size_t next = rank.next.block < list.num_blocks() ? list.first_action(rank.next.block)
                        : rank.tail == kTailAllReduce       ? list.compute_end()
                                                            : list.size() - 1;
    PIPEPLAN_ASSERT(false, "schedule deadlock: stage ", rank.stage, " stuck at ",
                    to_string(list[next]));
  }
}

template <bool kRecord>
void PipelinePlayer::compute(SimRank& rank, TimelineKind kind, int micro_batch, double duration_ms,
                             int chunk) {
  const double end_ms = rank.clock_ms + duration_ms;
  if (kRecord && end_ms > rank.clock_ms)
    events_[&rank - ranks_.data()].push_back(
        {rank.stage, kind, micro_batch, rank.clock_ms, end_ms, -1, chunk});
  rank.clock_ms = end_ms;
  rank.busy_ms += duration_ms;
}

// Places (fixes the transfer of) every message that is sent and whose receive is posted, in
// order: it starts when both have happened and the link is free. Like send() and receive(),
// inlined into run(): the calls' register saves and restores were a fifth of its instructions.
template <bool kRecord>
[[gnu::always_inline]] inline void PipelinePlayer::place_pending(Channel& channel) {
  do {
    Message& message = channel.at(channel.placed);
    message.posted_ms = channel.post_at(channel.placed);
    const double start_ms =
        std::max(std::max(message.sent_ms, message.posted_ms), channel.link_free_ms);
    message.end_ms = channel.link_free_ms = start_ms + message.transfer_ms;
    if (kRecord && message.end_ms > start_ms)
      events_[channel.sender].push_back({ranks_[channel.sender].stage, TimelineKind::kSend,
                                         message.micro_batch, start_ms, message.end_ms,
                                         ranks_[channel.receiver].stage, message.chunk});
    ++channel.placed;
  } while (channel.placed < channel.sent && channel.placed < channel.posted());
  if (channel.sender_waits) {
    channel.sender_waits = false;
    wake(channel.sender);
  }
  if (channel.receiver_waits) {
    channel.receiver_waits = false;
    wake(channel.receiver);
  }
}

// The executor's Comm::wait_sends(kMaxSendsInFlight − 1) before each send once the rank has
// made kMaxSendsInFlight: it waits (idle) until its send kMaxSendsInFlight back has completed.
// False while that send's transfer is not placed yet (its receive is not posted).
template <bool kRecord>
bool PipelinePlayer::wait_for_send_limit(SimRank& rank, int micro_batch, int chunk) {
  const SentMessage& oldest = rank.sent(rank.sends);
  Channel& channel = *oldest.channel;
  if (channel.placed <= oldest.seq) {
    channel.sender_waits = true;
    return false;
  }
  const double done_ms = channel.at(oldest.seq).end_ms;
  if (kRecord && done_ms > rank.clock_ms)
    events_[&rank - ranks_.data()].push_back(
        {rank.stage, TimelineKind::kSendWait, micro_batch, rank.clock_ms, done_ms, -1, chunk});
  return !wait_until(rank, done_ms);
}

template <bool kRecord>
[[gnu::always_inline]] inline bool PipelinePlayer::send(SimRank& rank, int direction,
                                                        int micro_batch, int chunk) {
  if (rank.deciding) return decide_occupancy(rank);  // Gloo: resumed before its decision
  if (rank.sends >= kMaxSendsInFlight && !wait_for_send_limit<kRecord>(rank, micro_batch, chunk))
    return false;
  Channel& channel = *rank.outbox[direction];
  double transfer_ms = rank.transfer_ms[direction];
  if (virtual_stages_ > 1) {  // by the chunk boundary crossed
    const int from = chunk_index(pp_, rank.stage, chunk);
    transfer_ms =
        direction == kActivation ? (*rank.activation_ms)[from] : (*rank.gradient_ms)[from - 1];
  }
  if (static_cast<size_t>(channel.sent - channel.received) > channel.mask) channel.grow();
  channel.at(channel.sent) = {rank.clock_ms, 0, transfer_ms, 0, micro_batch, chunk};
  rank.sent(rank.sends++) = {&channel, channel.sent++};
  place<kRecord>(channel);
  if (!in_.send_occupies_sender) return true;
  rank.deciding = true;
  return decide_occupancy(rank);
}

// Gloo writes a message on the sender's thread when its receive was posted before the send
// call (plans/comm_backend.h), and in the background once it is posted otherwise. The
// receiver posts it at or after its own clock, so a receiver already past the send did not.
bool PipelinePlayer::decide_occupancy(SimRank& rank) {
  const SentMessage& last = rank.sent(rank.sends - 1);
  Channel& channel = *last.channel;
  const Message& message = channel.at(last.seq);
  if (channel.placed > last.seq) {
    if (message.posted_ms < message.sent_ms)
      rank.clock_ms = std::max(rank.clock_ms, message.end_ms);
  } else if (!rank.not_posted && ranks_[channel.receiver].clock_ms < message.sent_ms) {
    channel.sender_waits = true;
    decisions_.emplace(message.sent_ms, static_cast<int>(&rank - ranks_.data()));
    return false;
  }
  rank.deciding = rank.not_posted = false;
  return true;
}

// Every rank is blocked, so whatever happens next follows a rank resuming: a deciding sender
// at its send time, the others on what those send. No receive still to be posted is posted
// before the earliest open send, which therefore goes on unheld.
bool PipelinePlayer::release_earliest_decision() {
  while (!decisions_.empty()) {
    const auto [sent_ms, idx] = decisions_.top();
    decisions_.pop();
    SimRank& rank = ranks_[idx];
    if (!rank.deciding || rank.not_posted) continue;
    const SentMessage& last = rank.sent(rank.sends - 1);
    Channel& channel = *last.channel;
    if (channel.placed > last.seq || channel.at(last.seq).sent_ms != sent_ms) continue;
    rank.not_posted = true;
    channel.sender_waits = false;
    wake(idx);
    return true;
  }
  return false;
}

// False when the message has not been sent yet (the rank blocks).
template <bool kRecord>
[[gnu::always_inline]] inline bool PipelinePlayer::receive(SimRank& rank, int direction,
                                                           int micro_batch, int chunk) {
  Channel& channel = *rank.inbox[direction];
  // Receive `received` is posted, so it is placed as soon as it is sent.
  if (channel.placed == channel.received) {
    channel.receiver_waits = true;
    return false;
  }
  const double at_ms = channel.at(channel.received).end_ms;
  if (kRecord && at_ms > rank.clock_ms)
    events_[&rank - ranks_.data()].push_back({rank.stage, TimelineKind::kRecvWait, micro_batch,
                                              rank.clock_ms, at_ms, ranks_[channel.sender].stage,
                                              chunk});
  if (wait_until(rank, at_ms)) return false;
  // The executor posts receive j + kRecvLookahead as its wait for receive j returns.
  channel.post_at(channel.received) = rank.clock_ms;
  ++channel.received;
  place<kRecord>(channel);
  return true;
}

double PipelinePlayer::buckets_end_ms(int stage) {
  // Each bucket starts once every replica has it ready; the replicas run one collective at a
  // time, in the order the buckets become ready.
  const std::vector<BucketPrediction>& buckets = in_.stages[stage].buckets;
  std::vector<std::pair<double, double>>& ready = bucket_ready_;  // (ready, comm)
  ready.clear();
  for (const BucketPrediction& bucket : buckets) {
    double ready_ms = 0;
    for (size_t pipeline_idx = 0; pipeline_idx < pipelines_.size(); ++pipeline_idx) {
      const SimRank& member = ranks_[sim_index(static_cast<int>(pipeline_idx), stage)];
      ready_ms = std::max(ready_ms, member.weight_pass_end_ms[bucket.chunk] -
                                        (1 - bucket.ready_fraction) *
                                            member.weight_pass_ms[bucket.chunk]);
    }
    ready.emplace_back(ready_ms, bucket.comm_ms);
  }
  std::sort(ready.begin(), ready.end());
  double end_ms = 0;
  for (const auto& [ready_ms, comm_ms] : ready) end_ms = std::max(end_ms, ready_ms) + comm_ms;
  return end_ms;
}

template <bool kRecord>
bool PipelinePlayer::collective(SimRank& rank, Tail phase) {
  const int num_pipelines = static_cast<int>(pipelines_.size());
  std::vector<int>& arrived = arrived_[phase == kTailAllReduce ? 0 : 1];
  if (++arrived[rank.stage] < num_pipelines) return false;
  double start_ms = 0;
  for (int pipeline_idx = 0; pipeline_idx < num_pipelines; ++pipeline_idx)
    start_ms = std::max(start_ms, ranks_[sim_index(pipeline_idx, rank.stage)].clock_ms);
  const StageCosts& costs = in_.stages[rank.stage];
  double duration_ms = costs.allgather_ms;
  if (phase == kTailAllReduce)
    duration_ms = in_.overlap_allreduce && !costs.buckets.empty()
                      ? std::max(0.0, buckets_end_ms(rank.stage) - start_ms)
                      : costs.allreduce_ms;
  for (int pipeline_idx = 0; pipeline_idx < num_pipelines; ++pipeline_idx) {
    const int idx = sim_index(pipeline_idx, rank.stage);
    SimRank& member = ranks_[idx];
    member.clock_ms = start_ms;
    if (phase == kTailAllReduce) {
      compute<kRecord>(member, TimelineKind::kAllReduce, -1, duration_ms);
      member.allreduce_ms = duration_ms;
      member.tail = kTailStep;
    } else {
      compute<kRecord>(member, TimelineKind::kAllGather, -1, duration_ms);
      member.tail = kTailDone;
    }
    if (&member != &rank) ready_.push_back(idx);
  }
  return true;
}

// Runs rank `idx` through its compute blocks until it blocks at a receive or a send, then its
// tail.
template <bool kRecord>
void PipelinePlayer::run(int idx) {
  SimRank& rank = ranks_[idx];
  const StageActionList& list = lists_[rank.stage];
  const bool chunked = virtual_stages_ > 1;
  const RankStepTimes* times = rank.times;
  const int last_micro_batch = in_.num_micro_batches - 1;
  const StageCosts& stage_costs = in_.stages[rank.stage];
  const bool stage_upstream = list.chunk_has_input(0);  // without chunks
  const bool stage_downstream = list.chunk_has_output(0);
  for (const int num_blocks = list.num_blocks(); rank.next.block < num_blocks;
       list.next_block(&rank.next)) {
    ComputeBlock block{rank.next.kind, rank.next.step, 0};
    if (chunked) {  // from the chunk cursors; advanced below once the block has run
      const ChunkCursor& at =
          block.kind == BlockKind::kForward ? rank.next_forward : rank.next_backward;
      block.micro_batch = at.base + at.pos;
      block.chunk = block.kind == BlockKind::kForward ? at.chunk : virtual_stages_ - 1 - at.chunk;
    }
    const int mb = block.micro_batch;
    const int v = block.chunk;
    // The block's costs and whether it has neighbours: its stage's, or under interleaved-1f1b
    // its chunk's. A rank's own times hold m entries per chunk.
    const StageCosts& costs = chunked ? in_.chunks[chunk_index(pp_, rank.stage, v)] : stage_costs;
    const int slot = v * in_.num_micro_batches + mb;
    const bool upstream = chunked ? list.chunk_has_input(v) : stage_upstream;
    const bool downstream = chunked ? list.chunk_has_output(v) : stage_downstream;
    // A block blocks at its receive (before its compute) or at its send (after it; then
    // `computed` keeps the compute from running again when the rank resumes).
    if (block.kind == BlockKind::kBackwardWeight) {
      const double weight_ms = times ? times->bwd_weight_ms[slot] : costs.bwd_weight_ms;
      compute<kRecord>(rank, TimelineKind::kBackwardWeight, mb, weight_ms, v);
      if (mb == last_micro_batch) note_weight_pass(rank, v, weight_ms);
    } else if (block.kind == BlockKind::kForward) {
      if (!rank.computed) {
        if (upstream && !receive<kRecord>(rank, kActivation, mb, v)) return;
        const double fwd_ms = times ? times->fwd_ms[slot] : costs.fwd_ms;
        compute<kRecord>(rank, TimelineKind::kForward, mb, fwd_ms, v);
        rank.computed = true;
      }
      if (downstream && !send<kRecord>(rank, kActivation, mb, v)) return;
    } else {
      if (!rank.computed) {
        if (downstream && !receive<kRecord>(rank, kGradient, mb, v)) return;
        const double recompute_ms =
            times ? (times->recompute_ms.empty() ? 0 : times->recompute_ms[slot])
                  : costs.recompute_ms;
        if (recompute_ms > 0) compute<kRecord>(rank, TimelineKind::kRecompute, mb, recompute_ms, v);
        const double bwd_ms = times ? times->bwd_ms[slot] : costs.bwd_ms;
        compute<kRecord>(rank,
                         block.kind == BlockKind::kBackward ? TimelineKind::kBackward
                                                            : TimelineKind::kBackwardInput,
                         mb, bwd_ms, v);
        if (mb == last_micro_batch && block.kind == BlockKind::kBackward)
          note_weight_pass(rank, v, bwd_ms);
        rank.computed = true;
      }
      if (upstream && !send<kRecord>(rank, kGradient, mb, v)) return;
    }
    rank.computed = false;
    if (chunked)
      (block.kind == BlockKind::kForward ? rank.next_forward : rank.next_backward)
          .advance(pp_, virtual_stages_);
  }
  run_tail<kRecord>(rank);
}

// The all-reduce (dp > 1; the last pipeline to arrive resumes the others), the step and the
// all-gather (ZeRO-1; likewise).
template <bool kRecord>
void PipelinePlayer::run_tail(SimRank& rank) {
  const StageActionList& list = lists_[rank.stage];
  if (list.is_forward_only()) {  // inference: nothing after the forwards
    rank.tail = kTailDone;
    return;
  }
  if (rank.tail == kTailAllReduce) {
    if (!list.all_reduce())
      rank.tail = kTailStep;
    else if (!collective<kRecord>(rank, kTailAllReduce))
      return;
  }
  if (rank.tail == kTailStep) {
    compute<kRecord>(rank, TimelineKind::kOptimizer, -1,
                     rank.times ? rank.times->optimizer_ms : in_.stages[rank.stage].optimizer_ms);
    rank.tail = list.all_gather() ? kTailAllGather : kTailDone;
  }
  if (rank.tail == kTailAllGather) collective<kRecord>(rank, kTailAllGather);
}

}  // namespace pipeplan
