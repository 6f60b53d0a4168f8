// What the simulator plays: per-stage costs, transfer times and the rank map of one iteration,
// and how a plan becomes one.
#pragma once

#include <vector>

#include "plans/plan.h"
#include "plans/run.h"

namespace pipeplan {

/// Per-stage durations, in ms, the same for each replica of the stage.
struct StageCosts {
  double fwd_ms = 0;        ///< one micro-batch
  double bwd_ms = 0;        ///< one micro-batch; zb-h1: its B (input gradient)
  double recompute_ms = 0;  ///< run just before each backward or B (stages that recompute)
  double allreduce_ms = 0;  ///< after the last backward, once all replicas have arrived
  double optimizer_ms = 0;  ///< after the all-reduce
  /// Coefficients of variation of one micro-batch's forward (also its recompute) and backward
  /// time. With either above 0, simulate() also plays draws of the iteration (within the draw
  /// budget: planner/variability.h) in which every forward, recompute and backward takes a
  /// log-normal multiple (mean 1) of its time.
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

/// The replica kinds of an input: replicas with equal transfer times (activation_ms and
/// gradient_ms) behave identically, so one of each kind stands for the others.
struct ReplicaKinds {
  std::vector<int> kind_of;         ///< by replica: its kind
  std::vector<int> representative;  ///< by kind, in order of first appearance: its first replica
  std::vector<int> count;           ///< by kind: its replicas
};
ReplicaKinds replica_kinds(const SimulationInput& input);

/// Whether the input's action times vary, for simulate() to draw: some stage's forward or
/// backward varies and no rank's times were measured (input.rank_times).
bool times_vary(const SimulationInput& input);

/// The simulator's input for a plan: stage costs from plan.predictions.stages (and the chunks'
/// from their `chunks`), transfer times from the stages' (chunks') boundary shapes ×
/// micro_batch_size over the cluster's intra- or inter-node link (by the nodes of the two
/// ranks), the rank map, and whether sends occupy their sender (plans/comm_backend.h: on Gloo
/// they do).
SimulationInput simulation_input(const Plan& plan);

}  // namespace pipeplan
