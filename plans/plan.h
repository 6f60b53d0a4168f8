// The Plan: a fully decided configuration and its predictions (plan.json) — the contract
// between the planner and the executor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/model_ref.h"
#include "plans/calibration.h"
#include "plans/predictions.h"

namespace pipeplan {

inline constexpr const char* kPlanSchema = "pipeplan.plan/1";

/// Order of forward/backward/send/recv actions on each rank (plans/schedule.h).
enum class Schedule {
  kGpipe,
  kOneFOneB,
  /// Zero-bubble H1 (Qi et al., ICLR 2024): 1f1b's order with each backward split into B (the
  /// input gradient, sent upstream at once) and W (the weight gradients), W deferred by s
  /// micro-batches on stage s to fill the cool-down.
  kZeroBubbleH1,
  /// Interleaved 1F1B (Narayanan et al., SC 2021; Megatron-LM): the model is cut into pp·V
  /// chunks and rank s of a pipeline holds chunks s, s + pp, ..., s + (V − 1)·pp
  /// (Plan::virtual_stages = V >= 2); the warm-up and cool-down shrink by V.
  kInterleaved1F1B,
};
/// Numeric precision of the run.
enum class Precision { kFp32, kAmpBf16, kAmpFp16 };
/// What a plan runs: training steps (`pipeplan train`), or forward-only inference requests
/// (`pipeplan infer`).
enum class PlanMode { kTraining, kInference };
enum class OptimizerKind { kSgd, kAdamw };

/// Bytes of one element of an activation dtype: float32 4, int64 8, bfloat16 2, float16 2.
/// Throws Error(kBadInput) naming `field` for any other word.
int64_t dtype_bytes(std::string_view dtype, std::string_view field);
/// Bytes of a tensor of `batch` samples of `sample_shape` (no batch dimension) and `dtype`.
/// Throws Error(kBadInput) when they exceed kMaxBytes (common/limits.h).
int64_t activation_bytes(const std::vector<int64_t>& sample_shape, std::string_view dtype,
                         int64_t batch);

std::string to_string(Schedule schedule);  ///< "gpipe", "1f1b", "zb-h1", "interleaved-1f1b"
std::string to_string(Precision precision);      ///< "fp32", "amp-bf16", "amp-fp16"
std::string to_string(OptimizerKind optimizer);  ///< "sgd", "adamw"
std::string to_string(PlanMode mode);            ///< "training", "inference"
/// Parsers; `field` names the flag or key in the one-line error listing the accepted words.
Schedule parse_schedule(std::string_view text, std::string_view field);
Precision parse_precision(std::string_view text, std::string_view field);
OptimizerKind parse_optimizer(std::string_view text, std::string_view field);
PlanMode parse_plan_mode(std::string_view text, std::string_view field);

/// Optimizer and learning-rate schedule. lr = base_lr · global_batch / base_batch, warmed up
/// linearly over `warmup_steps`, then cosine-decayed to min_lr_fraction·lr at the last step.
struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::kSgd;
  double base_lr = 0.1;
  int64_t base_batch = 256;
  int64_t warmup_steps = 0;
  double min_lr_fraction = 0.0;
  double momentum = 0.9;  ///< SGD only
  double weight_decay = 5e-4;
  double beta1 = 0.9;  ///< AdamW only
  double beta2 = 0.999;
  double eps = 1e-8;
  /// The defaults pipeplan uses for `kind` (SGD: lr 0.1 at 256, momentum 0.9, wd 5e-4;
  /// AdamW: lr 1e-3 at 256, wd 0.01).
  static OptimizerSettings defaults_for(OptimizerKind kind);
};

/// The devices a plan is for. A bandwidth of 0 means "not measured": transfers over that kind
/// of link are predicted to be free (the plan's notes say so).
struct Cluster {
  std::string device_kind = "cpu";  ///< "cpu" or "cuda"
  int devices = 1;
  int64_t device_memory_bytes = 0;  ///< usable memory of one device
  int devices_per_node = 1;         ///< rank r runs on node r / devices_per_node
  double intra_node_bandwidth_bytes_per_s = 0;
  double inter_node_bandwidth_bytes_per_s = 0;
  double latency_ms = 0;  ///< per message, point-to-point
};

