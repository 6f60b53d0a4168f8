// Building plans from candidates: stage shapes, rank map, memory terms, times, simulation.
#include "planner/predict.h"

#include <algorithm>

#include "common/error.h"
#include "common/limits.h"
#include "common/units.h"
#include "common/version.h"
#include "planner/interleaved_partition.h"
#include "planner/memory_model.h"
#include "planner/time_model.h"
#include "planner/variability.h"
#include "plans/buckets.h"

namespace pipeplan {
namespace {

// Throws when a predicted time passes what a plan file may hold.
void check_predicted(double ms, double max_ms, const char* what, int stage_idx) {
  PIPEPLAN_CHECK(ms <= max_ms, "the predicted ", what, " of stage ", stage_idx, " is ", ms,
                 " ms: expected at most ", max_ms,
                 " ms, the planner's limit (a link's bandwidth or latency is out of proportion to "
                 "the model: check --inter-node-bandwidth and the profile's interconnect)");
}

void check_stage_prediction(const StagePrediction& stage, int stage_idx) {
  check_predicted(stage.p2p_ms, kMaxTimeMs, "transfer per micro-batch", stage_idx);
  check_predicted(stage.compute_ms, kMaxIterationMs, "compute per iteration", stage_idx);
  check_predicted(stage.allreduce_ms, kMaxIterationMs, "all-reduce", stage_idx);
}

// dp > 1: the buckets of local chunk `chunk`, layers [first, last), in the order they are
// started; each ready once the backward (zb-h1: W) has passed its layers, from the last.
void add_chunk_buckets(const PlanningContext& context, const LayerTable& table,
                       const Candidate& candidate, int chunk, int first, int last,
                       bool spans_nodes, StagePrediction* stage) {
  std::vector<int64_t> bytes;
  for (int layer = first; layer < last; ++layer)
    bytes.push_back(table.param_count(layer, layer + 1) * kGradientBytesPerParameter);
  const CollectiveCosts costs = collective_costs(*context.profile);
  const LinkCosts links = link_costs(context.cluster);
  const Collective reduce = candidate.zero == 1 ? Collective::kReduceScatter : Collective::kAllReduce;
  auto weight_ns = [&](int from, int to) {
    return table.split_backward() ? table.bwd_weight_ns(from, to) : table.bwd_ns(from, to);
  };
  const int64_t chunk_ns = weight_ns(first, last);
  for (const GradientBucket& bucket :
       gradient_buckets(bytes, context.data_parallel.bucket_bytes)) {
    const int64_t done_ns = weight_ns(first + bucket.first, last);
    const double ready = chunk_ns > 0 ? static_cast<double>(done_ns) / chunk_ns : 1.0;
    const double comm =
        collective_ms(costs, reduce, bucket.bytes, candidate.dp, links, spans_nodes);
    stage->buckets.push_back({chunk, bucket.bytes, std::clamp(ready, 0.0, 1.0), comm});
    stage->allreduce_ms += comm;
    if (candidate.zero == 1)
      stage->allgather_ms +=
          collective_ms(costs, Collective::kAllGather, bucket.bytes, candidate.dp, links,
                        spans_nodes);
  }
}

// The stage's data-parallel times: its chunks' buckets (chunks finish their backwards last
// chunk first under interleaved-1f1b), and under ZeRO-1 an optimizer step over its 1/dp shard.
void add_data_parallel(const PlanningContext& context, const LayerTable& table,
                       const Candidate& candidate, const std::vector<ChunkRange>& chunks,
                       bool spans_nodes, StagePrediction* stage) {
  if (candidate.dp <= 1 || context.mode == PlanMode::kInference) return;
  for (int chunk = static_cast<int>(chunks.size()) - 1; chunk >= 0; --chunk)
    add_chunk_buckets(context, table, candidate, chunk, chunks[chunk].first, chunks[chunk].last,
                      spans_nodes, stage);
  if (candidate.zero == 1) stage->optimizer_ms /= candidate.dp;
}

StagePrediction stage_prediction(const PlanningContext& context, const LayerTable& table,
                                 const PartitionProblem& problem, const Candidate& candidate,
                                 int stage_idx, int first, int last, bool checkpoint,
                                 const std::vector<int>& recomputed, bool spans_nodes) {
  StagePrediction stage;
  const StageTimes times = stage_times(table, first, last, checkpoint, recomputed);
  stage.fwd_ms = to_ms(times.fwd_ns);
  stage.bwd_ms = to_ms(times.bwd_ns);
  stage.recompute_ms = to_ms(times.recompute_ns);
  stage.optimizer_ms = to_ms(times.optimizer_ns);
  stage.fwd_cv = coefficient_of_variation(table.fwd_spread_ns(first, last), times.fwd_ns);
  stage.bwd_cv = coefficient_of_variation(table.bwd_spread_ns(first, last), times.bwd_ns);
  stage.compute_ms = to_ms(compute_ns(times) * candidate.num_micro_batches);
  if (table.split_backward()) {  // zb-h1: the backward as its B and its W
    stage.bwd_ms = to_ms(table.bwd_input_ns(first, last));
    stage.bwd_weight_ms = to_ms(table.bwd_weight_ns(first, last));
  }
  stage.memory =
      stage_memory(table, problem.memory, stage_idx, first, last, checkpoint, recomputed);
  stage.peak_memory_bytes = stage.memory.total_bytes;
  add_data_parallel(context, table, candidate, {{first, last, checkpoint, recomputed}}, spans_nodes,
                    &stage);
  return stage;
}

// interleaved-1f1b: stage `stage_idx`'s chunks (their times from the layer table, their sends from
// `chunks`, the chunk problem's evaluator), the stage's times their sums, its memory theirs together.
StagePrediction interleaved_stage_prediction(const PlanningContext& context,
                                             const LayerTable& table,
                                             const PartitionProblem& problem,
                                             const StageEvaluator& chunks,
                                             const Candidate& candidate, const PartitionResult& split,
                                             int stage_idx, bool spans_nodes) {
  StagePrediction stage;
  std::vector<ChunkRange> ranges;
  int64_t fwd_spread_ns = 0, bwd_spread_ns = 0, fwd_ns = 0, bwd_ns = 0, optimizer_ns = 0;
  for (int chunk = 0; chunk < candidate.virtual_stages; ++chunk) {
    const int global_chunk = chunk_index(candidate.pp, stage_idx, chunk);
    const int first = split.boundaries[global_chunk];
    const int last = split.boundaries[global_chunk + 1];
    const bool checkpoint = split.checkpoint[global_chunk];
    const std::vector<int>& recomputed = split.recomputed_of(global_chunk);
    ranges.push_back({first, last, checkpoint, recomputed});
    const StageTimes times = stage_times(table, first, last, checkpoint, recomputed);
    const ChunkPrediction prediction{to_ms(times.fwd_ns), to_ms(times.bwd_ns),
                                     to_ms(times.recompute_ns),
                                     to_ms(chunks.p2p_ns(global_chunk, first, last))};
    stage.chunks.push_back(prediction);
    stage.fwd_ms += prediction.fwd_ms;
    stage.bwd_ms += prediction.bwd_ms;
    stage.recompute_ms += prediction.recompute_ms;
    stage.p2p_ms += prediction.p2p_ms;
    fwd_ns += times.fwd_ns;
    bwd_ns += times.bwd_ns;
    optimizer_ns += times.optimizer_ns;
    fwd_spread_ns += table.fwd_spread_ns(first, last);
    bwd_spread_ns += table.bwd_spread_ns(first, last);
  }
  stage.optimizer_ms = to_ms(optimizer_ns);
  stage.fwd_cv = coefficient_of_variation(fwd_spread_ns, fwd_ns);
  stage.bwd_cv = coefficient_of_variation(bwd_spread_ns, bwd_ns);
  stage.compute_ms =
      candidate.num_micro_batches * (stage.fwd_ms + stage.bwd_ms + stage.recompute_ms);
  stage.memory = interleaved_stage_memory(table, problem.memory, stage_idx, ranges);
  stage.peak_memory_bytes = stage.memory.total_bytes;
  add_data_parallel(context, table, candidate, ranges, spans_nodes, &stage);
  return stage;
}

// The input whose draws the budget counts: a forward-only one's two-request play (play_requests).
SimulationInput budgeted(SimulationInput input) {
  if (input.forward_only) input.num_micro_batches *= 2;
  return input;
}

// Whether simulate() draws `input` with the default draws: its times vary and they fit the budget.
bool draws_apply(const SimulationInput& input) {
  return times_vary(input) && draws_fit_budget(budgeted(input), kVariabilityDraws);
}

// Writes a simulation of `input` into the plan's predictions; busy and idle time are equal over
// a stage's replicas (they do the same work in the same iteration). A plan whose action times
// vary but are not drawn (over the budget) says so in its notes. Throws when the iteration passes
// what a plan may hold.
void record_timing(const SimulationInput& input, const SimulationResult& result, Plan* plan) {
  PIPEPLAN_CHECK(result.iteration_ms <= kMaxIterationMs, "the predicted iteration is ",
                 result.iteration_ms, " ms: expected at most ", kMaxIterationMs,
                 " ms, the planner's limit (the profile's times or its links are out of "
                 "proportion)");
  Predictions& p = plan->predictions;
  if (times_vary(input) && !draws_apply(input)) {
    const auto actions = static_cast<int64_t>(compute_actions(budgeted(input)));
    const std::string note = detail::concat(
        "action times vary (fwd_cv, bwd_cv), but ", kVariabilityDraws, " draws of ", plan->dp,
        " replicas of ", actions, " compute actions pass the draw budget of ",
        static_cast<int64_t>(kDrawBudgetActions),
        ": iteration_ms is the play with every action at its mean time (planner/variability.h)");
    if (std::find(p.notes.begin(), p.notes.end(), note) == p.notes.end()) p.notes.push_back(note);
  }
  p.iteration_estimate =
      result.variability_draws > 0 ? IterationEstimate::kDraws : IterationEstimate::kMeanTimes;
  p.iteration_ms = result.iteration_ms;
  p.samples_per_s = samples_per_s(plan->global_batch, result.iteration_ms);
  // One stage is no pipeline: its idle time (waiting for slower replicas at the all-reduce, or
  // for the variation of action times) is no bubble.
  p.bubble_fraction = plan->pp == 1 ? 0 : result.bubble_fraction;
  for (const RankAssignment& assignment : plan->ranks) {
    StagePrediction& stage = p.stages[assignment.stage];
    const int played = assignment.rank / plan->tp();  // one played rank per tp group
    stage.busy_ms = result.busy_ms[played];
    stage.idle_ms = result.idle_ms[played];
    // The mean-times play's wait at the all-reduce (equal over a stage's replicas).
    if (plan->dp > 1 && !result.allreduce_ms.empty())
      stage.allreduce_exposed_ms = result.allreduce_ms[played];
  }
}

// Where the replicas' collective times come from: measured fits, or the ring formula on the
// point-to-point fit where the profile measured no such group.
std::string collectives_note(const PlanningContext& context, const Candidate& candidate) {
  const CollectiveCosts costs = collective_costs(*context.profile);
  std::vector<Collective> used{Collective::kAllReduce};
  if (candidate.zero == 1) used = {Collective::kReduceScatter, Collective::kAllGather};
  std::string measured, ring;
  int num_measured = 0, num_ring = 0;
  for (Collective collective : used) {
    const bool fit = costs.measured(collective, candidate.dp, /*inter_node=*/false);
    std::string& list = fit ? measured : ring;
    list += (list.empty() ? "" : " and ") + to_string(collective);
    ++(fit ? num_measured : num_ring);
  }
  std::string note = detail::concat("dp=", candidate.dp, ": ");
  if (num_measured > 0)
    note += detail::concat("the replicas' ", measured, num_measured > 1 ? " times are" : " time is",
                           " the profile's measured fit over ", costs.measured_ranks, " ranks");
  if (num_ring > 0)
    note += detail::concat(
        num_measured > 0 ? "; the " : "the replicas' ", ring, num_ring > 1 ? " times come" : " time comes",
        " from the ring formula on the point-to-point fit (",
        costs.measured_ranks == 0
            ? std::string("the profile measured no collective")
            : detail::concat("the profile measured none over ", candidate.dp,
                             " ranks on one node"),
        ")");
  const bool multi_node = context.cluster.devices_per_node < context.cluster.devices;
  if (num_measured > 0 && multi_node)
    note += "; groups that span nodes use the ring formula on the inter-node link";
  return note;
}

}  // namespace

Cluster make_cluster(const Profile& profile, int devices, int64_t device_memory_bytes,
                     int devices_per_node, double inter_node_bandwidth_bytes_per_s) {
  Cluster cluster;
  cluster.device_kind = profile.device.kind;
  cluster.devices = devices;
  cluster.device_memory_bytes = device_memory_bytes;
  cluster.devices_per_node = devices_per_node;
  if (profile.interconnect) {
    cluster.intra_node_bandwidth_bytes_per_s = profile.interconnect->p2p.bandwidth_bytes_per_s;
    cluster.latency_ms = profile.interconnect->p2p.latency_ms;
  }
  cluster.inter_node_bandwidth_bytes_per_s = inter_node_bandwidth_bytes_per_s;
  return cluster;
}

std::vector<std::string> planning_notes(const Profile& profile, const Cluster& cluster,
                                        bool inter_node_bandwidth_given) {
  std::vector<std::string> notes;
  if (!profile.interconnect)
    notes.push_back(
        "the profile has no interconnect measurement (profiled with --no-comm): intra-node "
        "communication is predicted to be free");
  if (cluster.devices_per_node < cluster.devices && !inter_node_bandwidth_given)
    notes.push_back(detail::concat("inter-node bandwidth ",
                                   cluster.inter_node_bandwidth_bytes_per_s / 1e9,
                                   " GB/s is assumed (set --inter-node-bandwidth)"));
  return notes;
}

void PlanningContext::validate() const {
  PIPEPLAN_ASSERT(profile != nullptr);
  PIPEPLAN_CHECK(cluster.devices >= 1 && cluster.devices <= kMaxDevices, "--devices: ",
                 cluster.devices, ": expected an integer in [1, ", kMaxDevices, "]");
  PIPEPLAN_CHECK(cluster.devices_per_node >= 1 && cluster.devices_per_node <= kMaxDevices,
                 "--devices-per-node: ", cluster.devices_per_node, ": expected an integer in [1, ",
                 kMaxDevices, "]");
  PIPEPLAN_CHECK(cluster.device_memory_bytes >= 1 && cluster.device_memory_bytes <= kMaxBytes,
                 "--device-memory: ", cluster.device_memory_bytes,
                 " bytes: expected a size in [1 byte, ", format_size(kMaxBytes), "]");
  PIPEPLAN_CHECK(global_batch >= 1 && global_batch <= kMaxBatchSize, "--global-batch: ",
                 global_batch, ": expected an integer in [1, ", kMaxBatchSize, "]");
  const double inter = cluster.inter_node_bandwidth_bytes_per_s;
  PIPEPLAN_CHECK(inter == 0 || (inter >= kMinBandwidthBytesPerS && inter <= kMaxBandwidthBytesPerS),
                 "--inter-node-bandwidth: ", inter, " bytes/s: expected ", kMinBandwidthBytesPerS,
                 " to ", kMaxBandwidthBytesPerS, " bytes/s");
  if (mode == PlanMode::kInference) return;  // forward passes take no optimizer step
  const std::string optimizer_name = to_string(optimizer);
  for (size_t layer_idx = 0; layer_idx < profile->layers.size(); ++layer_idx)
    PIPEPLAN_CHECK(profile->layers[layer_idx].optimizer_step_ms.count(optimizer_name) == 1,
                   profile_path, ": layers[", layer_idx, "].optimizer_step_ms: no ",
                   quote(optimizer_name), " entry: expected one for --optimizer ", optimizer_name,
                   " (profile again, or choose another --optimizer)");
}

std::vector<std::string> planning_warnings(const PlanningContext& context,
                                           std::optional<int64_t> micro_batch_size) {
  const Profile& profile = *context.profile;
  const int64_t memory_bytes = context.cluster.device_memory_bytes;
  std::vector<std::string> warnings;
  if (profile.device.kind == "cpu" && memory_bytes >= kGpuSizedMemoryBytes)
    warnings.push_back(detail::concat(
        context.profile_path, ": planning devices of ", format_size(memory_bytes),
        " from a CPU profile (", quote(profile.device.name),
        "): every time is that CPU's, not a GPU's; profile on the devices you plan for "
        "(pipeplan profile --device cuda)"));
  for (const LayerProfile& layer : profile.layers)
    for (const std::string& warning : fit_warnings(layer, micro_batch_size))
      warnings.push_back(detail::concat(context.profile_path, ": ", warning));
  return warnings;
}

PartitionProblem partition_problem(const PlanningContext& context, const Candidate& candidate) {
  PartitionProblem problem;
  problem.pp = candidate.pp;
  problem.virtual_stages = candidate.virtual_stages;
  problem.policy = candidate.policy;
  problem.device_memory_bytes = context.cluster.device_memory_bytes;
  problem.memory.schedule = candidate.schedule;
  problem.memory.pp = candidate.pp;
  problem.memory.dp = candidate.dp;
  problem.memory.num_micro_batches = candidate.num_micro_batches;
  problem.memory.virtual_stages = candidate.virtual_stages;
  problem.memory.optimizer = context.optimizer;
  problem.memory.precision = context.precision;
  problem.memory.runtime_overhead_bytes = context.profile->device.runtime_overhead_bytes;
  problem.memory.zero = candidate.zero;
  problem.memory.bucket_bytes = context.data_parallel.bucket_bytes;
  problem.memory.forward_only = context.mode == PlanMode::kInference;
  if (context.calibration)
    problem.memory.calibration_bytes = context.calibration->memory_corrections(candidate.pp);
  problem.links = link_costs(context.cluster);
  problem.inter_node_boundaries =
      chunk_inter_node_boundaries(candidate.layout, candidate.dp, candidate.pp,
                                  candidate.virtual_stages, context.cluster.devices_per_node);
  return problem;
}

Plan build_plan(const PlanningContext& context, const LayerTable& table, const Candidate& candidate,
                const PartitionResult& split, const std::string& partition_name) {
  const int num_chunks = candidate.pp * candidate.virtual_stages;
  PIPEPLAN_ASSERT(split.feasible && static_cast<int>(split.boundaries.size()) == num_chunks + 1);
  Plan plan;
  plan.tool_version = version();
  plan.profile_path = context.profile_path;
  plan.profile_hash = context.profile_hash;
  plan.model = context.profile->model;
  plan.cluster = context.cluster;
  plan.global_batch = context.global_batch;
  plan.dp = candidate.dp;
  plan.pp = candidate.pp;
  plan.micro_batch_size = candidate.micro_batch_size;
  plan.num_micro_batches = candidate.num_micro_batches;
  plan.schedule = candidate.schedule;
  plan.virtual_stages = candidate.virtual_stages;
  plan.precision = context.precision;
  plan.optimizer = OptimizerSettings::defaults_for(context.optimizer);
  plan.partition = partition_name;
  plan.mode = context.mode;
  const bool inference = context.mode == PlanMode::kInference;
  PIPEPLAN_ASSERT(!inference || (table.forward_only() && candidate.schedule == Schedule::kGpipe &&
                                 candidate.virtual_stages == 1 && candidate.zero == 0));
  if (candidate.dp > 1 && !inference) {
    plan.data_parallel = context.data_parallel;
    plan.data_parallel.zero = candidate.zero;
  }
  plan.ranks = place_ranks(candidate.layout, candidate.dp, candidate.pp,
                           context.cluster.devices_per_node, context.cluster.device_kind);
  const PartitionProblem problem = partition_problem(context, candidate);
  const std::vector<bool> spanning = stages_spanning_nodes(
      candidate.layout, candidate.dp, candidate.pp, context.cluster.devices_per_node);
  for (int chunk = 0; chunk < num_chunks; ++chunk) {
    const int first = split.boundaries[chunk];
    const int last = split.boundaries[chunk + 1];
    plan.stages.push_back({first, last, split.checkpoint[chunk], split.recomputed_of(chunk),
                           table.boundary_shape(first), table.boundary_dtype(first),
                           table.boundary_shape(last), table.boundary_dtype(last)});
  }
  const bool interleaved = candidate.virtual_stages > 1;
  // Interleaved stages send from each chunk: their links are the chunk problem's.
  const PartitionProblem sends_problem = interleaved ? chunk_problem(problem) : problem;
  const StageEvaluator evaluator(table, sends_problem);
  for (int stage_idx = 0; stage_idx < candidate.pp; ++stage_idx) {
    StagePrediction stage;
    if (interleaved) {
      stage = interleaved_stage_prediction(context, table, problem, evaluator, candidate, split,
                                           stage_idx, spanning[stage_idx]);
    } else {
      const int first = split.boundaries[stage_idx];
      const int last = split.boundaries[stage_idx + 1];
      stage = stage_prediction(context, table, problem, candidate, stage_idx, first, last,
                               split.checkpoint[stage_idx], split.recomputed_of(stage_idx),
                               spanning[stage_idx]);
      stage.p2p_ms = to_ms(evaluator.p2p_ns(stage_idx, first, last));
    }
    check_stage_prediction(stage, stage_idx);
    plan.predictions.allreduce_ms = std::max(plan.predictions.allreduce_ms, stage.allreduce_ms);
    plan.predictions.optimizer_ms = std::max(plan.predictions.optimizer_ms, stage.optimizer_ms);
    plan.predictions.stages.push_back(stage);
  }
  plan.predictions.notes = context.notes;
  if (candidate.dp > 1 && !inference)
    plan.predictions.notes.push_back(collectives_note(context, candidate));
  plan.calibration = context.calibration;
  if (!table.note().empty()) plan.predictions.notes.push_back(table.note());
  for (const TiedProfile& tie : inference ? std::vector<TiedProfile>{} : context.profile->ties) {
    std::string layers, stages;
    int last_stage = -1, num_stages = 0;
    for (int layer : tie.layers) {
      layers += (layers.empty() ? "" : ", ") + std::to_string(layer);
      int chunk = 0;
      while (plan.stages[chunk].last <= layer) ++chunk;
      const int stage = chunk % plan.pp;
      if (stage == last_stage) continue;
      stages += (stages.empty() ? "" : ", ") + std::to_string(stage);
      last_stage = stage;
      ++num_stages;
    }
    if (num_stages > 1)
      plan.predictions.notes.push_back(detail::concat(
          "the parameter tied between layers ", layers, " (", tie.param_count,
          " parameters) is held by stages ", stages,
          ", which sum its gradient before each optimizer step (counted in their optimizer time; "
          "waiting for each other is not)"));
  }
  return plan;
}

void check_predicts_compute(const Plan& plan, std::string_view document) {
  double compute_ms = 0;
  for (const StagePrediction& stage : plan.predictions.stages) compute_ms += stage.compute_ms;
  PIPEPLAN_CHECK(compute_ms > 0, document,
                 ": predictions.stages: every stage predicts 0 ms of compute: expected a plan "
                 "made by pipeplan plan from a profile with measured times");
}

std::pair<SimulationResult, double> play_requests(SimulationInput input,
                                                  const SimulationOptions& options) {
  PIPEPLAN_ASSERT(input.forward_only);
  SimulationInput two_requests = input;
  two_requests.num_micro_batches *= 2;
  SimulationOptions one_options = options;
  // Both plays draw, or neither: the interval is their difference.
  if (!draws_fit_budget(two_requests, options.variability_draws)) one_options.variability_draws = 0;
  SimulationResult one = simulate(input, one_options);
  SimulationOptions two_options = one_options;
  two_options.record_timeline = false;
  const SimulationResult two = simulate(two_requests, two_options);
  // Varying forward times only slow a pipeline down: the interval is at least the one with mean
  // times (the draws' two means can differ by less, each being a mean over other draws).
  const double drawn_ms = two.iteration_ms - one.iteration_ms;
  const double mean_ms = two.mean_times_iteration_ms - one.mean_times_iteration_ms;
  const double interval_ms = std::clamp(std::max(drawn_ms, mean_ms), 0.0, one.iteration_ms);
  return {std::move(one), interval_ms};
}

double idle_at_interval(SimulationResult* result, double interval_ms) {
  double idle_total = 0;
  for (size_t rank = 0; rank < result->busy_ms.size(); ++rank) {
    result->idle_ms[rank] = std::max(0.0, interval_ms - result->busy_ms[rank]);
    idle_total += result->idle_ms[rank];
  }
  const double capacity = static_cast<double>(result->busy_ms.size()) * interval_ms;
  return interval_ms > 0 ? idle_total / capacity : 0;
}

SimulationResult predict_inference_timing(Plan* plan, const SimulationOptions& options) {
  PIPEPLAN_ASSERT(plan->mode == PlanMode::kInference);
  const SimulationInput input = simulation_input(*plan);
  auto [one, interval_ms] = play_requests(input, options);
  const double latency_ms = one.iteration_ms;
  // The plan's per-iteration figures are per request at the interval (record_timing's rules).
  SimulationResult steady = one;
  steady.iteration_ms = interval_ms;
  steady.bubble_fraction = idle_at_interval(&steady, interval_ms);
  record_timing(input, steady, plan);
  plan->predictions.latency_ms = latency_ms;
  return one;
}

SimulationResult predict_timing(Plan* plan, const SimulationOptions& options) {
  if (plan->mode == PlanMode::kInference) return predict_inference_timing(plan, options);
  const SimulationInput input = simulation_input(*plan);
  SimulationResult result = simulate(input, options);
  record_timing(input, result, plan);
  return result;
}

bool predict_variation(Plan* plan) {
  if (!draws_apply(simulation_input(*plan))) return false;
  predict_timing(plan, SimulationOptions{/*record_timeline=*/false});
  return true;
}

}  // namespace pipeplan
