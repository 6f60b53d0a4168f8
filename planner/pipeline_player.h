// The simulator's discrete-event core: plays the schedule's action lists of one or more
// pipelines that meet only at their stages' all-reduces.
#pragma once

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "common/limits.h"
#include "planner/simulation_input.h"
#include "plans/schedule.h"
#include "plans/stage_action_list.h"

namespace pipeplan {

/// Plays one iteration of `pipelines` (each a replica of the input, whose transfer times it
/// uses) as simulate() describes: compute in list order, receives that block until the data
/// arrives, an all-reduce per stage that starts when every played pipeline's rank of the stage
/// reached it, then the optimizer step. Transfers follow the executor's policy
/// (plans/schedule.h, executor/interpreter.h): a receiver posts its first kRecvLookahead
/// receives of each kind when the iteration starts and receive j + kRecvLookahead when its
/// wait for receive j returns; a transfer starts once the send is made, its receive is posted
/// and its directed link is free. A rank keeps at most kMaxSendsInFlight sends outstanding:
/// before a further send it waits (idle) for the oldest to complete. With
/// send_occupies_sender (Gloo) a send whose receive was posted before the call holds its rank
/// until the transfer ends; one made earlier is written later in the background.
///
///   gpipe, pp=2, 1.5 ms transfers, stage 1's F0 slow (simulator_test has it by hand):
///   stage 0: F0 F1 F2 F3        act 3 sent at 4 moves at [7.5, 9], once it is posted
///   stage 1:    F0 [2.5, 7.5] F1 F2 wait F3   (act 3 posted as its wait for act 1 returns)
/// Holds no action list (plans/stage_action_list.h: StageActionList) and only the messages in
/// flight: with 1f1b at most a stage's warm-up, pp − s, on the links of stage s, whatever the
/// micro-batches (gpipe sends all forwards first: up to m per link). Under interleaved-1f1b a
/// link carries the messages of every chunk boundary it serves, in one order both ends share
/// (schedule_test checks it), so one channel per link pairs them and is one of the executor's
/// receive queues. Ranks run until they block, in dataflow order. Whether a Gloo send found
/// its receive posted can hang on a receiver not played that far: the sender waits (in the
/// play) until the receiver posts it or is past the send, or until all ranks are blocked,
/// when the earliest such send cannot have found it posted (all that is left happens after
/// it). Reusable: play() starts every iteration afresh.
class PipelinePlayer {
 public:
  /// `input` must outlive the player; `pipelines` lists replica indices (not empty).
  PipelinePlayer(const SimulationInput& input, std::vector<int> pipelines, bool record_timeline);
  /// Movable, not copyable (its ranks point at its channels).
  PipelinePlayer(PipelinePlayer&&) = default;
  PipelinePlayer(const PipelinePlayer&) = delete;
  PipelinePlayer& operator=(const PipelinePlayer&) = delete;

  /// Replaces the action times of `stage` of pipeline `pipeline_idx` (an index into the
  /// constructor's list) by `times` (kept by pointer; null: the stage's mean times again).
  void set_times(int pipeline_idx, int stage, const RankStepTimes* times) {
    ranks_[sim_index(pipeline_idx, stage)].times = times;
  }

  /// Plays one iteration and returns when its last rank finishes, in ms. A schedule that
  /// deadlocks is a bug (PIPEPLAN_ASSERT).
  double play();
  /// Mean times only (no set_times), training lists: the next plays stop as
  /// soon as a rank's clock plus the compute it has left, less what it computed so far, shows
  /// that the iteration will end after `iteration_ms` (infinity: never); play() then returns
  /// that lower bound and abandoned() is true. The busy and idle times are then partial.
  void stop_above(double iteration_ms) { stop_above_ms_ = iteration_ms; }
  /// Whether the last play stopped early (stop_above).
  bool abandoned() const { return abandoned_; }

  /// After play(): the busy time (forward, backward, recompute, all-reduce, optimizer) of one
  /// played rank, in ms.
  double busy_ms(int pipeline_idx, int stage) const {
    return ranks_[sim_index(pipeline_idx, stage)].busy_ms;
  }
  /// After play(): the time one played rank spent in its all-reduce action, in ms.
  double allreduce_ms(int pipeline_idx, int stage) const {
    return ranks_[sim_index(pipeline_idx, stage)].allreduce_ms;
  }
  /// After play(): one played rank's events, with rank = its stage and peer = the peer stage
  /// (the caller maps them to ranks); none without record_timeline.
  const std::vector<TimelineEvent>& events(int pipeline_idx, int stage) const {
    static const std::vector<TimelineEvent> kNone;
    return record_timeline_ ? events_[sim_index(pipeline_idx, stage)] : kNone;
  }

