// The Plan: JSON reading and writing.
#include <algorithm>
#include <limits>
#include <utility>

#include "common/error.h"
#include "common/limits.h"
#include "plans/plan.h"

namespace pipeplan {
namespace {

Json optimizer_json(const OptimizerSettings& o) {
  return Json{{"kind", to_string(o.kind)},     {"base_lr", o.base_lr},
              {"base_batch", o.base_batch},    {"warmup_steps", o.warmup_steps},
              {"min_lr_fraction", o.min_lr_fraction}, {"momentum", o.momentum},
              {"weight_decay", o.weight_decay}, {"beta1", o.beta1},
              {"beta2", o.beta2},              {"eps", o.eps}};
}

OptimizerSettings optimizer_from(const JsonReader& r) {
  OptimizerSettings o;
  o.kind = parse_optimizer(r.string("kind"), r.document() + ": optimizer.kind");
  o.base_lr = r.non_negative("base_lr");
  o.base_batch = r.integer_in("base_batch", 1, kMaxBatchSize);
  o.warmup_steps = r.integer_in("warmup_steps", 0, kMaxSteps);
  o.min_lr_fraction = r.non_negative("min_lr_fraction");
  o.momentum = r.non_negative("momentum");
  o.weight_decay = r.non_negative("weight_decay");
  o.beta1 = r.non_negative("beta1");
  o.beta2 = r.non_negative("beta2");
  o.eps = r.non_negative("eps");
  return o;
}

Json cluster_json(const Cluster& c) {
  return Json{{"device_kind", c.device_kind},
              {"devices", c.devices},
              {"device_memory_bytes", c.device_memory_bytes},
              {"devices_per_node", c.devices_per_node},
              {"intra_node_bandwidth_bytes_per_s", c.intra_node_bandwidth_bytes_per_s},
              {"inter_node_bandwidth_bytes_per_s", c.inter_node_bandwidth_bytes_per_s},
              {"latency_ms", c.latency_ms}};
}

Cluster cluster_from(const JsonReader& r) {
  Cluster c;
  c.device_kind = r.string("device_kind");
  c.devices = r.int_in("devices", 1, kMaxDevices);
  c.device_memory_bytes = r.integer_in("device_memory_bytes", 1, kMaxBytes);
  c.devices_per_node = r.int_in("devices_per_node", 1, std::numeric_limits<int>::max());
  c.intra_node_bandwidth_bytes_per_s = r.non_negative("intra_node_bandwidth_bytes_per_s");
  c.inter_node_bandwidth_bytes_per_s = r.non_negative("inter_node_bandwidth_bytes_per_s");
  c.latency_ms = r.time_ms("latency_ms");
  return c;
}

Json stage_json(const StagePlan& s) {
  Json json{{"first", s.first},
            {"last", s.last},
            {"checkpoint", s.checkpoint},
            {"input_sample_shape", s.input_sample_shape},
            {"input_dtype", s.input_dtype},
            {"output_sample_shape", s.output_sample_shape},
            {"output_dtype", s.output_dtype}};
  if (!s.recompute_layers.empty()) json["recompute_layers"] = s.recompute_layers;
  return json;
}

StagePlan stage_from(const JsonReader& r) {
  StagePlan s;
  s.first = r.int_in("first", 0, kMaxLayers - 1);
  s.last = r.int_in("last", 1, kMaxLayers);
  s.checkpoint = r.boolean("checkpoint");
  if (r.has("recompute_layers"))  // optional: none when absent
    for (int64_t layer : r.integers_in("recompute_layers", 0, kMaxLayers - 1))
      s.recompute_layers.push_back(static_cast<int>(layer));
  s.input_sample_shape = r.integers_in("input_sample_shape", 1, kMaxBytes);
  s.input_dtype = r.string("input_dtype");
  s.output_sample_shape = r.integers_in("output_sample_shape", 1, kMaxBytes);
  s.output_dtype = r.string("output_dtype");
  return s;
}

// "tp_rank" only in plans with tensor parallelism (`tensor_parallel`), so that others keep their
// hashes.
Json rank_json(const RankAssignment& a, bool tensor_parallel) {
  Json json{{"rank", a.rank}, {"stage", a.stage},           {"replica", a.replica},
            {"node", a.node}, {"local_rank", a.local_rank}, {"device", a.device}};
  if (tensor_parallel) json["tp_rank"] = a.tp_rank;
  return json;
}

RankAssignment rank_from(const JsonReader& r) {
  RankAssignment a;
  a.rank = r.int_in("rank", 0, kMaxDevices - 1);
  a.stage = r.int_in("stage", 0, kMaxDevices - 1);
  a.replica = r.int_in("replica", 0, kMaxDevices - 1);
  if (r.has("tp_rank")) a.tp_rank = r.int_in("tp_rank", 0, kMaxDevices - 1);  // optional: 0
  a.node = r.int_in("node", 0, kMaxDevices - 1);
  a.local_rank = r.int_in("local_rank", 0, kMaxDevices - 1);
  a.device = r.string("device");
  return a;
}

// The memory terms, in a fixed order shared by writer and reader.
const std::pair<const char*, int64_t MemoryTerms::*> kMemoryFields[] = {
    {"parameters_bytes", &MemoryTerms::parameters_bytes},
    {"gradients_bytes", &MemoryTerms::gradients_bytes},
    {"optimizer_state_bytes", &MemoryTerms::optimizer_state_bytes},
    {"master_copy_bytes", &MemoryTerms::master_copy_bytes},
    {"buffers_bytes", &MemoryTerms::buffers_bytes},
    {"activation_bytes_per_micro_batch", &MemoryTerms::activation_bytes_per_micro_batch},
    {"activations_bytes", &MemoryTerms::activations_bytes},
    {"recompute_bytes", &MemoryTerms::recompute_bytes},
    {"transient_bytes", &MemoryTerms::transient_bytes},
    {"comm_buffers_bytes", &MemoryTerms::comm_buffers_bytes},
    {"runtime_overhead_bytes", &MemoryTerms::runtime_overhead_bytes},
    {"total_bytes", &MemoryTerms::total_bytes},
};

// Per-micro-batch and per-iteration times of a stage prediction.
const std::pair<const char*, double StagePrediction::*> kStageTimeFields[] = {
    {"fwd_ms", &StagePrediction::fwd_ms},         {"bwd_ms", &StagePrediction::bwd_ms},
    {"recompute_ms", &StagePrediction::recompute_ms}, {"p2p_ms", &StagePrediction::p2p_ms},
    {"compute_ms", &StagePrediction::compute_ms}, {"allreduce_ms", &StagePrediction::allreduce_ms},
    {"optimizer_ms", &StagePrediction::optimizer_ms}, {"busy_ms", &StagePrediction::busy_ms},
    {"idle_ms", &StagePrediction::idle_ms},
};

Json stage_prediction_json(const StagePrediction& s) {
  Json json{{"peak_memory_bytes", s.peak_memory_bytes}, {"memory", to_json(s.memory)}};
  for (const auto& [key, field] : kStageTimeFields) json[key] = s.*field;
  // Optional: written only when there is a spread, so that a plan without one keeps the hash
  // its runs recorded.
  if (s.fwd_cv > 0 || s.bwd_cv > 0) {
    json["fwd_cv"] = s.fwd_cv;
    json["bwd_cv"] = s.bwd_cv;
  }
  if (s.bwd_weight_ms > 0) json["bwd_weight_ms"] = s.bwd_weight_ms;  // zb-h1 only
  if (!s.chunks.empty()) {  // interleaved-1f1b only
    json["chunks"] = json_array(s.chunks, [](const ChunkPrediction& chunk) {
      return Json{{"fwd_ms", chunk.fwd_ms},
                  {"bwd_ms", chunk.bwd_ms},
                  {"recompute_ms", chunk.recompute_ms},
                  {"p2p_ms", chunk.p2p_ms}};
    });
  }
  if (!s.buckets.empty()) {  // dp > 1 only
    json["buckets"] = json_array(s.buckets, [](const BucketPrediction& bucket) {
      return Json{{"chunk", bucket.chunk},
                  {"bytes", bucket.bytes},
                  {"ready_fraction", bucket.ready_fraction},
                  {"comm_ms", bucket.comm_ms}};
    });
  }
  if (s.allgather_ms > 0) json["allgather_ms"] = s.allgather_ms;  // ZeRO-1 only
  if (s.tp_allreduce_ms > 0) json["tp_allreduce_ms"] = s.tp_allreduce_ms;  // tp > 1 only
  if (s.allreduce_exposed_ms > 0) json["allreduce_exposed_ms"] = s.allreduce_exposed_ms;
  return json;
}

StagePrediction stage_prediction_from(const JsonReader& r) {
  StagePrediction s;
  for (const auto& [key, field] : kStageTimeFields)
    s.*field = r.number_in(key, 0, kMaxIterationMs);  // validate() bounds the per-micro-batch ones
  // Optional: absent means no spread.
  if (r.has("fwd_cv")) s.fwd_cv = r.non_negative("fwd_cv");
  if (r.has("bwd_cv")) s.bwd_cv = r.non_negative("bwd_cv");
  if (r.has("bwd_weight_ms")) s.bwd_weight_ms = r.number_in("bwd_weight_ms", 0, kMaxTimeMs);
  if (r.has("chunks"))  // interleaved-1f1b only
    for (const JsonReader& chunk : r.objects("chunks"))
      s.chunks.push_back({chunk.number_in("fwd_ms", 0, kMaxTimeMs),
                          chunk.number_in("bwd_ms", 0, kMaxTimeMs),
                          chunk.number_in("recompute_ms", 0, kMaxTimeMs),
                          chunk.number_in("p2p_ms", 0, kMaxTimeMs)});
  if (r.has("buckets"))  // dp > 1 only
    for (const JsonReader& bucket : r.objects("buckets"))
      s.buckets.push_back({bucket.int_in("chunk", 0, kMaxVirtualStages - 1),
                           bucket.byte_count("bytes"), bucket.number_in("ready_fraction", 0, 1),
                           bucket.number_in("comm_ms", 0, kMaxIterationMs)});
  if (r.has("allgather_ms")) s.allgather_ms = r.number_in("allgather_ms", 0, kMaxIterationMs);
  if (r.has("tp_allreduce_ms"))
    s.tp_allreduce_ms = r.number_in("tp_allreduce_ms", 0, kMaxIterationMs);
  if (r.has("allreduce_exposed_ms"))
    s.allreduce_exposed_ms = r.number_in("allreduce_exposed_ms", 0, kMaxIterationMs);
  s.peak_memory_bytes = r.byte_count("peak_memory_bytes");
  const JsonReader memory = r.object("memory");
  // interleaved-1f1b counts each chunk's micro-batches: up to V·m (validate() checks).
  s.memory.in_flight = memory.int_in("in_flight", 0, kMaxVirtualStages * kMaxMicroBatches);
  for (const auto& [key, field] : kMemoryFields) s.memory.*field = memory.byte_count(key);
  if (memory.has("deferred_gradients_bytes"))  // zb-h1 only
    s.memory.deferred_gradients_bytes = memory.byte_count("deferred_gradients_bytes");
  // Signed; optional: absent means 0 (no calibration).
  if (memory.has("calibration_bytes"))
    s.memory.calibration_bytes = memory.integer_in("calibration_bytes", -kMaxBytes, kMaxBytes);
  return s;
}

// A plan's iteration_estimate when its JSON has none: draws where a stage's times vary (the
// planner drew whenever they did before the key, and does within its budget), else mean-times.
IterationEstimate estimate_without_key(const std::vector<StagePrediction>& stages) {
  const bool varies = std::any_of(stages.begin(), stages.end(), [](const StagePrediction& s) {
    return s.fwd_cv > 0 || s.bwd_cv > 0;
  });
  return varies ? IterationEstimate::kDraws : IterationEstimate::kMeanTimes;
}

Json predictions_json(const Predictions& p) {
  Json json{{"iteration_ms", p.iteration_ms}, {"samples_per_s", p.samples_per_s},
            {"bubble_fraction", p.bubble_fraction}, {"allreduce_ms", p.allreduce_ms},
            {"optimizer_ms", p.optimizer_ms},
            {"stages", json_array(p.stages, stage_prediction_json)}, {"notes", p.notes}};
  if (p.latency_ms > 0) json["latency_ms"] = p.latency_ms;  // inference only
  // Only where it is not what a plan without the key reads as, so that plans written before the
  // key keep their hash (the one their runs recorded).
  if (p.iteration_estimate != estimate_without_key(p.stages))
    json["iteration_estimate"] = to_string(p.iteration_estimate);
  return json;
}

Predictions predictions_from(const JsonReader& r) {
  Predictions p;
  p.iteration_ms = r.number_in("iteration_ms", 0, kMaxIterationMs);
  p.samples_per_s = r.non_negative("samples_per_s");
  p.bubble_fraction = r.number_in("bubble_fraction", 0, 1);
  p.allreduce_ms = r.number_in("allreduce_ms", 0, kMaxIterationMs);
  if (r.has("latency_ms")) p.latency_ms = r.number_in("latency_ms", 0, kMaxIterationMs);
  p.optimizer_ms = r.number_in("optimizer_ms", 0, kMaxIterationMs);
  for (const JsonReader& stage : r.objects("stages")) p.stages.push_back(stage_prediction_from(stage));
  if (!r.at("notes").is_array()) r.reject("notes", r.at("notes"), "expected an array of strings");
  for (const Json& note : r.at("notes")) {
    if (!note.is_string()) r.reject("notes", note, "expected strings");
    p.notes.push_back(note.get<std::string>());
  }
  p.iteration_estimate =
      r.has("iteration_estimate")
          ? parse_iteration_estimate(r.string("iteration_estimate"),
                                     r.document() + ": predictions.iteration_estimate")
          : estimate_without_key(p.stages);
  return p;
}

}  // namespace

Json to_json(const MemoryTerms& memory) {
  Json json{{"in_flight", memory.in_flight}, {"calibration_bytes", memory.calibration_bytes}};
  for (const auto& [key, field] : kMemoryFields) json[key] = memory.*field;
  if (memory.deferred_gradients_bytes > 0)
    json["deferred_gradients_bytes"] = memory.deferred_gradients_bytes;
  return json;
}

Json to_json(const Plan& plan) {
  Json json{{"schema", kPlanSchema},
            {"tool_version", plan.tool_version},
            {"profile", {{"path", plan.profile_path}, {"hash", plan.profile_hash}}},
            {"model", to_json(plan.model)},
            {"cluster", cluster_json(plan.cluster)},
            {"global_batch", plan.global_batch},
            {"dp", plan.dp},
            {"pp", plan.pp},
            {"micro_batch_size", plan.micro_batch_size},
            {"num_micro_batches", plan.num_micro_batches},
            {"schedule", to_string(plan.schedule)},
            {"precision", to_string(plan.precision)},
            {"optimizer", optimizer_json(plan.optimizer)},
            {"partition", plan.partition},
            {"virtual_stages", plan.virtual_stages},
            {"stages", json_array(plan.stages, stage_json)},
            {"ranks",
             json_array(plan.ranks,
                        [&plan](const RankAssignment& a) { return rank_json(a, plan.tp() > 1); })},
            {"predictions", predictions_json(plan.predictions)},
            {"calibration", plan.calibration ? to_json(*plan.calibration) : Json(nullptr)}};
  // Optional: written only for interleaved-1f1b, so that other plans keep their hashes.
  if (plan.virtual_stages == 1) json.erase("virtual_stages");
  if (plan.mode != PlanMode::kTraining) json["mode"] = to_string(plan.mode);  // optional too
  if (plan.dp > 1 && plan.mode == PlanMode::kTraining)  // optional: nothing to combine otherwise
    json["data_parallel"] = {{"overlap", plan.data_parallel.overlap},
                             {"bucket_bytes", plan.data_parallel.bucket_bytes},
                             {"zero", plan.data_parallel.zero}};
  if (plan.tp() > 1)  // optional: absent means tp 1
    json["tensor_parallel"] = {{"tp", plan.tp()}, {"vocabulary", plan.tensor_parallel.vocabulary}};
  return json;
}

Plan plan_from_json(const Json& json, const std::string& document) {
  check_schema(json, kPlanSchema, document);
  const JsonReader r(json, document);
  Plan plan;
  plan.tool_version = r.string("tool_version");
  const JsonReader profile = r.object("profile");
  plan.profile_path = profile.string("path");
  plan.profile_hash = profile.string("hash");
  plan.model = model_ref_from_json(r.object("model"));
  plan.cluster = cluster_from(r.object("cluster"));
  plan.global_batch = r.integer_in("global_batch", 1, kMaxBatchSize);
  plan.dp = r.int_in("dp", 1, kMaxDevices);
  plan.pp = r.int_in("pp", 1, kMaxDevices);
  plan.micro_batch_size = r.integer_in("micro_batch_size", 1, kMaxBatchSize);
  plan.num_micro_batches = r.int_in("num_micro_batches", 1, kMaxMicroBatches);
  plan.schedule = parse_schedule(r.string("schedule"), document + ": schedule");
  plan.precision = parse_precision(r.string("precision"), document + ": precision");
  plan.optimizer = optimizer_from(r.object("optimizer"));
  plan.partition = r.string("partition");
  if (r.has("virtual_stages"))  // optional: 1 when absent
    plan.virtual_stages = r.int_in("virtual_stages", 1, kMaxVirtualStages);
  if (r.has("mode"))  // optional: training when absent
    plan.mode = parse_plan_mode(r.string("mode"), document + ": mode");
  if (r.has("data_parallel")) {  // optional: the defaults when absent
    const JsonReader dp = r.object("data_parallel");
    plan.data_parallel.overlap = dp.boolean("overlap");
    plan.data_parallel.bucket_bytes = dp.integer_in("bucket_bytes", kMinBucketBytes, kMaxBytes);
    plan.data_parallel.zero = dp.int_in("zero", 0, 1);
  }
  if (r.has("tensor_parallel")) {  // optional: tp 1 when absent
    const JsonReader tp = r.object("tensor_parallel");
    plan.tensor_parallel.tp = tp.int_in("tp", 1, kMaxDevices);
    plan.tensor_parallel.vocabulary = tp.string("vocabulary");
  }
  for (const JsonReader& stage : r.objects("stages")) plan.stages.push_back(stage_from(stage));
  for (const JsonReader& rank : r.objects("ranks")) plan.ranks.push_back(rank_from(rank));
  plan.predictions = predictions_from(r.object("predictions"));
  if (r.has("calibration") && !r.at("calibration").is_null())
    plan.calibration = calibration_from_json(r.object("calibration"));
  plan.validate(document);
  return plan;
}

Plan read_plan(const std::string& path) { return plan_from_json(read_json_file(path), path); }

void write_plan(const std::string& path, const Plan& plan) { write_json_file(path, to_json(plan)); }

}  // namespace pipeplan
