// Hand-built profiles for the planner tests: no LibTorch, no model, numbers chosen by hand
// (or by a seeded generator) so that every expected value can be worked out on paper.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "planner/search.h"
#include "plans/profile.h"

namespace pipeplan::testing {

/// One layer, per sample: every measured quantity is `value · b` at micro-batch size b, so
/// interpolation and the linear fits are exact.
struct LayerSpec {
  double fwd_ms = 1;
  double bwd_ms = 2;
  int64_t param_count = 0;
  int64_t buffer_bytes = 0;
  int64_t output_floats = 1;  ///< per sample, float32
  int64_t retained_bytes = 0;
  int64_t saved_input_bytes = 0;
  int64_t saved_output_bytes = 0;
  int64_t fwd_transient_bytes = 0;
  int64_t bwd_transient_bytes = 0;
  double sgd_step_ms = 0;
  double adamw_step_ms = 0;
};

/// A valid profile of `layers` at `batch_sizes`, model input `input_floats` float32 per
/// sample, runtime overhead `runtime_overhead_bytes`; with a p2p interconnect of
/// `p2p_latency_ms` and `p2p_bandwidth_bytes_per_s` when the bandwidth is > 0.
Profile make_profile(const std::vector<LayerSpec>& layers,
                     const std::vector<int64_t>& batch_sizes = {1, 2, 4}, int64_t input_floats = 5,
                     int64_t runtime_overhead_bytes = 0, double p2p_latency_ms = 0,
                     double p2p_bandwidth_bytes_per_s = 0);

/// `profile` with zb-h1's B/W split at every point: B = input_share · bwd_ms, W =
/// weight_share · bwd_ms (layer 0, whose input is the data, has B = 0 and W = (input_share +
/// weight_share) · bwd_ms); fits refitted, validated.
Profile with_backward_split(Profile profile, double input_share, double weight_share);

/// `profile` with the inference forward at every point: layer i's inference_fwd_ms =
/// fwd_ms_per_sample[i] · b (p90 1.25 times that) and inference_fwd_peak_bytes =
/// peak_bytes_per_sample[i] · b; fits refitted, validated.
Profile with_inference_forward(Profile profile, const std::vector<double>& fwd_ms_per_sample,
                               const std::vector<int64_t>& peak_bytes_per_sample);

/// The 3-layer profile of the memory model tests (memory_model_test.cpp works it out).
Profile three_layer_profile();

/// `count` layers with random times, parameters, activations and boundary sizes.
std::vector<LayerSpec> random_layers(std::mt19937_64& rng, int count);

/// `count` identical layers.
std::vector<LayerSpec> equal_layers(int count, double fwd_ms, double bwd_ms);

/// Eight random layers (seeded by `seed`) at micro-batch sizes 1, 2 and 4, a 32-float input,
/// 1000 bytes of runtime overhead and a p2p link of 0.02 ms and 5 MB/s: the search tests' model.
Profile eight_layer_profile(uint64_t seed);

/// The largest pipeline a plan may hold (kMaxPipelineMicroBatches micro-batches times stages):
/// `pp` random layers (seed 7) whose p90 times are 1.05 times their medians, so that the draws
/// run, and the search options that fix dp × pp, micro-batch size 1, 1F1B, no checkpointing and
/// no ZeRO. SearchTest checks its plan; bench/planner_bench times it.
struct LargestPipeline {
  Profile profile;
  SearchOptions options;
  int64_t global_batch = 0;
};
LargestPipeline largest_pipeline(int pp, int dp);

}  // namespace pipeplan::testing
