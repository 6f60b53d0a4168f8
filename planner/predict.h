// From a candidate's choices and its split to a complete plan: stages, rank map, every memory
// term and time, and the simulated iteration.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/layer_table.h"
#include "planner/partition.h"
#include "planner/placement.h"
#include "planner/simulator.h"
#include "planner/stage_cost.h"
#include "planner/time_model.h"
#include "plans/plan.h"
#include "plans/profile.h"

namespace pipeplan {

/// The inter-node bandwidth assumed when the user gives none: 100 Gbit/s (a common
/// InfiniBand EDR / 100 GbE link per node). Written into the plan's cluster and notes.
inline constexpr double kDefaultInterNodeBandwidthBytesPerS = 12.5e9;

/// What every candidate of one `pipeplan plan` run shares.
struct PlanningContext {
  const Profile* profile = nullptr;  ///< must outlive the context
  std::string profile_path;
  std::string profile_hash;  ///< file_hash of the profile
  Cluster cluster;           ///< devices, memory, devices_per_node, bandwidths, latency
  int64_t global_batch = 1;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  Precision precision = Precision::kFp32;  ///< the profile's: times were measured at it
  std::vector<std::string> notes;          ///< carried by every plan (assumptions made)
  /// Corrections from a measured run (planner/calibration.h), or none. Its times are already
  /// in `profile` (calibrated_profile); its memory corrections enter each stage's memory, and
  /// every plan records it.
  std::optional<Calibration> calibration;
  /// The overlap and bucket size of every plan with dp > 1 (--no-overlap, --bucket-size); the
  /// candidate decides zero.
  DataParallelSettings data_parallel{/*overlap=*/true, kDefaultBucketBytes, /*zero=*/0};
  /// Training plans, or forward-only inference plans (--inference): a forward-only layer table
  /// (LayerTable's forward_only), forward_stage_memory, stage costs of the forward and its
  /// activation send, no data-parallel collectives, and inference timing (predict_timing).
  PlanMode mode = PlanMode::kTraining;

