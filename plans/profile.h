// The Profile: per-layer measurements of one model on one device kind (profile.json), free of
// LibTorch so that the planner can read it anywhere.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/model_ref.h"

namespace pipeplan {

inline constexpr const char* kProfileSchema = "pipeplan.profile/1";
/// A split transformer block's all-reduces per forward: g after attention and after the MLP.
inline constexpr int kBlockAllReduces = 2;

/// y = intercept + slope·x, fitted by least squares over the profiled points.
struct LinearFit {
  double intercept = 0;
  double slope = 0;
  double rms_residual = 0;  ///< root-mean-square residual, in the units of y
  double at(double x) const { return intercept + slope * x; }
};

/// Least-squares fit of ys over xs (same length, >= 1 point; one point gives a line through
/// the origin and the point).
LinearFit fit_linear(const std::vector<double>& xs, const std::vector<double>& ys);

/// One layer measured at one micro-batch size.
struct LayerPoint {
  int64_t batch_size = 0;
  /// Median forward time over the repeats (steady clock on the CPU, CUDA events on a GPU): the
  /// layer's forward building its autograd graph, timed while consecutive layers run in
  /// sequence as in a stage. The model's last layer includes the loss (compute_loss against a
  /// random target) in its forward and backward.
  double fwd_ms = 0;
  double fwd_ms_p90 = 0;  ///< 90th percentile forward time
  /// Median backward time of this layer alone, timed while the layers' backwards run in reverse
  /// sequence: from the gradient its successor's backward produced (the loss, for the last
  /// layer; a random gradient when the successor was measured in another chain) to its parameter
  /// gradients (accumulated into allocated ones) and, except for layer 0 whose input is the
  /// data, its input gradient. Each layer's backward is its own autograd engine call, which a
  /// stage's backward enters once: a few microseconds per layer more than in a stage (CPU).
  double bwd_ms = 0;
  double bwd_ms_p90 = 0;
  /// CUDA with CUPTI only: median GPU busy time inside the layer's window, from kernel activity
  /// records (the union of kernel intervals: the sum of kernel durations on one stream, without
  /// launch gaps); the wall times above come from CUDA events.
  std::optional<double> fwd_kernel_ms;
  std::optional<double> bwd_kernel_ms;
  /// The backward split in two, as a zero-bubble schedule (zb-h1) runs it, each the median of
  /// its own timed passes (separate from those of bwd_ms, same clock, warmup and repeats):
  /// B, the gradient of the layer's input alone (0 for layer 0, whose input is the data, and for
  /// any integer input such as tokens), and W, the gradients of the layer's parameters alone
  /// (0 for a layer without parameters), from the same output gradient as bwd_ms. W also
  /// computes the gradients inside the layer on the way to its first parameters, so B + W
  /// exceeds bwd_ms (CPU: about 1.4x for resnet_tiny's blocks, 1.7x for gpt_tiny's, whose W is
  /// nearly the whole backward as a block opens with a LayerNorm). Both present or both absent,
  /// at every point of every layer or at none (profiles from before the split).
  std::optional<double> bwd_input_ms;
  std::optional<double> bwd_weight_ms;
  /// The forward as `pipeplan infer` runs it: the layer in evaluation mode under
  /// torch::NoGradGuard, recording no autograd graph (no loss on the last layer), timed in passes
  /// of its own over the chain (same clock, warm-up and repeats as fwd_ms, consecutive layers in
  /// sequence as in a stage, the passes back to back as a served stage runs its micro-batches,
  /// after the training passes): median and p90. On the CPU at b = 4, 0.6-0.75x fwd_ms for
  /// resnet_tiny's blocks, 0.3x for its stem (batch norm from its running statistics instead of
  /// the batch's) and 0.2x for its head (whose fwd_ms includes the loss). With interleaved
  /// training passes evicting its weights between two of its forwards, the same layers took
  /// 0.65-0.85x, and a pp = 1 stage's forward was over-predicted by up to 21% where back-to-back
  /// passes were within 6% (issue 23's A/B runs). The three inference_fwd_* fields are present
  /// together, at every point of every layer or at none (profiles from before they were
  /// measured); without them an inference plan takes fwd_ms, fwd_ms_p90 and output_bytes +
  /// fwd_transient_bytes instead.
  std::optional<double> inference_fwd_ms;
  std::optional<double> inference_fwd_ms_p90;
  /// Peak bytes during that forward above the bytes alive just before it (its input, which it
  /// does not free): the output it allocates (0 when the output shares the input's storage) and
  /// the temporaries alive beside it at the worst moment: an intermediate such as a block's first
  /// ReLU output, and on the CPU oneDNN's copy of a convolution's input in its blocked layout and
  /// its reordered weight (resnet_tiny's first block at b = 4: 3 x 200,704 + 9,216 bytes, where
  /// fwd_transient_bytes, measured with the graph alive, is 2 x 200,704). Allocator-reported
  /// bytes, as the executor measures (CPU: requested sizes; CUDA: block sizes).
  std::optional<int64_t> inference_fwd_peak_bytes;
  std::vector<int64_t> output_shape;  ///< including the batch dimension
  int64_t output_bytes = 0;           ///< bytes of the output activation
  /// Bytes the layer's autograd graph keeps alive from forward until backward, measured with
  /// the allocator's own reporting; includes the layer's input and output when it saves them.
  /// CPU: the bytes LibTorch's CPU allocator reported (requested sizes); CUDA: the caching
  /// allocator's allocated bytes (block sizes). The executor compares against the same counts.
  int64_t retained_bytes = 0;
  /// The part of retained_bytes that is the layer's input (e.g. a Linear saves its input).
  int64_t saved_input_bytes = 0;
  /// The part of retained_bytes that is the layer's output (e.g. a ReLU saves its output).
  /// Chaining layers i and i+1, min(saved_output_bytes[i], saved_input_bytes[i+1]) is the
  /// same storage counted twice.
  int64_t saved_output_bytes = 0;
  /// Peak bytes during forward above the end state (input, graph and output alive).
  int64_t fwd_transient_bytes = 0;
  /// Peak bytes during backward above the state just before it (graph, output gradient and
  /// allocated parameter gradients alive); includes the input gradient it produces.
  int64_t bwd_transient_bytes = 0;
};

/// Fits over the batch size of each per-point quantity.
struct LayerFits {
  LinearFit fwd_ms;
  LinearFit bwd_ms;
  LinearFit output_bytes;
  LinearFit retained_bytes;
  LinearFit fwd_transient_bytes;
  LinearFit bwd_transient_bytes;
  /// Fits of the B/W split, present exactly when the points have it.
  std::optional<LinearFit> bwd_input_ms;
  std::optional<LinearFit> bwd_weight_ms;
  /// Fits of the inference forward's median time and peak bytes, present exactly when the points
  /// have them.
  std::optional<LinearFit> inference_fwd_ms;
  std::optional<LinearFit> inference_fwd_peak_bytes;
};

/// LayerFits' always-present fits with their JSON keys, in the order they are read and checked.
inline constexpr std::pair<const char*, LinearFit LayerFits::*> kLayerFitFields[] = {
    {"fwd_ms", &LayerFits::fwd_ms},
    {"bwd_ms", &LayerFits::bwd_ms},
    {"output_bytes", &LayerFits::output_bytes},
    {"retained_bytes", &LayerFits::retained_bytes},
    {"fwd_transient_bytes", &LayerFits::fwd_transient_bytes},
    {"bwd_transient_bytes", &LayerFits::bwd_transient_bytes}};
/// LayerFits' optional fits with their JSON keys, read and checked after kLayerFitFields.
inline constexpr std::pair<const char*, std::optional<LinearFit> LayerFits::*>
    kLayerOptionalFitFields[] = {
        {"bwd_input_ms", &LayerFits::bwd_input_ms},
        {"bwd_weight_ms", &LayerFits::bwd_weight_ms},
        {"inference_fwd_ms", &LayerFits::inference_fwd_ms},
        {"inference_fwd_peak_bytes", &LayerFits::inference_fwd_peak_bytes}};

/// Every per-point quantity fitted over the batch size of `points` (not empty).
LayerFits fit_points(const std::vector<LayerPoint>& points);

/// Everything measured about one layer.
struct LayerProfile {
  int index = 0;
  std::string name;
  std::string kind;
  int64_t param_count = 0;
  int64_t param_bytes = 0;
  int64_t buffer_bytes = 0;
  std::string output_dtype = "float32";
  /// Time of one optimizer step over this layer's parameters, by optimizer ("sgd", "adamw").
  std::map<std::string, double> optimizer_step_ms;
  std::vector<LayerPoint> points;  ///< one per profiled batch size, ascending
  LayerFits fits;
  /// The tensor-parallel group size this record was measured split for: 1 for the whole layer;
  /// in tp_shards, the size whose shard (rank 0's) it holds.
  int tp = 1;
  /// What a tensor-parallel group's size must divide for the layer to split ({"heads": 12,
  /// "mlp_dim": 3072}); empty for a layer that does not split (optional key "tp_divides").
  std::map<std::string, int64_t> tp_divides;
  /// A layer that splits: the all-reduces of its output's size it runs per forward, one per
  /// column–row pair (2 for a transformer block: attention and MLP; a TorchScript layer's
  /// MLPs); its backward runs as many (optional key "tp_all_reduces": 2).
  int tp_all_reduces = kBlockAllReduces;
  /// A layer that splits (a transformer block): its shard measured at each size of
  /// settings.tp_sizes, ascending, with the same index, name and kind, the shard's parameters
  /// and its own points and fits (optional key "tp_shards", written when not empty). The
  /// all-reduces a split layer runs are not in these times (the profiler sums nothing).
  std::vector<LayerProfile> tp_shards;
};

/// A communication operation timed over message sizes: time = latency + bytes / bandwidth.
struct CommProfile {
  double latency_ms = 0;
  double bandwidth_bytes_per_s = 0;
  double rms_residual_ms = 0;
  struct Point {
    int64_t bytes = 0;
    double time_ms = 0;  ///< median
  };
  std::vector<Point> points;
};

/// An all-reduce over more than two ranks: a tensor-parallel group's.
struct GroupAllReduce {
  int ranks = 4;
  CommProfile allreduce;
};

/// Measured between two local ranks with the backend the executor will use.
struct InterconnectProfile {
  std::string backend;  ///< "gloo" or "nccl"
  int ranks = 2;
  CommProfile p2p;        ///< one send/recv
  CommProfile allreduce;  ///< all-reduce over `ranks`
  /// ZeRO-1's collectives over `ranks` as the executor runs them, `bytes` the whole tensor
  /// (optional keys "reduce_scatter" and "all_gather"; no points when not measured, as in
  /// profiles from before they were).
  CommProfile reduce_scatter = {};
  CommProfile all_gather = {};
  /// "group_allreduce" (optional): the all-reduce over each tensor-parallel size above `ranks`
  /// that the machine had the devices for, by strictly ascending ranks.
  std::vector<GroupAllReduce> group_allreduce = {};
};

/// Fits time = latency + bytes / bandwidth to `points` (>= 2 sizes), minimising the relative
/// error of each point so that the small messages decide the latency and the large ones the
/// bandwidth; a negative intercept becomes latency 0. The points stay in the result.
CommProfile fit_comm(std::vector<CommProfile::Point> points);

/// The "interconnect" object of profile.json, and back (`document` names the file in errors).
Json to_json(const InterconnectProfile& link);
InterconnectProfile interconnect_from_json(const Json& json, const std::string& document);
/// One element of "group_allreduce": {"ranks": N, "allreduce": {...}}, and back.
Json to_json(const GroupAllReduce& group);
GroupAllReduce group_allreduce_from_json(const Json& json, const std::string& document);

/// The device the layers ran on.
struct DeviceProfile {
  std::string kind;  ///< "cpu" or "cuda"
  std::string name;  ///< CPU model or GPU name
  int cores = 0;     ///< logical cores of the machine
  int threads = 0;   ///< intra-op threads each measuring process used
  int64_t memory_bytes = 0;            ///< physical memory, or GPU capacity
  /// Device memory held after runtime initialisation outside the allocator's accounting (CUDA
  /// context, library handles, loaded kernels). 0 on the CPU: the byte counts of this profile are
  /// allocator-tracked, and the executor compares against the same allocator-tracked counts —
  /// except for a TorchScript file, whose compiled code and debug records every rank keeps on
  /// the host while it runs the file's layers (a few KiB to MiB, the file's): counted here.
  int64_t runtime_overhead_bytes = 0;
};

/// How the profile was taken (the command-line settings).
struct ProfileSettings {
  std::string device = "cpu";  ///< "cpu", "cuda", "cuda:N"
  std::vector<int64_t> batch_sizes;
  std::string precision = "fp32";  ///< "fp32", "amp-bf16", "amp-fp16"
  int warmup = 0;      ///< untimed passes (forwards, backwards) per chain of layers and batch size
  int repeats = 0;     ///< timed passes (forwards, backwards) per chain of layers and batch size
  int co_located = 1;  ///< processes that measured at once (sharing cores or one GPU)
  uint64_t seed = 0;   ///< seed of the layer weights and the random input batch
  /// Tensor-parallel group sizes at which every splitting layer was measured split, ascending,
  /// each at least 2 and dividing every count such a layer splits (optional key, written when
  /// not empty; empty when no layer splits or with --tp-sizes none).
  std::vector<int> tp_sizes;
};

/// A parameter several layers use (the model's tied weights): counted in the param_count and
/// param_bytes of each of its layers; a stage holding several of them keeps one copy.
struct TiedProfile {
  std::vector<int> layers;   ///< at least two, strictly ascending
  int64_t param_count = 0;   ///< its elements (float32: 4 bytes each)
};

/// A whole profile.json.
struct Profile {
  std::string tool_version;
  std::string created_at;  ///< UTC, ISO 8601
  ModelRef model;
  ProfileSettings settings;
  DeviceProfile device;
  std::optional<InterconnectProfile> interconnect;  ///< absent with --no-comm
  std::vector<LayerProfile> layers;
  std::vector<TiedProfile> ties;  ///< "ties", written when there are any