 private:
  // One message on a link: its send, post and transfer times, and what it carries.
  struct Message {
    double sent_ms = 0;
    double posted_ms = 0;  // its receive's post time, once placed
    double transfer_ms = 0;
    double end_ms = 0;
    int micro_batch = 0;
    int chunk = 0;
  };

  // One directed link, one receive queue of its receiver: messages in the order sent, which
  // is the order received (schedule_test checks it); message `seq` at ring[seq & mask]. A
  // message is placed (its transfer fixed) in order, once sent and posted.
  struct Channel {
    std::vector<Message> ring;
    size_t mask = 0;   // ring.size() − 1, a power of two less one
    int sent = 0;      // messages sent
    int placed = 0;    // messages whose transfer is placed (end_ms known)
    int received = 0;  // receives waited; receives [0, received + kRecvLookahead) are posted
    double post_ms[kRecvLookahead] = {};  // receive seq's post time at seq % kRecvLookahead
    double link_free_ms = 0;              // when the last placed transfer ends
    int sender = -1;                      // sim ranks at its two ends
    int receiver = -1;
    bool sender_waits = false;    // blocked on this channel: at its send limit or a decision
    bool receiver_waits = false;  // blocked at a receive of this channel
    int posted() const { return received + kRecvLookahead; }
    Message& at(int seq) { return ring[static_cast<size_t>(seq) & mask]; }
    double& post_at(int seq) { return post_ms[static_cast<unsigned>(seq) % kRecvLookahead]; }
    void grow();
  };

  struct SentMessage {  // a send a rank made
    Channel* channel = nullptr;
    int seq = 0;  // its number on the channel
  };

  // interleaved-1f1b: a rank's next forward (backward) in plans/schedule.h's order, advanced
  // as blocks finish so that the hot loop divides nothing (StageActionList::block does).
  struct ChunkCursor {
    int pos = 0;    // k mod pp
    int chunk = 0;  // ⌊k / pp⌋ mod V (a backward runs chunk V − 1 − this)
    int base = 0;   // ⌊k / (pp·V)⌋ · pp
    void advance(int pp, int virtual_stages) {
      if (++pos < pp) return;
      pos = 0;
      if (++chunk < virtual_stages) return;
      chunk = 0;
      base += pp;
    }
  };

  struct SimRank {
    const RankStepTimes* times = nullptr;  // its own action times, or null: the stage's
    double clock_ms = 0;
    double busy_ms = 0;
    int stage = 0;
    // The next block of its list.
    StageActionList::BlockCursor next;
    int tail = 0;                // after the blocks: a Tail
    bool computed = false;       // the block's compute has run; its send remains
    bool deciding = false;       // Gloo: its last send is made; whether it was posted is open
    bool not_posted = false;     // the play found that send's receive not posted before it
    Channel* inbox[2] = {};      // by direction: activations in, gradients in (none: null)
    Channel* outbox[2] = {};     // activations out, gradients out
    double transfer_ms[2] = {};  // one message on each outgoing link (one chunk per stage)
    // interleaved-1f1b: the replica's transfer times by chunk boundary (SimulationInput).
    const std::vector<double>* activation_ms = nullptr;
    const std::vector<double>* gradient_ms = nullptr;
    ChunkCursor next_forward, next_backward;    // interleaved-1f1b
    int sends = 0;                              // sends made so far
    SentMessage last_sends[kMaxSendsInFlight];  // send k at k % kMaxSendsInFlight
    double allreduce_ms = 0;                    // in its all-reduce action
    double work_ms = 0;  // stop_above: its compute and optimizer step, with mean times
    // By local chunk: when its last weight-gradient action (micro-batch m − 1's backward or W)
    // ended and how long that compute took; where its gradient buckets become ready.
    double weight_pass_end_ms[kMaxVirtualStages] = {};
    double weight_pass_ms[kMaxVirtualStages] = {};
    SentMessage& sent(int k) { return last_sends[static_cast<unsigned>(k) % kMaxSendsInFlight]; }
  };
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  // Where a rank is after its blocks: the stage's collectives synchronise its replicas.
  enum Tail { kTailAllReduce = 0, kTailStep = 1, kTailAllGather = 2, kTailDone = 3 };

