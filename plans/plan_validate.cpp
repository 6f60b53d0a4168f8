// The Plan's validation: what the simulator, the comparison and the executor rely on, for
// meaning as well as syntax (fields consistent with each other and with the model, numbers in
// the ranges of common/limits.h).
#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>

#include "common/error.h"
#include "common/limits.h"
#include "common/units.h"
#include "plans/plan.h"

namespace pipeplan {
namespace {

/// Relative slack of the checks that recompute a prediction from others (floating point).
constexpr double kRelativeSlack = 1e-9;

constexpr const char* kPartitionNames[] = {"optimal", "uniform", "parameters", "greedy-time",
                                           "explicit"};

bool about_equal(double value, double expected) {
  return std::abs(value - expected) <= kRelativeSlack * std::max(std::abs(expected), 1.0);
}

// V chunks per rank: 1, or with interleaved-1f1b at least 2 on pp >= 2 ranks, within the layers,
// with micro-batches in whole rounds of pp (Megatron-LM's interleaved order) and at most
// kMaxPipelineMicroBatches chunk micro-batches of one pipeline.
void validate_virtual_stages(const Plan& plan, std::string_view document) {
  const int v = plan.virtual_stages;
  if (plan.schedule != Schedule::kInterleaved1F1B) {
    PIPEPLAN_CHECK(v == 1, document, ": virtual_stages: ", v, ": expected 1 with schedule ",
                   to_string(plan.schedule), " (only interleaved-1f1b holds several chunks)");
    return;
  }
  PIPEPLAN_CHECK(v >= 2 && v <= kMaxVirtualStages, document, ": virtual_stages: ", v,
                 ": expected an integer in [2, ", kMaxVirtualStages, "] with interleaved-1f1b");
  PIPEPLAN_CHECK(plan.pp >= 2, document, ": pp: ", plan.pp,
                 ": expected at least 2 with interleaved-1f1b (one stage has no pipeline)");
  PIPEPLAN_CHECK(int64_t{plan.pp} * v <= plan.model.num_layers, document, ": virtual_stages: ", v,
                 ": expected pp*virtual_stages = ", int64_t{plan.pp} * v,
                 " at most model.num_layers = ", plan.model.num_layers,
                 " (each chunk holds a layer)");
  PIPEPLAN_CHECK(plan.num_micro_batches % plan.pp == 0, document, ": num_micro_batches: ",
                 plan.num_micro_batches, ": expected a multiple of pp = ", plan.pp,
                 " with interleaved-1f1b (its order runs micro-batches in rounds of pp)");
  PIPEPLAN_CHECK(int64_t{plan.pp} * v * plan.num_micro_batches <= kMaxPipelineMicroBatches,
                 document, ": num_micro_batches: ", plan.num_micro_batches, ": expected at most ",
                 kMaxPipelineMicroBatches / (int64_t{plan.pp} * v), " with pp=", plan.pp,
                 " and virtual_stages=", v, " (at most ", kMaxPipelineMicroBatches,
                 " micro-batches times chunks)");
}

// A tensor-parallel group lies within one node (its all-reduces run on every layer), trains (no
// inference plan splits yet) and keeps the vocabulary whole.
void validate_tensor_parallel(const Plan& plan, std::string_view document) {
  const TensorParallelSettings& settings = plan.tensor_parallel;
  if (settings.tp == 1) return;
  PIPEPLAN_CHECK(plan.cluster.devices_per_node % settings.tp == 0, document,
                 ": tensor_parallel.tp: ", settings.tp,
                 ": expected a divisor of cluster.devices_per_node = ",
                 plan.cluster.devices_per_node, " (a tensor-parallel group never spans nodes)");
  PIPEPLAN_CHECK(settings.vocabulary == "replicated", document,
                 ": tensor_parallel.vocabulary: ", quote(settings.vocabulary),
                 ": expected 'replicated' (the embedding and head run whole on every rank of "
                 "the group; a vocabulary split is not built)");
  PIPEPLAN_CHECK(plan.data_parallel.zero == 0, document,
                 ": data_parallel.zero: ", plan.data_parallel.zero,
                 ": expected 0 with tensor_parallel.tp = ", settings.tp,
                 " (ZeRO-1 beside tensor parallelism is not built)");
  PIPEPLAN_CHECK(plan.mode == PlanMode::kTraining, document, ": tensor_parallel.tp: ", settings.tp,
                 ": expected 1 in an inference plan (tensor-parallel serving is not "
                 "built)");
}

// Buckets of at least kMinBucketBytes; ZeRO-1 shards over two replicas or more.
void validate_data_parallel(const Plan& plan, std::string_view document) {
  const DataParallelSettings& settings = plan.data_parallel;
  PIPEPLAN_CHECK(settings.bucket_bytes >= kMinBucketBytes && settings.bucket_bytes <= kMaxBytes,
                 document, ": data_parallel.bucket_bytes: ", settings.bucket_bytes,
                 ": expected an integer in [", kMinBucketBytes, ", ", kMaxBytes, "]");
  PIPEPLAN_CHECK(settings.zero == 0 || settings.zero == 1, document, ": data_parallel.zero: ",
                 settings.zero, ": expected 0 or 1");
  PIPEPLAN_CHECK(settings.zero == 0 || plan.dp >= 2, document, ": data_parallel.zero: ",
                 settings.zero, ": expected 0 with dp = 1 (ZeRO-1 shards the optimizer state "
                 "over a stage's replicas)");
}

// An inference plan runs forward passes only, in gpipe's forward order, one chunk per stage,
// nothing recomputed, and predicts no backward, reduction or optimizer step; its latency is at
// least its interval. A training plan predicts no latency.
void validate_mode(const Plan& plan, std::string_view document) {
  const Predictions& p = plan.predictions;
  if (plan.mode == PlanMode::kTraining) {
    PIPEPLAN_CHECK(p.latency_ms == 0, document, ": predictions.latency_ms: ", p.latency_ms,
                   ": expected none in a training plan (mode inference predicts it)");
    return;
  }
  PIPEPLAN_CHECK(plan.schedule == Schedule::kGpipe, document, ": schedule: ",
                 to_string(plan.schedule),
                 ": expected gpipe with mode inference (micro-batches stream forward in order)");
  for (size_t idx = 0; idx < plan.stages.size(); ++idx) {
    PIPEPLAN_CHECK(!plan.stages[idx].checkpoint, document, ": stages[", idx,
                   "].checkpoint: true: expected false with mode inference (no backward "
                   "recomputes)");
    PIPEPLAN_CHECK(plan.stages[idx].recompute_layers.empty(), document, ": stages[", idx,
                   "].recompute_layers: ", plan.stages[idx].recompute_layers.size(),
                   " layers: expected none with mode inference (no backward recomputes)");
  }
  PIPEPLAN_CHECK(plan.data_parallel.zero == 0, document, ": data_parallel.zero: ",
                 plan.data_parallel.zero, ": expected 0 with mode inference (no optimizer state)");
  for (size_t idx = 0; idx < p.stages.size(); ++idx) {
    const StagePrediction& s = p.stages[idx];
    for (const auto& [key, value] :
         {std::pair{"bwd_ms", s.bwd_ms}, {"bwd_weight_ms", s.bwd_weight_ms},
          {"recompute_ms", s.recompute_ms}, {"allreduce_ms", s.allreduce_ms},
          {"optimizer_ms", s.optimizer_ms}})
      PIPEPLAN_CHECK(value == 0, document, ": predictions.stages[", idx, "].", key, ": ", value,
                     ": expected 0 with mode inference (forward passes only)");
  }
  PIPEPLAN_CHECK(p.latency_ms > 0 && p.latency_ms >= p.iteration_ms * (1 - kRelativeSlack),
                 document, ": predictions.latency_ms: ", p.latency_ms,
                 ": expected a request's time through the pipeline, at least iteration_ms = ",
                 p.iteration_ms, " (the interval between requests)");
}

// dp, pp, devices, batch sizes and micro-batches: each in range, then their products.
void validate_sizes(const Plan& plan, std::string_view document) {
  PIPEPLAN_CHECK(plan.dp >= 1 && plan.dp <= kMaxDevices, document, ": dp: ", plan.dp,
                 ": expected an integer in [1, ", kMaxDevices, "]");
  PIPEPLAN_CHECK(plan.pp >= 1 && plan.pp <= plan.model.num_layers, document, ": pp: ", plan.pp,
                 ": expected an integer in [1, ", plan.model.num_layers,
                 "] (at most one stage per layer, model.num_layers)");
  const int tp = plan.tp();
  PIPEPLAN_CHECK(tp >= 1 && tp <= kMaxDevices, document, ": tensor_parallel.tp: ", tp,
                 ": expected an integer in [1, ", kMaxDevices, "]");
  const int64_t devices = int64_t{plan.dp} * tp * plan.pp;
  PIPEPLAN_CHECK(plan.cluster.devices == devices, document,
                 ": cluster.devices: ", plan.cluster.devices,
                 tp > 1 ? ": expected dp*tp*pp = " : ": expected dp*pp = ", devices);
  PIPEPLAN_CHECK(devices <= kMaxDevices, document, ": cluster.devices: ", devices,
                 ": expected at most ", kMaxDevices, " devices");
  PIPEPLAN_CHECK(plan.micro_batch_size >= 1 && plan.micro_batch_size <= kMaxBatchSize, document,
                 ": micro_batch_size: ", plan.micro_batch_size, ": expected an integer in [1, ",
                 kMaxBatchSize, "]");
  PIPEPLAN_CHECK(plan.num_micro_batches >= 1 && plan.num_micro_batches <= kMaxMicroBatches,
                 document, ": num_micro_batches: ", plan.num_micro_batches,
                 ": expected an integer in [1, ", kMaxMicroBatches, "]");
  PIPEPLAN_CHECK(int64_t{plan.pp} * plan.num_micro_batches <= kMaxPipelineMicroBatches, document,
                 ": num_micro_batches: ", plan.num_micro_batches, ": expected at most ",
                 kMaxPipelineMicroBatches / plan.pp, " with pp=", plan.pp,
                 " (at most ", kMaxPipelineMicroBatches, " micro-batches times stages)");
  validate_virtual_stages(plan, document);
  validate_data_parallel(plan, document);
  validate_tensor_parallel(plan, document);
  const int64_t batch = plan.dp * int64_t{plan.num_micro_batches} * plan.micro_batch_size;
  PIPEPLAN_CHECK(plan.global_batch == batch, document, ": global_batch: ", plan.global_batch,
                 ": expected dp*num_micro_batches*micro_batch_size = ", batch);
  PIPEPLAN_CHECK(batch <= kMaxBatchSize, document, ": global_batch: ", batch,
                 ": expected at most ", kMaxBatchSize);
}

// A bandwidth of the cluster: 0 (not measured: free) or in [kMin..., kMax...].
void validate_bandwidth(double bytes_per_s, const char* key, std::string_view document) {
  PIPEPLAN_CHECK(bytes_per_s == 0 || (bytes_per_s >= kMinBandwidthBytesPerS &&
                                      bytes_per_s <= kMaxBandwidthBytesPerS),
                 document, ": cluster.", key, ": ", bytes_per_s, ": expected 0 (not measured) or ",
                 kMinBandwidthBytesPerS, " to ", kMaxBandwidthBytesPerS, " bytes/s");
}

void validate_cluster(const Cluster& cluster, std::string_view document) {
  PIPEPLAN_CHECK(cluster.device_kind == "cpu" || cluster.device_kind == "cuda", document,
                 ": cluster.device_kind: ", quote(cluster.device_kind),
                 ": expected 'cpu' or 'cuda'");
  // More devices per node than devices is one node: harmless, and how tests say "one node".
  PIPEPLAN_CHECK(cluster.devices_per_node >= 1, document, ": cluster.devices_per_node: ",
                 cluster.devices_per_node, ": expected an integer >= 1");
  PIPEPLAN_CHECK(cluster.device_memory_bytes >= 1 && cluster.device_memory_bytes <= kMaxBytes,
                 document, ": cluster.device_memory_bytes: ", cluster.device_memory_bytes,
                 ": expected an integer in [1, ", kMaxBytes, "]");
  validate_bandwidth(cluster.intra_node_bandwidth_bytes_per_s, "intra_node_bandwidth_bytes_per_s",
                     document);
  validate_bandwidth(cluster.inter_node_bandwidth_bytes_per_s, "inter_node_bandwidth_bytes_per_s",
                     document);
  PIPEPLAN_CHECK(std::isfinite(cluster.latency_ms) && cluster.latency_ms >= 0 &&
                     cluster.latency_ms <= kMaxTimeMs,
                 document, ": cluster.latency_ms: ", cluster.latency_ms,
                 ": expected a time in ms in [0, ", kMaxTimeMs, "]");
}

void validate_optimizer(const OptimizerSettings& o, std::string_view document) {
  auto check = [&](double value, const char* key, double low, double high, const char* what) {
    PIPEPLAN_CHECK(std::isfinite(value) && value >= low && value <= high, document,
                   ": optimizer.", key, ": ", value, ": expected ", what);
  };
  check(o.base_lr, "base_lr", 1e-300, 1e6, "a learning rate > 0 (and at most 1e6)");
  check(o.min_lr_fraction, "min_lr_fraction", 0, 1, "a fraction in [0, 1]");
  check(o.momentum, "momentum", 0, 1, "a value in [0, 1]");
  check(o.weight_decay, "weight_decay", 0, 1, "a value in [0, 1]");
  check(o.beta1, "beta1", 0, 1 - 1e-12, "a value in [0, 1)");
  check(o.beta2, "beta2", 0, 1 - 1e-12, "a value in [0, 1)");
  check(o.eps, "eps", 1e-300, 1, "a value in (0, 1]");
  PIPEPLAN_CHECK(o.base_batch >= 1 && o.base_batch <= kMaxBatchSize, document,
                 ": optimizer.base_batch: ", o.base_batch, ": expected an integer in [1, ",
                 kMaxBatchSize, "]");
  PIPEPLAN_CHECK(o.warmup_steps >= 0 && o.warmup_steps <= kMaxSteps, document,
                 ": optimizer.warmup_steps: ", o.warmup_steps, ": expected an integer in [0, ",
                 kMaxSteps, "]");
}

// A boundary tensor: a known dtype, a non-empty shape of dimensions >= 1, and at most kMaxBytes
// for one micro-batch.
void validate_tensor(const std::vector<int64_t>& shape, const std::string& dtype,
                     int64_t micro_batch_size, const std::string& where) {
  double bytes = static_cast<double>(dtype_bytes(dtype, where + "_dtype")) *
                 static_cast<double>(micro_batch_size);
  PIPEPLAN_CHECK(!shape.empty(), where, "_sample_shape: []: expected the dimensions of a sample");
  for (int64_t dim : shape) {
    PIPEPLAN_CHECK(dim >= 1, where, "_sample_shape: ", format_shape(shape),
                   ": expected dimensions >= 1");
    bytes *= static_cast<double>(dim);
  }
  PIPEPLAN_CHECK(bytes <= static_cast<double>(kMaxBytes), where, "_sample_shape: ",
                 format_shape(shape), ": ", bytes, " bytes per micro-batch of ", micro_batch_size,
                 ": expected at most ", kMaxBytes);
}

// Partial checkpointing: some, not all, of the stage's layers, ascending, on a schedule whose
// backward runs whole (zb-h1's B and W keep per-layer graphs of their own).
void validate_recompute_layers(const Plan& plan, const StagePlan& stage, const std::string& where) {
  const std::vector<int>& layers = stage.recompute_layers;
  if (layers.empty()) return;
  PIPEPLAN_CHECK(!stage.checkpoint, where, "recompute_layers: ", layers.size(),
                 " layers: expected none with checkpoint true (the whole stage is recomputed)");
  PIPEPLAN_CHECK(plan.schedule != Schedule::kZeroBubbleH1, where,
                 "recompute_layers: ", layers.size(),
                 " layers: expected none with schedule zb-h1 (checkpoint the whole stage)");
  const int size = stage.last - stage.first;
  PIPEPLAN_CHECK(static_cast<int>(layers.size()) < size, where, "recompute_layers: ", layers.size(),
                 " layers: expected fewer than the stage's ", size,
                 " (all of them: checkpoint true)");
  for (size_t idx = 0; idx < layers.size(); ++idx) {
    const int lowest = idx == 0 ? stage.first : layers[idx - 1] + 1;
    PIPEPLAN_CHECK(layers[idx] >= lowest && layers[idx] < stage.last, where, "recompute_layers[",
                   idx, "]: ", layers[idx], ": expected a layer in [", lowest, ", ", stage.last,
                   ") (the stage's layers, ascending, each once)");
  }
}

void validate_stage(const Plan& plan, size_t stage_idx, std::string_view document) {
  const StagePlan& stage = plan.stages[stage_idx];
  const std::string where = detail::concat(document, ": stages[", stage_idx, "].");
  const int expected_first = stage_idx == 0 ? 0 : plan.stages[stage_idx - 1].last;
  PIPEPLAN_CHECK(stage.first == expected_first, where, "first: ", stage.first, ": expected ",
                 expected_first, " (stages are contiguous from layer 0)");
  PIPEPLAN_CHECK(stage.last > stage.first && stage.last <= plan.model.num_layers, where, "last: ",
                 stage.last, ": expected a layer in [", stage.first + 1, ", ",
                 plan.model.num_layers, "] (a stage holds at least one layer of the model)");
  validate_recompute_layers(plan, stage, where);
  validate_tensor(stage.input_sample_shape, stage.input_dtype, plan.micro_batch_size,
                  where + "input");
  validate_tensor(stage.output_sample_shape, stage.output_dtype, plan.micro_batch_size,
                  where + "output");
  const bool first_stage = stage_idx == 0;
  const std::vector<int64_t>& received =
      first_stage ? plan.model.input_shape : plan.stages[stage_idx - 1].output_sample_shape;
  const std::string& received_dtype =
      first_stage ? plan.model.input_dtype : plan.stages[stage_idx - 1].output_dtype;
  PIPEPLAN_CHECK(stage.input_sample_shape == received && stage.input_dtype == received_dtype,
                 where, "input_sample_shape: ", format_shape(stage.input_sample_shape), " ",
                 stage.input_dtype, ": expected ", format_shape(received), " ", received_dtype,
                 first_stage ? " (model.input_shape)" : " (the previous stage's output)");
}

void validate_stages(const Plan& plan, std::string_view document) {
  const int64_t chunks = int64_t{plan.pp} * plan.virtual_stages;
  PIPEPLAN_CHECK(static_cast<int64_t>(plan.stages.size()) == chunks, document, ": stages: ",
                 plan.stages.size(), " stages: expected ",
                 plan.virtual_stages == 1 ? "pp = " : "pp*virtual_stages = ", chunks);
  for (size_t stage_idx = 0; stage_idx < plan.stages.size(); ++stage_idx)
    validate_stage(plan, stage_idx, document);
  PIPEPLAN_CHECK(plan.stages.back().last == plan.model.num_layers, document, ": stages[",
                 chunks - 1, "].last: ", plan.stages.back().last, ": expected ",
                 plan.model.num_layers, " (the stages cover every layer of the model)");
}

void validate_rank(const Plan& plan, size_t rank, std::string_view document) {
  const RankAssignment& a = plan.ranks[rank];
  const std::string where = detail::concat(document, ": ranks[", rank, "].");
  PIPEPLAN_CHECK(a.rank == static_cast<int>(rank), where, "rank: ", a.rank, ": expected ", rank,
                 " (ranks in order)");
  PIPEPLAN_CHECK(a.stage >= 0 && a.stage < plan.pp, where, "stage: ", a.stage,
                 ": expected a stage in [0, ", plan.pp, ")");
  PIPEPLAN_CHECK(a.replica >= 0 && a.replica < plan.dp, where, "replica: ", a.replica,
                 ": expected a replica in [0, ", plan.dp, ")");
  const int tp = plan.tp();
  PIPEPLAN_CHECK(a.tp_rank == static_cast<int>(rank) % tp, where, "tp_rank: ", a.tp_rank,
                 ": expected rank % tp = ", static_cast<int>(rank) % tp,
                 " (a tensor-parallel group is tp consecutive ranks)");
  if (a.tp_rank > 0) {
    const RankAssignment& group_first = plan.ranks[rank - static_cast<size_t>(a.tp_rank)];
    PIPEPLAN_CHECK(a.stage == group_first.stage && a.replica == group_first.replica, where,
                   "stage: ", a.stage, " of replica ", a.replica, ": expected stage ",
                   group_first.stage, " of replica ", group_first.replica, " as rank ",
                   group_first.rank, " (the ranks of a tensor-parallel group run one stage)");
  }
  const int per_node = plan.cluster.devices_per_node;
  PIPEPLAN_CHECK(a.node == static_cast<int>(rank) / per_node, where, "node: ", a.node,
                 ": expected rank / devices_per_node = ", static_cast<int>(rank) / per_node);
  PIPEPLAN_CHECK(a.local_rank == static_cast<int>(rank) % per_node, where, "local_rank: ",
                 a.local_rank, ": expected rank % devices_per_node = ",
                 static_cast<int>(rank) % per_node);
  const bool cuda = plan.cluster.device_kind == "cuda";
  PIPEPLAN_CHECK(cuda ? a.device.rfind("cuda:", 0) == 0 && a.device.size() > 5 : a.device == "cpu",
                 where, "device: ", quote(a.device), ": expected ",
                 cuda ? "'cuda:N'" : "'cpu'", " on a cluster of device_kind ",
                 quote(plan.cluster.device_kind));
}

void validate_ranks(const Plan& plan, std::string_view document) {
  const int64_t ranks = int64_t{plan.dp} * plan.tp() * plan.pp;
  PIPEPLAN_CHECK(
      static_cast<int64_t>(plan.ranks.size()) == ranks, document, ": ranks: ", plan.ranks.size(),
      plan.tp() > 1 ? " ranks: expected dp*tp*pp = " : " ranks: expected dp*pp = ", ranks);
  std::set<std::tuple<int, int, int>> placed;
  for (size_t rank = 0; rank < plan.ranks.size(); ++rank) {
    validate_rank(plan, rank, document);
    const RankAssignment& a = plan.ranks[rank];
    PIPEPLAN_CHECK(placed.insert({a.stage, a.replica, a.tp_rank}).second, document, ": ranks[",
                   rank, "]: stage ", a.stage, " of replica ", a.replica,
                   plan.tp() > 1 ? detail::concat(" tp rank ", a.tp_rank) : std::string(),
                   ": expected each stage of each replica on one rank (it is placed twice)");
  }
}

void check_time(double ms, double max_ms, const std::string& where) {
  PIPEPLAN_CHECK(std::isfinite(ms) && ms >= 0 && ms <= max_ms, where, ": ", ms,
                 ": expected a time in ms in [0, ", max_ms, "]");
}

// The memory terms: in-flight count within the micro-batches (of each of the V chunks),
// activations = in-flight × one micro-batch's — under interleaved-1f1b, where chunks hold
// different counts and bytes, Σ_v ℓ_v · A_v: at most their in-flight sum times the rank's whole
// micro-batch, Σ_v A_v — and the total their sum (at least 0).
void validate_memory(const MemoryTerms& m, int num_micro_batches, int virtual_stages,
                     const std::string& where) {
  const int most = num_micro_batches * virtual_stages;
  PIPEPLAN_CHECK(m.in_flight >= 0 && m.in_flight <= most, where, "in_flight: ", m.in_flight,
                 ": expected at most ",
                 virtual_stages == 1 ? "num_micro_batches = " : "num_micro_batches*virtual_stages = ",
                 most);
  const int64_t product = m.in_flight * m.activation_bytes_per_micro_batch;
  if (virtual_stages == 1)
    PIPEPLAN_CHECK(m.activations_bytes == product, where, "activations_bytes: ",
                   m.activations_bytes, ": expected in_flight * ",
                   "activation_bytes_per_micro_batch = ", product);
  else
    PIPEPLAN_CHECK(m.activations_bytes >= 0 && m.activations_bytes <= product, where,
                   "activations_bytes: ", m.activations_bytes, ": expected at most in_flight * ",
                   "activation_bytes_per_micro_batch = ", product);
  PIPEPLAN_CHECK(m.total_bytes == m.sum_of_terms(), where, "total_bytes: ", m.total_bytes,
                 ": expected the sum of the terms, ", m.sum_of_terms());
}

// interleaved-1f1b: one entry per chunk, each time in range, the stage's times their sums.
void validate_chunks(const Plan& plan, const StagePrediction& s, const std::string& where) {
  const bool interleaved = plan.schedule == Schedule::kInterleaved1F1B;
  PIPEPLAN_CHECK(static_cast<int>(s.chunks.size()) == (interleaved ? plan.virtual_stages : 0),
                 where, "chunks: ", s.chunks.size(), " entries: expected ",
                 interleaved ? detail::concat("virtual_stages = ", plan.virtual_stages)
                             : std::string("none (only interleaved-1f1b has chunks)"));
  if (!interleaved) return;
  double sums[4] = {};
  for (size_t chunk = 0; chunk < s.chunks.size(); ++chunk) {
    const ChunkPrediction& c = s.chunks[chunk];
    const std::string at = detail::concat(where, "chunks[", chunk, "].");
    check_time(c.fwd_ms, kMaxTimeMs, at + "fwd_ms");
    check_time(c.bwd_ms, kMaxTimeMs, at + "bwd_ms");
    check_time(c.recompute_ms, kMaxTimeMs, at + "recompute_ms");
    check_time(c.p2p_ms, kMaxTimeMs, at + "p2p_ms");
    sums[0] += c.fwd_ms;
    sums[1] += c.bwd_ms;
    sums[2] += c.recompute_ms;
    sums[3] += c.p2p_ms;
  }
  for (const auto& [key, value, sum] :
       {std::tuple{"fwd_ms", s.fwd_ms, sums[0]}, {"bwd_ms", s.bwd_ms, sums[1]},
        {"recompute_ms", s.recompute_ms, sums[2]}, {"p2p_ms", s.p2p_ms, sums[3]}})
    PIPEPLAN_CHECK(about_equal(value, sum), where, key, ": ", value,
                   ": expected the sum over the stage's chunks, ", sum);
}

// dp > 1: buckets of the stage's chunks whose collectives sum to the stage's all-reduce; none
// with one replica. ZeRO-1 alone gathers parameters.
void validate_buckets(const Plan& plan, const StagePrediction& s, const std::string& where) {
  PIPEPLAN_CHECK(plan.dp > 1 || s.buckets.empty(), where, "buckets: ", s.buckets.size(),
                 " entries: expected none with dp = 1");
  PIPEPLAN_CHECK(s.allgather_ms == 0 || (plan.dp > 1 && plan.data_parallel.zero == 1), where,
                 "allgather_ms: ", s.allgather_ms, ": expected 0 (only ZeRO-1 gathers parameters)");
  check_time(s.allgather_ms, kMaxIterationMs, where + "allgather_ms");
  PIPEPLAN_CHECK(s.tp_allreduce_ms == 0 ||
                     (plan.tp() > 1 && s.tp_allreduce_ms <= s.compute_ms * (1 + kRelativeSlack)),
                 where, "tp_allreduce_ms: ", s.tp_allreduce_ms,
                 plan.tp() > 1 ? detail::concat(": expected at most compute_ms = ", s.compute_ms,
                                                " (the all-reduces are part of the compute)")
                               : std::string(": expected 0 (only tensor parallelism has it)"));
  check_time(s.allreduce_exposed_ms, kMaxIterationMs, where + "allreduce_exposed_ms");
  if (s.buckets.empty()) return;
  double sum = 0;
  for (size_t idx = 0; idx < s.buckets.size(); ++idx) {
    const BucketPrediction& b = s.buckets[idx];
    const std::string at = detail::concat(where, "buckets[", idx, "].");
    PIPEPLAN_CHECK(b.chunk >= 0 && b.chunk < plan.virtual_stages, at, "chunk: ", b.chunk,
                   ": expected a local chunk in [0, ", plan.virtual_stages, ")");
    PIPEPLAN_CHECK(b.bytes >= 0 && b.bytes <= kMaxBytes, at, "bytes: ", b.bytes,
                   ": expected a byte count in [0, ", kMaxBytes, "]");
    PIPEPLAN_CHECK(std::isfinite(b.ready_fraction) && b.ready_fraction >= 0 &&
                       b.ready_fraction <= 1,
                   at, "ready_fraction: ", b.ready_fraction, ": expected a fraction in [0, 1]");
    check_time(b.comm_ms, kMaxIterationMs, at + "comm_ms");
    sum += b.comm_ms;
  }
  PIPEPLAN_CHECK(about_equal(s.allreduce_ms, sum), where, "allreduce_ms: ", s.allreduce_ms,
                 ": expected the sum of the buckets' comm_ms, ", sum);
}

void validate_stage_prediction(const Plan& plan, size_t stage_idx, std::string_view document) {
  const StagePrediction& s = plan.predictions.stages[stage_idx];
  const std::string where = detail::concat(document, ": predictions.stages[", stage_idx, "].");
  check_time(s.fwd_ms, kMaxTimeMs, where + "fwd_ms");
  check_time(s.bwd_ms, kMaxTimeMs, where + "bwd_ms");
  check_time(s.recompute_ms, kMaxTimeMs, where + "recompute_ms");
  check_time(s.p2p_ms, kMaxTimeMs, where + "p2p_ms");
  for (const auto& [key, ms] : {std::pair{"compute_ms", s.compute_ms}, {"allreduce_ms", s.allreduce_ms},
                                {"optimizer_ms", s.optimizer_ms}, {"busy_ms", s.busy_ms},
                                {"idle_ms", s.idle_ms}})
    check_time(ms, kMaxIterationMs, where + key);
  check_time(s.bwd_weight_ms, kMaxTimeMs, where + "bwd_weight_ms");
  PIPEPLAN_CHECK(s.bwd_weight_ms == 0 || plan.schedule == Schedule::kZeroBubbleH1, where,
                 "bwd_weight_ms: ", s.bwd_weight_ms, ": expected 0 (only zb-h1 splits a backward)");
  const double compute_ms =
      plan.num_micro_batches * (s.fwd_ms + s.bwd_ms + s.bwd_weight_ms + s.recompute_ms);
  PIPEPLAN_CHECK(about_equal(s.compute_ms, compute_ms), where, "compute_ms: ", s.compute_ms,
                 ": expected num_micro_batches * (fwd_ms + bwd_ms + bwd_weight_ms + "
                 "recompute_ms) = ",
                 compute_ms);
  for (const auto& [key, cv] : {std::pair{"fwd_cv", s.fwd_cv}, {"bwd_cv", s.bwd_cv}})
    PIPEPLAN_CHECK(std::isfinite(cv) && cv >= 0 && cv <= kMaxCoefficientOfVariation, where, key,
                   ": ", cv, ": expected a coefficient of variation in [0, ",
                   kMaxCoefficientOfVariation, "]");
  validate_memory(s.memory, plan.num_micro_batches, plan.virtual_stages, where + "memory.");
  validate_chunks(plan, s, where);
  validate_buckets(plan, s, where);
  PIPEPLAN_CHECK(s.peak_memory_bytes == s.memory.total_bytes, where, "peak_memory_bytes: ",
                 s.peak_memory_bytes, ": expected memory.total_bytes = ", s.memory.total_bytes);
}

void validate_predictions(const Plan& plan, std::string_view document) {
  const Predictions& p = plan.predictions;
  PIPEPLAN_CHECK(static_cast<int>(p.stages.size()) == plan.pp, document, ": predictions.stages: ",
                 p.stages.size(), " entries: expected pp = ", plan.pp);
  double allreduce_ms = 0, optimizer_ms = 0;
  for (size_t stage_idx = 0; stage_idx < p.stages.size(); ++stage_idx) {
    validate_stage_prediction(plan, stage_idx, document);
    allreduce_ms = std::max(allreduce_ms, p.stages[stage_idx].allreduce_ms);
    optimizer_ms = std::max(optimizer_ms, p.stages[stage_idx].optimizer_ms);
  }
  const std::string where = detail::concat(document, ": predictions.");
  check_time(p.iteration_ms, kMaxIterationMs, where + "iteration_ms");
  PIPEPLAN_CHECK(std::isfinite(p.bubble_fraction) && p.bubble_fraction >= 0 &&
                     p.bubble_fraction <= 1,
                 where, "bubble_fraction: ", p.bubble_fraction, ": expected a fraction in [0, 1]");
  const double throughput = samples_per_s(plan.global_batch, p.iteration_ms);
  PIPEPLAN_CHECK(about_equal(p.samples_per_s, throughput), where, "samples_per_s: ",
                 p.samples_per_s, ": expected global_batch / iteration_ms = ", throughput);
  PIPEPLAN_CHECK(p.allreduce_ms == allreduce_ms, where, "allreduce_ms: ", p.allreduce_ms,
                 ": expected the longest stage all-reduce, ", allreduce_ms);
  PIPEPLAN_CHECK(p.optimizer_ms == optimizer_ms, where, "optimizer_ms: ", p.optimizer_ms,
                 ": expected the longest stage optimizer step, ", optimizer_ms);
  const bool varies = std::any_of(p.stages.begin(), p.stages.end(), [](const StagePrediction& s) {
    return s.fwd_cv > 0 || s.bwd_cv > 0;
  });
  PIPEPLAN_CHECK(varies || p.iteration_estimate != IterationEstimate::kDraws, where,
                 "iteration_estimate: draws: expected mean-times when no stage's times vary "
                 "(every fwd_cv and bwd_cv is 0)");
}

}  // namespace

void Plan::validate(std::string_view document) const {
  model.validate(document);
  validate_cluster(cluster, document);
  validate_sizes(*this, document);
  validate_optimizer(optimizer, document);
  bool known_partition = false;
  for (const char* name : kPartitionNames) known_partition = known_partition || partition == name;
  PIPEPLAN_CHECK(known_partition, document, ": partition: ", quote(partition),
                 ": expected optimal, uniform, parameters, greedy-time or explicit");
  validate_stages(*this, document);
  validate_ranks(*this, document);
  validate_predictions(*this, document);
  validate_mode(*this, document);
  if (calibration) {
    calibration->validate(document);
    PIPEPLAN_CHECK(calibration->stages.back().last == model.num_layers, document,
                   ": calibration.stages: layers [0, ", calibration->stages.back().last,
                   "): expected the model's ", model.num_layers, " layers");
  }
}

}  // namespace pipeplan
