// The simulator: a discrete-event player of the schedule's action lists.
#include "planner/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include "common/error.h"
#include "planner/time_model.h"
#include "plans/comm_backend.h"
#include "plans/schedule.h"

namespace pipeplan {
namespace {

constexpr double kNotSent = -1;  // arrival time of a message not sent yet
constexpr int kActivation = 0;   // message directions on a boundary
constexpr int kGradient = 1;

// One simulated rank: a stage of one representative replica, with its links resolved once
// (index 0: activations, 1: gradients).
struct SimRank {
  int stage = 0;
  const RankStepTimes* times = nullptr;  // its own action times, or null: the stage's
  size_t next = 0;
  double clock_ms = 0;
  double busy_ms = 0;
  bool waits_for_message = false;     // blocked at a receive
  double* inbox[2] = {};              // arrival time by micro-batch of what it receives
  double* outbox[2] = {};             // arrival time by micro-batch of what it sends
  double* link_free_ms[2] = {};       // when each outgoing link is free again
  double transfer_ms[2] = {};         // one message on each outgoing link
  int receiver[2] = {-1, -1};         // sim index of each outgoing link's receiver
  std::vector<TimelineEvent> events;  // rank = stage, peer = peer stage; mapped at the end

  // Its durations: its own times when it has them, else its stage's `costs`.
  double fwd_ms(const StageCosts& costs, int mb) const {
    return times ? times->fwd_ms[mb] : costs.fwd_ms;
  }
  double bwd_ms(const StageCosts& costs, int mb) const {
    return times ? times->bwd_ms[mb] : costs.bwd_ms;
  }
  double recompute_ms(const StageCosts& costs, int mb) const {
    if (!times) return costs.recompute_ms;
    return times->recompute_ms.empty() ? 0 : times->recompute_ms[mb];
  }
  double optimizer_ms(const StageCosts& costs) const {
    return times ? times->optimizer_ms : costs.optimizer_ms;
  }
};

class Simulator {
 public:
  Simulator(const SimulationInput& input, const SimulationOptions& options)
      : in_(input), options_(options), m_(input.num_micro_batches) {
    group_replicas();
    for (int stage = 0; stage < in_.pp; ++stage)
      actions_.push_back(stage_actions(in_.schedule, in_.pp, stage, m_, in_.dp > 1));
    const size_t slots = groups_.size() * std::max(in_.pp - 1, 0) * 2;
    arrival_ms_.assign(slots * m_, kNotSent);
    link_free_ms_.assign(slots, 0);
    arrived_at_allreduce_.assign(in_.pp, 0);
    for (size_t group = 0; group < groups_.size(); ++group)
      for (int stage = 0; stage < in_.pp; ++stage) connect(static_cast<int>(group), stage);
  }

  SimulationResult run() {
    for (size_t idx = 0; idx < ranks_.size(); ++idx) ready_.push_back(static_cast<int>(idx));
    while (!ready_.empty()) {
      const int idx = ready_.back();
      ready_.pop_back();
      advance(idx);
    }
    for (const SimRank& rank : ranks_)
      PIPEPLAN_ASSERT(rank.next == actions_[rank.stage].size(), "schedule deadlock: stage ",
                      rank.stage, " stuck at ", to_string(actions_[rank.stage][rank.next]));
    return collect();
  }

 private:
  void group_replicas() {
    std::map<std::pair<std::vector<double>, std::vector<double>>, int> seen;
    replica_group_.resize(in_.dp);
    for (int replica = 0; replica < in_.dp; ++replica) {
      const int next_group = static_cast<int>(groups_.size());
      int group = next_group;
      if (options_.merge_identical_replicas && in_.rank_times.empty())
        group = seen.emplace(std::make_pair(in_.activation_ms[replica], in_.gradient_ms[replica]),
                             next_group)
                    .first->second;
      if (group == next_group) groups_.emplace_back();
      groups_[group].push_back(replica);
      replica_group_[replica] = group;
    }
  }

