// Synthetic profiles: per-layer numbers from a GPT block's FLOP and byte counts, jittered.
#include "bench/synthetic_profile.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

namespace pipeplan::bench {
namespace {

constexpr double kDeviceFlopsPerMs = 300e9;  // ~300 TFLOP/s of dense half precision
constexpr double kLaunchOverheadMs = 0.02;   // per layer, independent of the batch
constexpr double kBackwardOverForward = 2.0;
// Share of the backward's compute that is B (the input gradient); W (the parameter gradients)
// is the rest. A block's backward is two matmuls per forward matmul of the same size, dX = dY·Wᵀ
// (B) and dW = Xᵀ·dY (W), so each is half of it (zero-bubble pipeline papers take T_B ≈ T_W
// for the same reason). Each pass pays the launch overhead on its own.
constexpr double kBackwardInputShare = 0.5;
constexpr int64_t kBytesPerActivationElement = 2;  // bf16 activations
constexpr int64_t kRetainedElementsPerToken = 17;  // × hidden: a block's saved tensors
constexpr int64_t kTransientElementsPerToken = 8;  // × hidden: the MLP's wide hidden
// Tensor parallelism: the share of a block's compute that runs whole on every rank of a group
// (layer norms, residual adds, biases), the slow-down per doubling of tp of the rest (smaller
// matmuls), and the elements per token of the retained bytes that stay whole (the two layer
// norms' inputs, the residual stream).
constexpr double kReplicatedComputeShare = 0.1;
constexpr double kSplitSlowdownPerDoubling = 0.05;
constexpr int64_t kWholeRetainedElementsPerToken = 4;
constexpr int64_t kHeadDim = 64;
constexpr double kInterconnectBytesPerS = 100e9;
constexpr double kInterconnectLatencyMs = 0.02;

LayerProfile block(const SyntheticModel& model, int index, const std::vector<int64_t>& sizes,
                   std::mt19937_64& rng) {
  std::uniform_real_distribution<double> jitter(0.85, 1.15);
  const bool edge = index == 0 || index == model.num_layers - 1;  // embedding, head
  const int64_t params = edge ? 50257 * model.hidden : 12 * model.hidden * model.hidden;
  const double flops_per_sample = 2.0 * params * model.sequence * jitter(rng);
  const int64_t tokens_x_hidden = model.sequence * model.hidden;
  LayerProfile layer;
  layer.index = index;
  layer.name = edge ? (index == 0 ? "embedding" : "head") : "block" + std::to_string(index);
  layer.kind = edge ? "edge" : "block";
  layer.param_count = params;
  layer.param_bytes = params * 4;
  layer.output_dtype = "bfloat16";
  layer.optimizer_step_ms = {{"sgd", params * 1.2e-8}, {"adamw", params * 2.0e-8}};
  for (int64_t b : sizes) {
    LayerPoint p;
    p.batch_size = b;
    p.fwd_ms = kLaunchOverheadMs + flops_per_sample * b / kDeviceFlopsPerMs;
    p.bwd_ms = kLaunchOverheadMs + kBackwardOverForward * (p.fwd_ms - kLaunchOverheadMs);
    p.fwd_ms_p90 = p.fwd_ms * 1.05;
    p.bwd_ms_p90 = p.bwd_ms * 1.05;
    // The embedding's input is the tokens: no input gradient, its whole backward is W.
    const double bwd_compute_ms = p.bwd_ms - kLaunchOverheadMs;
    p.bwd_input_ms = index == 0 ? 0.0 : kLaunchOverheadMs + kBackwardInputShare * bwd_compute_ms;
    p.bwd_weight_ms =
        index == 0 ? p.bwd_ms : kLaunchOverheadMs + (1 - kBackwardInputShare) * bwd_compute_ms;
    p.output_shape = {b, model.sequence, model.hidden};
    p.output_bytes = b * tokens_x_hidden * kBytesPerActivationElement;
    p.saved_input_bytes = p.output_bytes;
    p.saved_output_bytes = edge ? 0 : p.output_bytes / 2;
    p.retained_bytes = b * tokens_x_hidden * kRetainedElementsPerToken * kBytesPerActivationElement;
    p.fwd_transient_bytes = b * tokens_x_hidden * kTransientElementsPerToken;
    p.bwd_transient_bytes = 2 * p.fwd_transient_bytes;
    layer.points.push_back(p);
  }
  layer.fits = fit_points(layer.points);
  return layer;
}

// `whole`'s shard at `tp` (synthetic_profile's header says how it scales).
LayerProfile shard(const LayerProfile& whole, int tp) {
  LayerProfile part = whole;
  part.tp = tp;
  part.tp_shards.clear();
  const double split_share = 1.0 / tp * (1 + kSplitSlowdownPerDoubling * std::log2(tp));
  const double compute_share =
      kReplicatedComputeShare + (1 - kReplicatedComputeShare) * split_share;
  part.param_count = whole.param_count / tp;
  part.param_bytes = part.param_count * 4;
  for (auto& [optimizer, ms] : part.optimizer_step_ms) ms /= tp;
  const auto scaled = [&](double ms) {
    return kLaunchOverheadMs + (ms - kLaunchOverheadMs) * compute_share;
  };
  for (LayerPoint& p : part.points) {
    p.fwd_ms = scaled(p.fwd_ms);
    p.bwd_ms = scaled(p.bwd_ms);
    p.fwd_ms_p90 = p.fwd_ms * 1.05;
    p.bwd_ms_p90 = p.bwd_ms * 1.05;
    p.bwd_input_ms = scaled(*p.bwd_input_ms);
    p.bwd_weight_ms = scaled(*p.bwd_weight_ms);
    const int64_t tokens_x_hidden = p.output_bytes / kBytesPerActivationElement;
    const int64_t whole_bytes =
        tokens_x_hidden * kWholeRetainedElementsPerToken * kBytesPerActivationElement;
    p.retained_bytes = whole_bytes + (p.retained_bytes - whole_bytes) / tp;
    p.saved_output_bytes = std::min(p.saved_output_bytes, p.retained_bytes - p.saved_input_bytes);
    p.fwd_transient_bytes /= tp;
    p.bwd_transient_bytes /= tp;
  }
  part.fits = fit_points(part.points);
  return part;
}

}  // namespace

Profile synthetic_profile(const SyntheticModel& model) {
  Profile profile;
  profile.tool_version = "0.1.0";
  profile.created_at = "2026-11-22T00:00:00Z";
  profile.model.name = "synthetic_gpt";
  profile.model.hash = "fnv1a64:5e5e5e5e5e5e5e5e";
  profile.model.num_layers = model.num_layers;
  profile.model.input_shape = {model.sequence};
  profile.model.input_dtype = "int64";
  for (int idx = 0; idx < model.num_batch_sizes; ++idx)
    profile.settings.batch_sizes.push_back(int64_t{1} << idx);
  profile.settings.device = "cuda";
  profile.settings.precision = "amp-bf16";
  profile.settings.repeats = 10;
  profile.device = {"cuda", "synthetic H100", 32, 1, int64_t{80} << 30, int64_t{1} << 30};
  CommProfile link;
  link.latency_ms = kInterconnectLatencyMs;
  link.bandwidth_bytes_per_s = kInterconnectBytesPerS;
  profile.interconnect = InterconnectProfile{"nccl", 2, link, link};
  std::mt19937_64 rng(model.seed);
  profile.settings.tp_sizes = model.tp_sizes;
  for (int idx = 0; idx < model.num_layers; ++idx) {
    LayerProfile layer = block(model, idx, profile.settings.batch_sizes, rng);
    if (layer.kind == "block" && !model.tp_sizes.empty()) {
      layer.tp_divides = {{"heads", model.hidden / kHeadDim}, {"mlp_dim", 4 * model.hidden}};
      for (int tp : model.tp_sizes) layer.tp_shards.push_back(shard(layer, tp));
    }
    profile.layers.push_back(std::move(layer));
  }
  profile.validate("synthetic profile");
  return profile;
}

}  // namespace pipeplan::bench
