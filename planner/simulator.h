// The simulator: plays every rank's action list (plans/schedule.h) as a discrete-event
// timeline and measures the iteration time, each rank's busy and idle time and the bubble.
#pragma once

#include <limits>
#include <vector>

#include "planner/simulation_input.h"
#include "planner/variability.h"
#include "plans/timeline.h"

namespace pipeplan {

/// What the simulator does besides timing.
struct SimulationOptions {
  bool record_timeline = true;  ///< fill SimulationResult::timeline (the search does not)
  /// Replicas whose transfer times are all equal behave identically; simulate one of each
  /// kind. Results are the same either way (a test checks it); only the work differs.
  bool merge_identical_replicas = true;
  /// Draws played when action times vary and they fit the draw budget (draws_fit_budget); 0
  /// plays the mean times only (the search does this before it knows whether a candidate could
  /// enter its top K).
  int variability_draws = kVariabilityDraws;
  /// With mean times (no input.rank_times; training), a play that can no longer end by this
  /// iteration, in ms, by more than a millionth of it stops early: result.abandoned, and no
  /// draws. The search passes its K-th best iteration: a candidate that cannot enter the top K
  /// is not played to the end. Infinity: every play runs to the end.
  double abandon_above_ms = std::numeric_limits<double>::infinity();
};

/// One simulated iteration.
struct SimulationResult {
  /// When the last rank finishes its optimizer step: with draws, their mean (never below the
  /// iteration with mean times: a pipeline waits for its slowest path, so variation only delays
  /// it).
  double iteration_ms = 0;
  /// The iteration with every action at its mean time; the timeline shows this one.
  double mean_times_iteration_ms = 0;
  std::vector<double> busy_ms;   ///< by rank: forward, backward, recompute, all-reduce,
                                 ///< optimizer, all-gather
  std::vector<double> idle_ms;   ///< by rank: iteration_ms − busy_ms (waits and the bubble)
  double bubble_fraction = 0;    ///< Σ idle_ms / (ranks · iteration_ms)
  Timeline timeline;             ///< every rank's events (none unless record_timeline)
  int variability_draws = 0;     ///< draws played (0: none, iteration_ms is the mean-times play)
  /// By rank, with mean times: the all-reduce action's time once every replica arrived (with
  /// overlap, the part of the buckets' collectives no backward hid).
  std::vector<double> allreduce_ms = {};
  /// The play stopped at options.abandon_above_ms: iteration_ms is a lower bound above it,
  /// busy_ms and idle_ms are partial, there are no draws and no timeline to go by.
  bool abandoned = false;
};

/// Plays stage_actions(schedule, pp, s, m, dp > 1, V) on every rank: compute actions run one at
/// a time in list order. Transfers follow the executor's policy (plans/schedule.h): a rank posts
/// its first kRecvLookahead receives of each kind (activations, gradients) when the iteration
/// starts and each further one as its wait for the receive kRecvLookahead before it returns; a
/// transfer starts once its send is made, its receive is posted and the directed link from the
/// sender to its peer is free, occupies the link for its transfer time, and its data arrives
/// at the end of it. Before a send the rank waits (idle; a send-wait event) until at most
/// kMaxSendsInFlight − 1 of its sends are incomplete. A send then lets the rank go on at once,
/// or with input.send_occupies_sender (Gloo), when its receive was posted before it, when the
/// transfer ends (idle time, not busy: the executor counts sends as neither compute nor
/// optimizer); a receive blocks the rank until the data
/// has arrived (a recv-wait event when it had to wait); an all-reduce starts when every
/// replica of the stage has reached it and lasts allreduce_ms, or with input.overlap_allreduce
/// until the last of the stage's buckets, started during the last backwards, is done (the
/// exposed part: result.allreduce_ms); then the optimizer step; then, with input.all_gather,
/// ZeRO-1's all-gather once every replica has reached it. A schedule that deadlocks
/// is a bug (PIPEPLAN_ASSERT). When a stage's action times vary (times_vary) and
/// options.variability_draws of them fit the draw budget (draws_fit_budget), the iteration (and
/// with it idle time and bubble) is the mean over the draws, each action's time drawn
/// independently with a fixed seed: the same input gives the same result
/// (planner/variability.h: drawn_iteration_ms); above the budget it is the mean-times play. No
/// rank's action list is built (plans/stage_action_list.h: StageActionList); memory holds
/// per-rank results, the messages in flight and, when recorded, the timeline.
SimulationResult simulate(const SimulationInput& input, const SimulationOptions& options = {});

}  // namespace pipeplan