  /// Whether every layer has the B/W split (bwd_input_ms and bwd_weight_ms at every point).
  bool has_backward_split() const;
  /// Whether every layer has the inference forward (the inference_fwd_* fields at every point).
  bool has_inference_forward() const;

  /// Checks everything a reader relies on, for meaning as well as syntax
  /// (profile_validate.cpp): one layer record per model layer with index i at position i;
  /// points sorted by batch size matching settings.batch_sizes (strictly ascending); settings'
  /// device of device.kind; p90s at least the medians; saved parts within retained bytes; each
  /// output shape batch-first with one sample shape and output_bytes its size; parameter bytes 0
  /// exactly without parameters; the B/W split (bwd_input_ms with bwd_weight_ms) at every point
  /// of every layer or at none; the inference forward (inference_fwd_ms, inference_fwd_ms_p90 at
  /// least that median, inference_fwd_peak_bytes) likewise; the stored fits those of the points;
  /// each tie over existing layers in ascending order, of at most each layer's param_count. The
  /// readers bound every time by kMaxTimeMs and byte count by kMaxBytes (common/limits.h).
  /// Throws Error(kBadInput) "<document>: <field>: <value>: <what is expected>".
  void validate(std::string_view document) const;
};

Json to_json(const Profile& profile);
/// Parses and validates; `document` names the file in errors.
Profile profile_from_json(const Json& json, const std::string& document);
/// profile_from_json(parse_json(text, path), path) for `text`, the bytes of the profile file
/// `path`, with the same result and errors in less time and memory: the layers are parsed and
/// converted in two halves on two threads (detail::parse_profile_in_halves), else each as soon
/// as the parser has it (a 10,000-layer profile is never one JSON document in memory).
Profile parse_profile(std::string_view text, const std::string& path);

namespace detail {
/// parse_profile's quickest way (tested apart): a text shaped as pipeplan writes profiles has
/// its layers parsed and converted in two halves on two threads. nullopt wherever the result
/// could differ from profile_from_json(parse_json(text, path), path): parse_profile then reads
/// the text another way, for the same result or error.
std::optional<Profile> parse_profile_in_halves(std::string_view text, const std::string& path);
}  // namespace detail
/// Reads, checks the schema, parses and validates a profile file (parse_profile).
Profile read_profile(const std::string& path);
/// Writes atomically (temporary file + rename).
void write_profile(const std::string& path, const Profile& profile);

}  // namespace pipeplan