  // Adds the sim rank of `stage` of `group` with pointers to its links.
  void connect(int group, int stage) {
    ranks_.emplace_back();
    SimRank& rank = ranks_.back();
    rank.stage = stage;
    const int representative = groups_[group].front();
    const int idx = sim_index(group, stage);
    if (!in_.rank_times.empty()) rank.times = &in_.rank_times[in_.ranks[representative][stage]];
    if (stage + 1 < in_.pp) {  // activations out, gradients in, over boundary `stage`
      rank.outbox[kActivation] = &arrival(group, stage, kActivation, 0);
      rank.link_free_ms[kActivation] = &link_free_ms_[link(group, stage, kActivation)];
      rank.transfer_ms[kActivation] = in_.activation_ms[representative][stage];
      rank.receiver[kActivation] = idx + 1;
      rank.inbox[kGradient] = &arrival(group, stage, kGradient, 0);
    }
    if (stage > 0) {  // activations in, gradients out, over boundary `stage − 1`
      rank.inbox[kActivation] = &arrival(group, stage - 1, kActivation, 0);
      rank.outbox[kGradient] = &arrival(group, stage - 1, kGradient, 0);
      rank.link_free_ms[kGradient] = &link_free_ms_[link(group, stage - 1, kGradient)];
      rank.transfer_ms[kGradient] = in_.gradient_ms[representative][stage - 1];
      rank.receiver[kGradient] = idx - 1;
    }
  }

  size_t link(int group, int boundary, int direction) const {
    return (static_cast<size_t>(group) * (in_.pp - 1) + boundary) * 2 + direction;
  }
  double& arrival(int group, int boundary, int direction, int micro_batch) {
    return arrival_ms_[link(group, boundary, direction) * m_ + micro_batch];
  }
  int sim_index(int group, int stage) const { return group * in_.pp + stage; }

  void record(SimRank& rank, TimelineKind kind, int micro_batch, double start, double end,
              int peer_stage) {
    if (record_timeline_ && end > start)
      rank.events.push_back({rank.stage, kind, micro_batch, start, end, peer_stage});
  }

  void compute(SimRank& rank, TimelineKind kind, int micro_batch, double duration_ms) {
    record(rank, kind, micro_batch, rank.clock_ms, rank.clock_ms + duration_ms, -1);
    rank.clock_ms += duration_ms;
    rank.busy_ms += duration_ms;
  }

  void send(SimRank& rank, int direction, int micro_batch) {
    double& link_free = *rank.link_free_ms[direction];
    const double start = std::max(rank.clock_ms, link_free);
    link_free = start + rank.transfer_ms[direction];
    rank.outbox[direction][micro_batch] = link_free;
    const int peer_stage = direction == kActivation ? rank.stage + 1 : rank.stage - 1;
    record(rank, TimelineKind::kSend, micro_batch, start, link_free, peer_stage);
    if (in_.send_occupies_sender) rank.clock_ms = link_free;
    SimRank& receiver = ranks_[rank.receiver[direction]];
    if (receiver.waits_for_message) {
      receiver.waits_for_message = false;
      ready_.push_back(rank.receiver[direction]);
    }
  }

  // False when the data has not been sent yet (the rank blocks).
  bool receive(SimRank& rank, int direction, int micro_batch) {
    const double at = rank.inbox[direction][micro_batch];
    if (at == kNotSent) return false;
    if (at > rank.clock_ms) {
      const int peer_stage = direction == kActivation ? rank.stage - 1 : rank.stage + 1;
      record(rank, TimelineKind::kRecvWait, micro_batch, rank.clock_ms, at, peer_stage);
      rank.clock_ms = at;
    }
    return true;
  }

