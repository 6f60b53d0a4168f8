// Hand-built profiles for the planner tests.
#include "tests/planner/test_profiles.h"

#include <string>

#include "common/limits.h"

namespace pipeplan::testing {
namespace {

LayerPoint point_at(const LayerSpec& spec, int64_t b) {
  LayerPoint point;
  point.batch_size = b;
  point.fwd_ms = spec.fwd_ms * b;
  point.fwd_ms_p90 = point.fwd_ms;
  point.bwd_ms = spec.bwd_ms * b;
  point.bwd_ms_p90 = point.bwd_ms;
  point.output_shape = {b, spec.output_floats};
  point.output_bytes = spec.output_floats * 4 * b;
  point.retained_bytes = spec.retained_bytes * b;
  point.saved_input_bytes = spec.saved_input_bytes * b;
  point.saved_output_bytes = spec.saved_output_bytes * b;
  point.fwd_transient_bytes = spec.fwd_transient_bytes * b;
  point.bwd_transient_bytes = spec.bwd_transient_bytes * b;
  return point;
}

}  // namespace

Profile make_profile(const std::vector<LayerSpec>& layers, const std::vector<int64_t>& batch_sizes,
                     int64_t input_floats, int64_t runtime_overhead_bytes, double p2p_latency_ms,
                     double p2p_bandwidth_bytes_per_s) {
  Profile profile;
  profile.tool_version = "0.1.0";
  profile.created_at = "2026-11-22T00:00:00Z";
  profile.model.name = "hand_built";
  profile.model.hash = "fnv1a64:0000000000000001";
  profile.model.num_layers = static_cast<int>(layers.size());
  profile.model.input_shape = {input_floats};
  profile.settings.batch_sizes = batch_sizes;
  profile.settings.repeats = 1;
  profile.device = {"cpu", "test cpu", 2, 1, int64_t{24} << 30, runtime_overhead_bytes};
  if (p2p_bandwidth_bytes_per_s > 0) {
    CommProfile p2p;
    p2p.latency_ms = p2p_latency_ms;
    p2p.bandwidth_bytes_per_s = p2p_bandwidth_bytes_per_s;
    profile.interconnect = InterconnectProfile{"gloo", 2, p2p, p2p};
  }
  for (size_t idx = 0; idx < layers.size(); ++idx) {
    const LayerSpec& spec = layers[idx];
    LayerProfile layer;
    layer.index = static_cast<int>(idx);
    layer.name = "layer" + std::to_string(idx);
    layer.kind = "test";
    layer.param_count = spec.param_count;
    layer.param_bytes = spec.param_count * 4;
    layer.buffer_bytes = spec.buffer_bytes;
    layer.optimizer_step_ms = {{"sgd", spec.sgd_step_ms}, {"adamw", spec.adamw_step_ms}};
    for (int64_t b : batch_sizes) layer.points.push_back(point_at(spec, b));
    layer.fits = fit_points(layer.points);
    profile.layers.push_back(layer);
  }
  profile.validate("test profile");
  return profile;
}

Profile with_backward_split(Profile profile, double input_share, double weight_share) {
  for (LayerProfile& layer : profile.layers) {
    for (LayerPoint& point : layer.points) {
      const bool first = layer.index == 0;
      point.bwd_input_ms = first ? 0 : input_share * point.bwd_ms;
      point.bwd_weight_ms = (first ? input_share + weight_share : weight_share) * point.bwd_ms;
    }
    layer.fits = fit_points(layer.points);
  }
  profile.validate("test profile");
  return profile;
}

Profile with_inference_forward(Profile profile, const std::vector<double>& fwd_ms_per_sample,
                               const std::vector<int64_t>& peak_bytes_per_sample) {
  for (LayerProfile& layer : profile.layers) {
    for (LayerPoint& point : layer.points) {
      point.inference_fwd_ms = fwd_ms_per_sample.at(layer.index) * point.batch_size;
      point.inference_fwd_ms_p90 = *point.inference_fwd_ms * 1.25;
      point.inference_fwd_peak_bytes = peak_bytes_per_sample.at(layer.index) * point.batch_size;
    }
    layer.fits = fit_points(layer.points);
  }
  profile.validate("test profile");
  return profile;
}

Profile three_layer_profile() {
  std::vector<LayerSpec> layers(3);
  //        fwd  bwd  params buf  out  retained in  out  fwd_tr bwd_tr sgd   adamw
  layers[0] = {1.0, 2.0, 1000, 16, 10, 100, 0, 40, 30, 50, 0.5, 0.7};
  layers[1] = {2.0, 3.0, 2000, 0, 6, 200, 40, 24, 70, 20, 1.0, 1.5};
  layers[2] = {0.5, 1.0, 500, 4, 2, 80, 24, 0, 10, 90, 0.25, 0.3};
  return make_profile(layers, {1, 2, 4}, /*input_floats=*/5, /*runtime_overhead_bytes=*/1000);
}

std::vector<LayerSpec> random_layers(std::mt19937_64& rng, int count) {
  std::uniform_real_distribution<double> time(0.1, 5.0);
  std::uniform_int_distribution<int64_t> params(0, 5000);
  std::uniform_int_distribution<int64_t> floats(1, 400);
  std::uniform_int_distribution<int64_t> bytes(0, 3000);
  std::vector<LayerSpec> layers(count);
  for (LayerSpec& layer : layers) {
    layer.fwd_ms = time(rng);
    layer.bwd_ms = time(rng);
    layer.param_count = params(rng);
    layer.buffer_bytes = bytes(rng) / 10;
    layer.output_floats = floats(rng);
    layer.saved_input_bytes = bytes(rng);
    layer.saved_output_bytes = bytes(rng);
    layer.retained_bytes = layer.saved_input_bytes + layer.saved_output_bytes + bytes(rng);
    layer.fwd_transient_bytes = bytes(rng);
    layer.bwd_transient_bytes = bytes(rng);
    layer.sgd_step_ms = time(rng) / 10;
    layer.adamw_step_ms = time(rng) / 8;
  }
  return layers;
}

std::vector<LayerSpec> equal_layers(int count, double fwd_ms, double bwd_ms) {
  LayerSpec spec;
  spec.fwd_ms = fwd_ms;
  spec.bwd_ms = bwd_ms;
  spec.param_count = 100;
  spec.output_floats = 8;
  spec.retained_bytes = 64;
  return std::vector<LayerSpec>(count, spec);
}

Profile eight_layer_profile(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return make_profile(random_layers(rng, 8), {1, 2, 4}, 32, 1000, 0.02, 5e6);
}

LargestPipeline largest_pipeline(int pp, int dp) {
  std::mt19937_64 rng(7);
  LargestPipeline pipeline;
  pipeline.profile = make_profile(random_layers(rng, pp), {1, 2, 4}, 32, 1000, 0.02, 5e6);
  for (LayerProfile& layer : pipeline.profile.layers)
    for (LayerPoint& point : layer.points) {
      point.fwd_ms_p90 = point.fwd_ms * 1.05;
      point.bwd_ms_p90 = point.bwd_ms * 1.05;
    }
  pipeline.global_batch = int64_t{dp} * kMaxPipelineMicroBatches / pp;
  pipeline.options.pp = pp;
  pipeline.options.dp = dp;
  pipeline.options.micro_batch_size = 1;
  pipeline.options.schedules = {Schedule::kOneFOneB};
  pipeline.options.policies = {CheckpointPolicy::kNone};
  pipeline.options.zero = {0};
  return pipeline;
}

}  // namespace pipeplan::testing