/// DDP's default gradient bucket (torch.nn.parallel.DistributedDataParallel's bucket_cap_mb).
inline constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

/// How the replicas of a stage combine their gradients and keep their optimizer state (dp > 1;
/// plan.json's optional "data_parallel" object, written only when dp > 1 so that other plans
/// keep their hashes; absent: no overlap, 25 MiB buckets, no sharding).
struct DataParallelSettings {
  /// Each gradient bucket's all-reduce (ZeRO-1: reduce-scatter) starts as soon as the last
  /// micro-batch's weight gradients of its layers are complete, during that backward, instead of
  /// all at once after the last backward (PyTorch DDP, Megatron's overlap_grad_reduce).
  bool overlap = false;
  /// Gradient bytes per bucket: each chunk's layers, last first, close a bucket once it holds at
  /// least this much (plans/buckets.h).
  int64_t bucket_bytes = kDefaultBucketBytes;
  /// 1: ZeRO-1. Each replica keeps 1/dp of the stage's optimizer state (its shard): gradients are
  /// reduce-scattered, each replica steps its shard, parameters are all-gathered. 0: replicated.
  int zero = 0;
};

/// One pipeline stage: layers [first, last) and what crosses its boundaries.
struct StagePlan {
  int first = 0;
  int last = 0;
  bool checkpoint = false;  ///< recompute the stage's forward during backward
  /// Partial checkpointing: the model indices of the stage's layers whose forward is recomputed
  /// during backward, ascending, some but not all of them, with `checkpoint` false (optional key,
  /// written when non-empty). Each keeps only its input per micro-batch in flight.
  std::vector<int> recompute_layers;
  std::vector<int64_t> input_sample_shape;   ///< activation received, per sample (no batch dim)
  std::string input_dtype = "float32";       ///< "float32", "int64", "bfloat16", "float16"
  std::vector<int64_t> output_sample_shape;  ///< activation sent, per sample
  std::string output_dtype = "float32";
};

/// Tensor parallelism (Megatron-LM's split): each stage's transformer blocks are cut over tp
/// consecutive ranks of one node, attention by heads and the MLP by its inner width; every other
/// layer runs whole on each of them (plan.json's optional "tensor_parallel" object, written only
/// when tp > 1 so that other plans keep their hashes).
struct TensorParallelSettings {
  int tp = 1;  ///< ranks per tensor-parallel group: 1 (none), or the group's size
  /// How the vocabulary embedding and the output head run: "replicated" (whole on every rank
  /// of the group; the only one built).
  std::string vocabulary = "replicated";
};

/// Where one rank runs.
struct RankAssignment {
  int rank = 0;
  int stage = 0;
  int replica = 0;
  int node = 0;        ///< rank / devices_per_node
  int local_rank = 0;  ///< rank % devices_per_node
  std::string device = "cpu";  ///< "cpu" or "cuda:N"
  int tp_rank = 0;             ///< its place in its stage's tensor-parallel group, in [0, tp)
};