  // False until every group's rank of the stage has arrived; the last to arrive releases all.
  bool all_reduce(SimRank& rank) {
    if (++arrived_at_allreduce_[rank.stage] < static_cast<int>(groups_.size())) return false;
    double start = 0;
    for (size_t group = 0; group < groups_.size(); ++group)
      start = std::max(start, ranks_[sim_index(static_cast<int>(group), rank.stage)].clock_ms);
    for (size_t group = 0; group < groups_.size(); ++group) {
      const int idx = sim_index(static_cast<int>(group), rank.stage);
      SimRank& member = ranks_[idx];
      member.clock_ms = start;
      compute(member, TimelineKind::kAllReduce, -1, in_.stages[rank.stage].allreduce_ms);
      ++member.next;
      if (&member != &rank) ready_.push_back(idx);
    }
    return true;
  }

  // Runs rank `idx` until it blocks or finishes. Compute actions take the hot path inline;
  // transfers and collectives go through send, receive and all_reduce.
  void advance(int idx) {
    SimRank& rank = ranks_[idx];
    const std::vector<Action>& actions = actions_[rank.stage];
    const StageCosts& costs = in_.stages[rank.stage];
    const size_t count = actions.size();
    while (rank.next < count) {
      const Action& action = actions[rank.next];
      switch (action.kind) {
        case ActionKind::kForward:
          compute(rank, TimelineKind::kForward, action.micro_batch,
                  rank.fwd_ms(costs, action.micro_batch));
          break;
        case ActionKind::kBackward:
          if (const double ms = rank.recompute_ms(costs, action.micro_batch); ms > 0)
            compute(rank, TimelineKind::kRecompute, action.micro_batch, ms);
          compute(rank, TimelineKind::kBackward, action.micro_batch,
                  rank.bwd_ms(costs, action.micro_batch));
          break;
        case ActionKind::kSendActivation:
          send(rank, kActivation, action.micro_batch);
          break;
        case ActionKind::kSendGradient:
          send(rank, kGradient, action.micro_batch);
          break;
        case ActionKind::kRecvActivation:
          if (!receive(rank, kActivation, action.micro_batch)) return block(rank);
          break;
        case ActionKind::kRecvGradient:
          if (!receive(rank, kGradient, action.micro_batch)) return block(rank);
          break;
        case ActionKind::kAllReduce:
          if (!all_reduce(rank)) return;  // the last replica to arrive resumes it
          continue;                       // all_reduce advanced `next` for every member
        case ActionKind::kOptimizerStep:
          compute(rank, TimelineKind::kOptimizer, -1, rank.optimizer_ms(costs));
          break;
      }
      ++rank.next;
    }
  }

  static void block(SimRank& rank) { rank.waits_for_message = true; }

  SimulationResult collect() const {
    SimulationResult result;
    for (const SimRank& rank : ranks_)
      result.iteration_ms = std::max(result.iteration_ms, rank.clock_ms);
    const size_t num_ranks = static_cast<size_t>(in_.dp) * in_.pp;
    result.busy_ms.assign(num_ranks, 0);
    result.idle_ms.assign(num_ranks, 0);
    result.timeline.rank_stages.assign(num_ranks, 0);
    double idle_total = 0;
    for (int replica = 0; replica < in_.dp; ++replica)
      for (int stage = 0; stage < in_.pp; ++stage) {
        const int rank = in_.ranks[replica][stage];
        const SimRank& sim = ranks_[sim_index(replica_group_[replica], stage)];
        result.busy_ms[rank] = sim.busy_ms;
        result.idle_ms[rank] = result.iteration_ms - sim.busy_ms;
        idle_total += result.idle_ms[rank];
        result.timeline.rank_stages[rank] = stage;
        for (TimelineEvent event : sim.events) {
          event.rank = rank;
          if (event.peer >= 0) event.peer = in_.ranks[replica][event.peer];
          result.timeline.events.push_back(event);
        }
      }
    result.bubble_fraction =
        result.iteration_ms > 0 ? idle_total / (num_ranks * result.iteration_ms) : 0;
    result.timeline.iteration_ms = result.iteration_ms;
    result.timeline.bubble_fraction = result.bubble_fraction;
    return result;
  }