  int sim_index(int pipeline_idx, int stage) const { return pipeline_idx * pp_ + stage; }
  void connect(int pipeline_idx, int stage);
  void reset();
  template <bool kRecord>
  void run(int idx);
  // The current block's send: false when the rank blocks (send limit, or Gloo's decision).
  template <bool kRecord>
  bool send(SimRank& rank, int direction, int micro_batch, int chunk);
  template <bool kRecord>
  bool wait_for_send_limit(SimRank& rank, int micro_batch, int chunk);
  bool decide_occupancy(SimRank& rank);  // Gloo: false while undecided
  // Places the channel's messages that are sent and posted; wakes whoever waits on it.
  template <bool kRecord>
  void place(Channel& channel) {
    if (channel.placed < channel.sent && channel.placed < channel.posted())
      place_pending<kRecord>(channel);
  }
  template <bool kRecord>
  void place_pending(Channel& channel);
  void wake(int idx) { ready_.push_back(idx); }
  // With every rank blocked: decides the earliest open send as not posted. False if none.
  bool release_earliest_decision();
  // Waits for the next message of the rank's inbox `direction` and posts the receive
  // kRecvLookahead on: false when it has not been sent yet (the rank blocks).
  template <bool kRecord>
  bool receive(SimRank& rank, int direction, int micro_batch, int chunk);
  template <bool kRecord>
  void compute(SimRank& rank, TimelineKind kind, int micro_batch, double duration_ms,
               int chunk = 0);
  // A collective of the stage's replicas (kTailAllReduce or kTailAllGather): false until every
  // played pipeline's rank of the stage has arrived; the last to arrive releases all.
  template <bool kRecord>
  bool collective(SimRank& rank, Tail phase);
  // With overlap: when the stage's buckets' collectives end, from the replicas' weight passes.
  double buckets_end_ms(int stage);
  template <bool kRecord>
  void run_tail(SimRank& rank);
  // The last weight-gradient action of local chunk `chunk` has just run for `compute_ms`.
  static void note_weight_pass(SimRank& rank, int chunk, double compute_ms) {
    rank.weight_pass_end_ms[chunk] = rank.clock_ms;
    rank.weight_pass_ms[chunk] = compute_ms;
  }
  void check_finished() const;
  // stop_above: each rank's work_ms, or false when the plays cannot stop early.
  bool prepare_stop();
  // Moves the rank's clock on to `until_ms` if that is later; then (stop_above) whether it
  // waited and its iteration now provably ends past the limit: the play stops. No branch on
  // whether it waits, a coin toss in the steady state.
  bool wait_until(SimRank& rank, double until_ms) {
    const bool waits = until_ms > rank.clock_ms;
    rank.clock_ms = std::max(rank.clock_ms, until_ms);
    if (!(waits & (rank.clock_ms - rank.busy_ms + rank.work_ms > stop_above_ms_))) return false;
    abandoned_ = true;
    return true;
  }

  const SimulationInput& in_;
  const int pp_;
  const int virtual_stages_;
  const int num_boundaries_;  // links between a pipeline's stages: pp − 1, or pp when it wraps
  const bool record_timeline_;
  std::vector<int> pipelines_;                    // replica of each played pipeline
  std::vector<StageActionList> lists_;            // by stage
  double stop_above_ms_ = kNever;  // stop_above; kNever while the play cannot stop
  bool abandoned_ = false;
  std::vector<SimRank> ranks_;                      // pipeline-major
  std::vector<std::vector<TimelineEvent>> events_;  // by sim rank, when recorded
  std::vector<Channel> channels_;                   // [pipeline][link][direction]
  std::vector<int> arrived_[2];                     // by stage: at the all-reduce, all-gather
  std::vector<int> ready_;
  std::vector<std::pair<double, double>> bucket_ready_;  // buckets_end_ms's scratch
  // Open Gloo send decisions: (send time, sim rank), earliest first; stale entries skipped.
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>>
      decisions_;
};

}  // namespace pipeplan