/// A whole plan.json.
struct Plan {
  std::string tool_version;
  std::string profile_path;
  std::string profile_hash;
  ModelRef model;
  Cluster cluster;
  int64_t global_batch = 0;
  int dp = 1;
  int pp = 1;
  int64_t micro_batch_size = 0;
  int num_micro_batches = 1;
  Schedule schedule = Schedule::kOneFOneB;
  Precision precision = Precision::kFp32;
  OptimizerSettings optimizer;
  std::string partition = "optimal";  ///< optimal, uniform, parameters, greedy-time, explicit
  /// V, the chunks each rank of a pipeline holds: >= 2 with interleaved-1f1b, else 1 (optional
  /// key, written when above 1).
  int virtual_stages = 1;
  /// The model's contiguous layer ranges in order: pp of them, or with interleaved-1f1b pp·V
  /// chunks, chunk c on the pipeline's stage c % pp (its local chunk c / pp).
  std::vector<StagePlan> stages;
  std::vector<RankAssignment> ranks;  ///< indexed by rank
  Predictions predictions;
  /// The corrections from a measured run the predictions were made with; none by default.
  std::optional<Calibration> calibration;
  /// The gradient all-reduce's overlap and buckets, and ZeRO-1 (meaningful with dp > 1).
  DataParallelSettings data_parallel = {};
  /// Tensor parallelism; tp = 1 when the plan has none. Ranks are ordered tp innermost, then
  /// replica, then stage (Megatron-LM's order): a tensor-parallel group is tp consecutive ranks.
  TensorParallelSettings tensor_parallel = {};
  /// Training, or inference (optional key "mode", written only for inference so that training
  /// plans keep their hashes). An inference plan runs forward passes only: each request of
  /// global_batch samples is split over the dp replicas into num_micro_batches micro-batches of
  /// micro_batch_size that stream through the stages in order (expand_forward_only); it has
  /// schedule gpipe (the forward half of its order), one chunk per stage, no checkpointing, and
  /// predicts no backward, recompute, all-reduce or optimizer step.
  PlanMode mode = PlanMode::kTraining;

  /// Ranks per tensor-parallel group (tensor_parallel.tp).
  int tp() const { return tensor_parallel.tp; }

  /// Meaning, not only syntax (plan_validate.cpp): sizes within common/limits.h (at most
  /// kMaxDevices devices, kMaxMicroBatches micro-batches, kMaxBatchSize samples);
  /// dp·tp·pp = devices = ranks, a tensor-parallel group within one node, training only; pp·V <=
  /// num_layers stages (V = virtual_stages: 1, or >= 2 with interleaved-1f1b, pp >= 2 and
  /// num_micro_batches a multiple of pp), contiguous, non-empty, covering [0, num_layers); each
  /// stage receives what the previous one sends (the first: the model's input), non-empty shapes of
  /// at most kMaxBytes per micro-batch, known dtypes; global_batch = dp · num_micro_batches ·
  /// micro_batch_size; each (stage, replica) on exactly one rank, on a device of the cluster's
  /// kind; node and local_rank follow from the rank and devices_per_node; optimizer hyperparameters
  /// in range; predictions finite, within kMaxTimeMs (per micro-batch) or kMaxIterationMs (per
  /// iteration), and consistent (compute = micro-batches × per-micro-batch times, memory total =
  /// sum of its terms = peak, samples/s = global batch / iteration); a calibration covers the
  /// model's layers. Throws Error(kBadInput) "<document>: <field>: <value>: <what is expected>".
  void validate(std::string_view document) const;
};

/// Every term by its key ("parameters_bytes", ..., "total_bytes"), and "in_flight".
Json to_json(const MemoryTerms& memory);
Json to_json(const Plan& plan);
Plan plan_from_json(const Json& json, const std::string& document);
Plan read_plan(const std::string& path);
void write_plan(const std::string& path, const Plan& plan);
/// content_hash of the canonical JSON: identifies the plan a run came from.
std::string plan_hash(const Plan& plan);
/// Partial checkpointing's marker for a stage's recomputed layers, as plan_configuration and
/// compare write it: "r3.4" for layers 3 and 4, "" for none.
std::string recompute_marker(const std::vector<int>& recompute_layers);
/// The configuration a run depends on, as one line ("tp=2 " after dp with tensor parallelism):
/// "dp=1 pp=2 b=4 m=4 1f1b stages
/// 0:2,2:5c" (c: checkpointed; "2:5r3.4": layers 3 and 4 recomputed). Two plans with equal lines
/// run the same actions on the same layers.
std::string plan_configuration(const Plan& plan);
/// The rank running `stage` of `replica` as member `tp_rank` of its tensor-parallel group.
int rank_of(const Plan& plan, int stage, int replica, int tp_rank = 0);
/// The index in plan.stages of local chunk `chunk` of pipeline stage `stage`: chunk · pp + stage
/// (just `stage` when virtual_stages is 1).
inline int chunk_index(int pp, int stage, int chunk) { return chunk * pp + stage; }

}  // namespace pipeplan