  const SimulationInput& in_;
  const SimulationOptions& options_;
  const bool record_timeline_ = options_.record_timeline;
  const int m_;
  std::vector<std::vector<int>> groups_;  // replicas of each group; the first represents it
  std::vector<int> replica_group_;
  std::vector<std::vector<Action>> actions_;  // by stage; peers are stages
  std::vector<SimRank> ranks_;                // group-major
  std::vector<double> arrival_ms_;
  std::vector<double> link_free_ms_;
  std::vector<int> arrived_at_allreduce_;
  std::vector<int> ready_;
};

void check_input(const SimulationInput& in) {
  PIPEPLAN_ASSERT(in.pp >= 1 && in.dp >= 1 && in.num_micro_batches >= 1);
  PIPEPLAN_ASSERT(static_cast<int>(in.stages.size()) == in.pp);
  PIPEPLAN_ASSERT(static_cast<int>(in.activation_ms.size()) == in.dp &&
                  static_cast<int>(in.gradient_ms.size()) == in.dp &&
                  static_cast<int>(in.ranks.size()) == in.dp);
  for (int replica = 0; replica < in.dp; ++replica)
    PIPEPLAN_ASSERT(static_cast<int>(in.activation_ms[replica].size()) == in.pp - 1 &&
                    static_cast<int>(in.gradient_ms[replica].size()) == in.pp - 1 &&
                    static_cast<int>(in.ranks[replica].size()) == in.pp);
  PIPEPLAN_ASSERT(in.rank_times.empty() || static_cast<int>(in.rank_times.size()) == in.dp * in.pp);
  for (const RankStepTimes& times : in.rank_times)
    PIPEPLAN_ASSERT(static_cast<int>(times.fwd_ms.size()) == in.num_micro_batches &&
                    static_cast<int>(times.bwd_ms.size()) == in.num_micro_batches &&
                    (times.recompute_ms.empty() ||
                     static_cast<int>(times.recompute_ms.size()) == in.num_micro_batches));
}

bool times_vary(const SimulationInput& in) {
  if (!in.rank_times.empty()) return false;  // measured action times: nothing to draw
  for (const StageCosts& stage : in.stages)
    if (stage.fwd_cv > 0 || stage.bwd_cv > 0) return true;
  return false;
}

// Log-normal multipliers with mean 1, from a fixed-seed generator whose sequence the C++
// standard fixes (std::lognormal_distribution's is left to the library).
class Multipliers {
 public:
  static constexpr double kTwoPi = 6.283185307179586;

  // One multiplier for a time with coefficient of variation `cv` (1 when cv is 0).
  double draw(double cv) {
    if (cv <= 0) return 1.0;
    const double sigma = std::sqrt(std::log1p(cv * cv));
    return std::exp(sigma * standard_normal() - sigma * sigma / 2);
  }

 private:
  double uniform() {  // in (0, 1)
    return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53;
  }
  double standard_normal() {  // Box-Muller; the second value is kept for the next call
    if (spare_) {
      const double value = *spare_;
      spare_.reset();
      return value;
    }
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = kTwoPi * uniform();
    spare_ = radius * std::sin(angle);
    return radius * std::cos(angle);
  }

