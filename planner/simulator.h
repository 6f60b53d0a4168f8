// The simulator: plays every rank's action list (plans/schedule.h) as a discrete-event
// timeline and measures the iteration time, each rank's busy and idle time and the bubble.
#pragma once

#include <limits>
#include <vector>

#include "plans/plan.h"
#include "plans/run.h"
#include "plans/timeline.h"

namespace pipeplan {

/// Per-stage durations, in ms, the same for each replica of the stage.
struct StageCosts {
  double fwd_ms = 0;        ///< one micro-batch
  double bwd_ms = 0;        ///< one micro-batch; zb-h1: its B (input gradient)
  double recompute_ms = 0;  ///< run just before each backward or B (checkpointed stages)
  double allreduce_ms = 0;  ///< after the last backward, once all replicas have arrived
  double optimizer_ms = 0;  ///< after the all-reduce
  /// Coefficients of variation of one micro-batch's forward (also its recompute) and backward
  /// time. With either above 0, simulate() also plays draws of the iteration in which every
  /// forward, recompute and backward takes a log-normal multiple (mean 1) of its time.
  double fwd_cv = 0;
  double bwd_cv = 0;  ///< also of zb-h1's B and W
  double bwd_weight_ms = 0;  ///< zb-h1: one micro-batch's W (weight gradients); else 0
  /// ZeRO-1: gathering the parameters after the optimizer step, once all replicas have arrived.
  double allgather_ms = 0;
  /// With SimulationInput::overlap_allreduce: the gradient buckets (allreduce_ms is their
  /// comm_ms summed), each started once every replica's last weight-gradient action (micro-batch
  /// m − 1's backward, or its W) of the bucket's chunk has passed its ready_fraction; the
  /// replicas run one bucket's collective at a time, and the all-reduce action waits for the last.
  std::vector<BucketPrediction> buckets = {};
};

/// Everything the simulator plays.
struct SimulationInput {
  Schedule schedule = Schedule::kOneFOneB;
  int pp = 1;
  int dp = 1;
  int num_micro_batches = 1;
  /// pp entries. Under interleaved-1f1b only their all-reduce, optimizer and variation are
  /// played (`chunks` has the compute).
  std::vector<StageCosts> stages;
  /// [replica][boundary c]: one micro-batch's activation from chunk c to c + 1 (stage c to
  /// c + 1 without chunks), in ms (latency + bytes / bandwidth of the link it crosses). pp·V − 1
  /// entries per replica. Under interleaved-1f1b chunk c runs on stage c mod pp, so boundaries
  /// c and c + pp share the link from stage c mod pp to the next (the last stage's next is 0).
  std::vector<std::vector<double>> activation_ms;
  /// [replica][boundary c]: one micro-batch's gradient from chunk c + 1 back to c, in ms.
  std::vector<std::vector<double>> gradient_ms;
  /// [replica][stage]: the rank, for the timeline and the per-rank results.
  std::vector<std::vector<int>> ranks;
  /// By rank, or empty: each rank's own forward, backward and recompute time per micro-batch
  /// (interleaved-1f1b: per chunk and micro-batch, index chunk · m + micro-batch) and optimizer
  /// time, replacing its stage's (compare replays measured steps with them). The all-reduce
  /// keeps the stage's time. With them, every replica is simulated.
  std::vector<RankStepTimes> rank_times;
  /// Whether a send keeps its rank until the transfer ends when its receive is already posted
  /// (send_occupies_sender of the plan's backend: Gloo). Otherwise, and for a send made before
  /// its receive is posted, the rank goes on at once and only the link is occupied.
  bool send_occupies_sender = false;
  /// V, the chunks each stage runs: 1, or >= 2 under interleaved-1f1b.
  int virtual_stages = 1;
  /// interleaved-1f1b: the forward, backward and recompute time of each chunk, pp·V entries by
  /// global chunk (local chunk v of stage s at v·pp + s); empty otherwise.
  std::vector<StageCosts> chunks = {};
  /// Whether gradient buckets start during the last backward (plan.data_parallel.overlap with
  /// dp > 1) instead of all at the all-reduce action.
  bool overlap_allreduce = false;
  /// Whether each action list ends with ZeRO-1's all-gather after the optimizer step.
  bool all_gather = false;
  /// Inference: every rank plays StageActionList::forward_only (schedule gpipe, V = 1, dp
  /// replicas independent): its forwards with their activation transfers and nothing after, so
  /// the result's iteration_ms is when the last stage's last forward ends.
  bool forward_only = false;
};

/// Draws of the iteration simulate() plays when action times vary (StageCosts::fwd_cv, bwd_cv).
inline constexpr int kVariabilityDraws = 32;

/// How simulate()'s draws treat the dp replicas (planner/variability.h: drawn_iteration).
enum class ReplicaDraws {
  kAuto,   ///< every replica while that is cheap (kEveryReplicaDrawBudget), folded above
  kEvery,  ///< draw and play every rank of every replica
  kFold,   ///< play one pipeline per replica kind; fold the slowest of the replicas in
};

/// What the simulator does besides timing.
struct SimulationOptions {
  bool record_timeline = true;  ///< fill SimulationResult::timeline (the search does not)
  /// Replicas whose transfer times are all equal behave identically; simulate one of each
  /// kind. Results are the same either way (a test checks it); only the work differs.
  bool merge_identical_replicas = true;
  /// Draws played when action times vary; 0 plays the mean times only (the search does this
  /// while it ranks candidates, and re-predicts its final plans with the draws).
  int variability_draws = kVariabilityDraws;
  ReplicaDraws replica_draws = ReplicaDraws::kAuto;  ///< how the draws play the replicas
  /// With mean times (no input.rank_times; training), a play that can no longer end by this
  /// iteration, in ms, by more than a millionth of it stops early: result.abandoned, and no
  /// draws. The search passes its K-th best iteration: a candidate that cannot enter the top K
  /// is not played to the end. Infinity: every play runs to the end.
  double abandon_above_ms = std::numeric_limits<double>::infinity();
};

/// One simulated iteration.
struct SimulationResult {
  /// When the last rank finishes its optimizer step: with varying action times the mean over
  /// the draws (never below the iteration with mean times: a pipeline waits for its slowest
  /// path, so variation only delays it).
  double iteration_ms = 0;
  /// The iteration with every action at its mean time; the timeline shows this one.
  double mean_times_iteration_ms = 0;
  std::vector<double> busy_ms;   ///< by rank: forward, backward, recompute, all-reduce,
                                 ///< optimizer, all-gather
  std::vector<double> idle_ms;   ///< by rank: iteration_ms − busy_ms (waits and the bubble)
  double bubble_fraction = 0;    ///< Σ idle_ms / (ranks · iteration_ms)
  Timeline timeline;             ///< every rank's events (none unless record_timeline)
  int variability_draws = 0;     ///< draws played (0: none; folded: per replica kind)
  bool replicas_folded = false;  ///< the draws folded the replicas in (ReplicaDraws)
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
/// is a bug (PIPEPLAN_ASSERT). When a stage's action times vary and input.rank_times is empty,
/// the iteration (and with it idle time and bubble) is the mean over options.variability_draws
/// draws, each action's time drawn independently with a fixed seed: the same input gives the
/// same result (planner/variability.h: drawn_iteration, with options.replica_draws). No rank's
/// action list is built (plans/stage_action_list.h: StageActionList); memory holds per-rank
/// results, the messages in flight and, when recorded, the timeline.
SimulationResult simulate(const SimulationInput& input, const SimulationOptions& options = {});

/// The replica kinds of an input: replicas with equal transfer times (activation_ms and
/// gradient_ms) behave identically, so one of each kind stands for the others.
struct ReplicaKinds {
  std::vector<int> kind_of;         ///< by replica: its kind
  std::vector<int> representative;  ///< by kind, in order of first appearance: its first replica
  std::vector<int> count;           ///< by kind: its replicas
};
ReplicaKinds replica_kinds(const SimulationInput& input);

/// Whether simulate() draws the input's action times: some stage's forward or backward varies
/// and no rank's times were measured (input.rank_times).
bool times_vary(const SimulationInput& input);

/// The draws step of simulate(), for a `result` of `input` with every action at its mean time
/// (busy_ms by rank, mean_times_iteration_ms): when action times vary, sets the iteration to
/// the mean over the draws (never below the mean-times one), each rank's idle time and the
/// bubble to match, and how the draws were played; otherwise leaves it as it is.
void add_variation(const SimulationInput& input, const SimulationOptions& options,
                   SimulationResult* result);

/// The simulator's input for a plan: stage costs from plan.predictions.stages (and the chunks'
/// from their `chunks`), transfer times from the stages' (chunks') boundary shapes ×
/// micro_batch_size over the cluster's intra- or inter-node link (by the nodes of the two
/// ranks), the rank map, and whether sends occupy their sender (plans/comm_backend.h: on Gloo
/// they do).
SimulationInput simulation_input(const Plan& plan);

}  // namespace pipeplan
