// The simulator's discrete-event core: plays the schedule's action lists of one or more
// pipelines that meet only at their stages' all-reduces.
#pragma once

#include <vector>

#include "planner/lognormal.h"
#include "planner/simulator.h"
#include "plans/schedule.h"
#include "plans/stage_action_list.h"

namespace pipeplan {

/// Plays one iteration of `pipelines` (each a replica of the input, whose transfer times it
/// uses) as simulate() describes: compute in list order, sends that occupy their directed link
/// (and, with send_occupies_sender, their rank), receives that block until the data arrives,
/// an all-reduce per stage that starts when every played pipeline's rank of the stage reached
/// it, then the optimizer step. Holds no action list (plans/stage_action_list.h: StageActionList) and
/// only the messages in flight: with 1f1b at most a stage's warm-up, pp − s, on the links of
/// stage s, whatever the micro-batches (gpipe sends all forwards first: up to m per link).
/// Under interleaved-1f1b a link carries the messages of every chunk boundary it serves, in one
/// order both ends share (schedule_test checks it), so one channel per link still pairs them.
/// Reusable: play() starts every iteration afresh.
class PipelinePlayer {
 public:
  /// `input` must outlive the player; `pipelines` lists replica indices (not empty).
  PipelinePlayer(const SimulationInput& input, std::vector<int> pipelines, bool record_timeline);

  /// Replaces the action times of `stage` of pipeline `pipeline_idx` (an index into the
  /// constructor's list) by `times` (kept by pointer; null: the stage's mean times again).
  void set_times(int pipeline_idx, int stage, const RankStepTimes* times) {
    ranks_[sim_index(pipeline_idx, stage)].times = times;
  }

  /// With `multipliers` (kept by pointer; null: off), every forward, recompute and backward
  /// takes its time (the rank's own or its stage's) times a fresh draw for its stage's
  /// coefficient of variation (StageCosts::fwd_cv, bwd_cv), drawn as it is played.
  void draw_times(FastMultipliers* multipliers) { multipliers_ = multipliers; }

  /// Plays one iteration and returns when its last rank finishes, in ms. A schedule that
  /// deadlocks is a bug (PIPEPLAN_ASSERT).
  double play();

  /// After play(): the busy time (forward, backward, recompute, all-reduce, optimizer) of one
  /// played rank, in ms.
  double busy_ms(int pipeline_idx, int stage) const {
    return ranks_[sim_index(pipeline_idx, stage)].busy_ms;
  }
  /// After play(): one played rank's events, with rank = its stage and peer = the peer stage
  /// (the caller maps them to ranks); none without record_timeline.
  const std::vector<TimelineEvent>& events(int pipeline_idx, int stage) const {
    static const std::vector<TimelineEvent> kNone;
    return record_timeline_ ? events_[sim_index(pipeline_idx, stage)] : kNone;
  }

 private:
  // Messages on one directed link in the order sent, which is the order they are received
  // (schedule_test checks the pairing): the arrival time of each one not yet received, in a
  // ring whose capacity is a power of two.
  struct Channel {
    std::vector<double> ring;
    size_t head = 0;
    size_t count = 0;
    double link_free_ms = 0;  // when the link can start the next transfer
    void push(double at_ms) {
      if (count == ring.size()) grow();
      ring[(head + count++) & (ring.size() - 1)] = at_ms;
    }
    double pop() {
      const double at_ms = ring[head];
      head = (head + 1) & (ring.size() - 1);
      --count;
      return at_ms;
    }
    void grow();
  };

  // interleaved-1f1b: where a rank's next forward (or backward) is in the order of
  // plans/schedule.h — its micro-batch base + pos and its chunk — advanced as blocks finish, so
  // that the hot loop divides nothing (StageActionList::block works each one out anew).
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
    int block = 0;                   // next ComputeBlock of its list
    int tail = 0;                    // after the blocks: 0 all-reduce, 1 step, 2 done
    bool waits_for_message = false;  // blocked at a receive
    int inbox[2] = {-1, -1};         // channel by direction: activations in, gradients in
    int outbox[2] = {-1, -1};        // activations out, gradients out
    double transfer_ms[2] = {};      // one message on each outgoing link (one chunk per stage)
    // interleaved-1f1b: the replica's transfer times by chunk boundary (SimulationInput).
    const std::vector<double>* activation_ms = nullptr;
    const std::vector<double>* gradient_ms = nullptr;
    ChunkCursor next_forward, next_backward;  // interleaved-1f1b
  };

  int sim_index(int pipeline_idx, int stage) const { return pipeline_idx * pp_ + stage; }
  void connect(int pipeline_idx, int stage);
  void reset();
  template <bool kRecord>
  void run(int idx);
  // The rank a message of `direction` from `rank` goes to: the next (previous) stage of its
  // pipeline, the first (last) one after the last (first) under interleaved-1f1b.
  int neighbour(const SimRank& rank, int direction) const;
  template <bool kRecord>
  void send(SimRank& rank, int direction, int micro_batch, int chunk);
  template <bool kRecord>
  bool receive(SimRank& rank, int direction, int micro_batch, int chunk);
  template <bool kRecord>
  void compute(SimRank& rank, TimelineKind kind, int micro_batch, double duration_ms,
               int chunk = 0);
  template <bool kRecord>
  bool all_reduce(SimRank& rank);
  template <bool kRecord>
  void run_tail(SimRank& rank);
  void check_finished() const;

  const SimulationInput& in_;
  const int pp_;
  const int virtual_stages_;
  const int num_boundaries_;  // links between a pipeline's stages: pp − 1, or pp when it wraps
  const bool record_timeline_;
  std::vector<int> pipelines_;                    // replica of each played pipeline
  std::vector<StageActionList> lists_;            // by stage
  std::vector<LogNormal> fwd_shape_, bwd_shape_;  // by stage
  FastMultipliers* multipliers_ = nullptr;
  std::vector<SimRank> ranks_;                      // pipeline-major
  std::vector<std::vector<TimelineEvent>> events_;  // by sim rank, when recorded
  std::vector<Channel> channels_;                   // [pipeline][link][direction]
  std::vector<int> arrived_at_allreduce_;           // by stage
  std::vector<int> ready_;
};

}  // namespace pipeplan