  /// What the search relies on, naming the flags: a profile; --devices and
  /// --devices-per-node in [1, kMaxDevices]; --device-memory in [1, kMaxBytes]; --global-batch
  /// in [1, kMaxBatchSize]; --inter-node-bandwidth 0 or in [kMinBandwidthBytesPerS,
  /// kMaxBandwidthBytesPerS] (common/limits.h); for training, a step time of --optimizer for
  /// every layer of the profile (naming profile_path). Throws Error(kBadInput).
  void validate() const;
};

/// The choices that make one candidate plan.
struct Candidate {
  int dp = 1;
  int pp = 1;
  int64_t micro_batch_size = 1;
  int num_micro_batches = 1;  ///< global_batch / (dp · micro_batch_size)
  Schedule schedule = Schedule::kOneFOneB;
  CheckpointPolicy policy = CheckpointPolicy::kNone;
  Layout layout = Layout::kReplicaMajor;
  int virtual_stages = 1;  ///< V: >= 2 with interleaved-1f1b (pp·V chunks), else 1
  int zero = 0;            ///< 1: ZeRO-1 (dp > 1 only)
};

/// The cluster of a plan: device kind from the profile, the profile's point-to-point latency
/// and bandwidth as the intra-node link (0 = free when the profile has no interconnect), and
/// the given inter-node bandwidth.
Cluster make_cluster(const Profile& profile, int devices, int64_t device_memory_bytes,
                     int devices_per_node, double inter_node_bandwidth_bytes_per_s);

/// The assumptions a plan states in predictions.notes: communication predicted free when the
/// profile has no interconnect measurement; the inter-node bandwidth assumed when the cluster
/// spans nodes and the user gave none.
std::vector<std::string> planning_notes(const Profile& profile, const Cluster& cluster,
                                        bool inter_node_bandwidth_given);

/// The GPU-sized device memory from which planning with a CPU profile draws a warning: 16 GiB.
inline constexpr int64_t kGpuSizedMemoryBytes = int64_t{16} << 30;

/// What may make a plan's numbers mislead, one line each, for `plan` to print as warnings:
///  - a CPU profile planned for devices of kGpuSizedMemoryBytes or more (a GPU cluster): the
///    times are the profiled CPU's;
///  - a layer whose time or memory fit falls as the batch grows (negative slope), naming the
///    layer and the fit: its values at other batch sizes are guesses;
///  - a layer whose forward or backward time at `micro_batch_size` is clamped to 0 because its
///    fit is negative there (outside the profiled batch sizes).
/// Each line starts with context.profile_path; without `micro_batch_size` (no plan was found)
/// the clamping warnings are left out.
std::vector<std::string> planning_warnings(const PlanningContext& context,
                                           std::optional<int64_t> micro_batch_size);

/// The partition problem of a candidate: memory settings, links, which boundaries cross nodes
/// (interleaved-1f1b: its pp stages with V chunks each, the pp·V − 1 chunk boundaries crossing
/// nodes or not; split by interleaved_partition).
PartitionProblem partition_problem(const PlanningContext& context, const Candidate& candidate);

/// The plan of a feasible split (pp + 1 boundaries, or interleaved-1f1b's pp·V + 1 with a
/// checkpoint flag per chunk) with every prediction the models give filled in; interleaved-1f1b's
/// stages predict each chunk (StagePrediction::chunks: times from the layer table, p2p_ms the
/// chunk's sends of its input gradient and output activation), their sums, and the memory of the
/// stage's chunks together (interleaved_stage_memory); the
/// simulated ones (iteration, samples/s, bubble, busy and idle) are filled by predict_timing.
/// Throws Error(kBadInput) when a prediction passes the limits a plan file may hold
/// (kMaxTimeMs per micro-batch, kMaxIterationMs per iteration): the links are too slow for the
/// model, so that the planner never writes a plan its reader refuses.
Plan build_plan(const PlanningContext& context, const LayerTable& table, const Candidate& candidate,
                const PartitionResult& split, const std::string& partition_name);

/// Refuses (Error(kBadInput), naming `document`) a plan none of whose stages predicts compute
/// time: its iteration, throughput and bubble would be numbers without meaning (a plan made by
/// hand, or from a profile without times). `simulate` and `compare` call it.
void check_predicts_compute(const Plan& plan, std::string_view document);

/// Inference plans (plan.mode): the latency of one request and the interval of back-to-back
/// requests, from two forward-only plays (SimulationInput::forward_only) of each replica:
///
///   latency_ms   = T(m)           one request, its m micro-batches from stage 0's first
///                                 forward to the last stage's last one
///   iteration_ms = T(2m) − T(m)   what a second request adds: the steady-state interval
///
/// (at least the interval of the plays with mean action times, at most latency_ms). With
/// constant times and free links, T(k) = Σ_s f_s + (k − 1) · max_s f_s (a micro-batch's path
/// through every stage, then one bottleneck forward per further micro-batch), so the interval is
/// m · max_s f_s, the bottleneck stage's request;
/// transfers act as one more stage of their transfer time per link, and on Gloo a send holds its
/// sender, adding to its stage's. Each play is the mean over the draws when forward times vary.
/// busy_ms is a stage's forwards of one request, idle_ms = iteration_ms − busy_ms (at least 0),
/// bubble_fraction their share as for training. Returns the one-request play.
SimulationResult predict_inference_timing(Plan* plan, const SimulationOptions& options);

/// The two plays of predict_inference_timing on a forward-only `input`: the one-request play
/// (its iteration_ms is the latency) and the interval T(2m) − T(m): at least that of the plays
/// with mean times (variation only slows a pipeline), at most the latency. Both plays draw only
/// when the draws of the two-request play fit the budget (draws_fit_budget), else neither does.
std::pair<SimulationResult, double> play_requests(SimulationInput input,
                                                  const SimulationOptions& options);

/// Each rank's idle time at back-to-back requests `interval_ms` apart: the interval less its busy
/// time for one request (at least 0), set in `result`; returns the bubble fraction (idle over
/// ranks × interval; 0 for no interval).
double idle_at_interval(SimulationResult* result, double interval_ms);

/// Simulates `plan` and fills iteration_ms, samples_per_s, bubble_fraction (0 when pp = 1),
/// iteration_estimate (draws when the simulation drew, else mean-times), each stage's busy_ms and
/// idle_ms (equal over a stage's replicas: they do the same work in the same iteration), and a
/// note when its action times vary but their draws do not fit the budget (planner/variability.h:
/// draws_fit_budget; for inference, the two-request play's). Returns the simulation (with its
/// timeline when options ask for it). Throws Error(kBadInput) when the iteration passes
/// kMaxIterationMs.
SimulationResult predict_timing(Plan* plan, const SimulationOptions& options);

/// For a plan that predict_timing predicted with mean times (variability_draws = 0): when its
/// action times vary and their draws fit the budget, predicts it again with them
/// (SimulationOptions' defaults, no timeline) and returns true; else leaves it and returns false.
/// Either way the plan then holds what predict_timing with the draws gives.
bool predict_variation(Plan* plan);

}  // namespace pipeplan