  std::mt19937_64 engine_{0x5eed};
  std::optional<double> spare_;
};

// Every rank's forward, recompute and backward times for one draw of the iteration.
void draw_rank_times(const SimulationInput& mean, Multipliers& multipliers,
                     std::vector<RankStepTimes>& times) {
  const int m = mean.num_micro_batches;
  times.resize(static_cast<size_t>(mean.dp) * mean.pp);
  for (int replica = 0; replica < mean.dp; ++replica)
    for (int stage = 0; stage < mean.pp; ++stage) {
      const StageCosts& costs = mean.stages[stage];
      RankStepTimes& rank = times[mean.ranks[replica][stage]];
      rank.fwd_ms.resize(m);
      rank.bwd_ms.resize(m);
      rank.recompute_ms.assign(costs.recompute_ms > 0 ? m : 0, 0.0);
      for (int mb = 0; mb < m; ++mb) {
        rank.fwd_ms[mb] = costs.fwd_ms * multipliers.draw(costs.fwd_cv);
        rank.bwd_ms[mb] = costs.bwd_ms * multipliers.draw(costs.bwd_cv);
        if (costs.recompute_ms > 0)
          rank.recompute_ms[mb] = costs.recompute_ms * multipliers.draw(costs.fwd_cv);
      }
      rank.optimizer_ms = costs.optimizer_ms;
    }
}

}  // namespace

SimulationResult simulate(const SimulationInput& input, const SimulationOptions& options) {
  check_input(input);
  SimulationResult result = Simulator(input, options).run();
  result.mean_times_iteration_ms = result.iteration_ms;
  if (options.variability_draws <= 0 || !times_vary(input)) return result;
  SimulationInput drawn = input;
  Multipliers multipliers;
  const SimulationOptions quiet{/*record_timeline=*/false, /*merge_identical_replicas=*/false, 0};
  double total_ms = 0;
  for (int draw = 0; draw < options.variability_draws; ++draw) {
    draw_rank_times(input, multipliers, drawn.rank_times);
    total_ms += Simulator(drawn, quiet).run().iteration_ms;
  }
  const double iteration_ms = std::max(result.iteration_ms, total_ms / options.variability_draws);
  double idle_total = 0;
  for (size_t rank = 0; rank < result.busy_ms.size(); ++rank) {
    result.idle_ms[rank] = iteration_ms - result.busy_ms[rank];
    idle_total += result.idle_ms[rank];
  }
  result.iteration_ms = iteration_ms;
  result.bubble_fraction = idle_total / (static_cast<double>(result.busy_ms.size()) * iteration_ms);
  result.timeline.bubble_fraction = result.bubble_fraction;
  return result;
}

SimulationInput simulation_input(const Plan& plan) {
  SimulationInput in;
  in.schedule = plan.schedule;
  in.pp = plan.pp;
  in.dp = plan.dp;
  in.num_micro_batches = plan.num_micro_batches;
  in.send_occupies_sender = send_occupies_sender(choose_backend(plan));
  for (const StagePrediction& stage : plan.predictions.stages)
    in.stages.push_back({stage.fwd_ms, stage.bwd_ms, stage.recompute_ms, stage.allreduce_ms,
                         stage.optimizer_ms, stage.fwd_cv, stage.bwd_cv});
  in.ranks.assign(plan.dp, std::vector<int>(plan.pp, 0));
  for (const RankAssignment& assignment : plan.ranks)
    in.ranks[assignment.replica][assignment.stage] = assignment.rank;
  const LinkCosts links = link_costs(plan.cluster);
  in.activation_ms.assign(plan.dp, std::vector<double>(std::max(plan.pp - 1, 0), 0));
  in.gradient_ms = in.activation_ms;
  for (int boundary = 0; boundary + 1 < plan.pp; ++boundary) {
    const StagePlan& stage = plan.stages[boundary];
    const int64_t bytes =
        activation_bytes(stage.output_sample_shape, stage.output_dtype, plan.micro_batch_size);
    for (int replica = 0; replica < plan.dp; ++replica) {
      const bool inter_node = plan.ranks[in.ranks[replica][boundary]].node !=
                              plan.ranks[in.ranks[replica][boundary + 1]].node;
      const double ms = transfer_ms(bytes, links.bandwidth(inter_node), links.latency_ms);
      in.activation_ms[replica][boundary] = ms;
      in.gradient_ms[replica][boundary] = ms;
    }
  }
  return in;
}

}  // namespace pipeplan
