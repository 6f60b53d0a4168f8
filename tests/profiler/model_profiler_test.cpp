// Tests for profiler/model_profiler.h: whole-model profiles agree with the model (parameters,
// shapes), per-layer forward and backward times add up to the whole sequence's, layers are split
// into chains by parameter bytes, options are checked.
#include "profiler/model_profiler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/stats.h"
#include "models/zoo.h"
#include "profiler/layer_profiler.h"

namespace pipeplan::profiler {
namespace {

// Every zoo model these tests run on; a model joins by adding its name here.
const std::vector<std::string> kModels = {"mlp_tiny", "resnet_tiny", "gpt_tiny"};
constexpr int64_t kFloatBytes = 4;

std::string error_of(const ProfileOptions& options) {
  try {
    options.validate();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  return "";
}

ProfileOptions quick_options(std::vector<int64_t> batch_sizes) {
  ProfileOptions options;
  options.batch_sizes = std::move(batch_sizes);
  options.warmup = 0;
  options.repeats = 1;
  return options;
}

TEST(ModelProfilerTest, LayersAgreeWithTheModel) {
  for (const std::string& name : kModels) {
    const models::Model model = models::make_model(name);
    const Profile profile = profile_model(model, quick_options({4, 1, 4}));
    EXPECT_EQ(profile.settings.batch_sizes, (std::vector<int64_t>{1, 4})) << name;
    ASSERT_EQ(profile.layers.size(), model.layers.size()) << name;
    int64_t param_bytes = 0;
    for (size_t layer_idx = 0; layer_idx < model.layers.size(); ++layer_idx) {
      const LayerProfile& layer = profile.layers[layer_idx];
      EXPECT_EQ(layer.name, model.layers[layer_idx].name);
      EXPECT_EQ(layer.param_count, model.layers[layer_idx].param_count) << layer.name;
      param_bytes += layer.param_bytes;
      for (const LayerPoint& point : layer.points) {
        EXPECT_EQ(point.output_shape[0], point.batch_size) << layer.name;
        EXPECT_GT(point.fwd_ms, 0.0) << layer.name;
      }
      EXPECT_EQ(layer.optimizer_step_ms.count("sgd"), 1u);
      EXPECT_EQ(layer.optimizer_step_ms.count("adamw"), 1u);
      if (layer.param_count == 0) {
        EXPECT_EQ(layer.optimizer_step_ms.at("sgd"), 0.0) << layer.name;
      }
    }
    // One chain (small models): one flat step, shared by parameter count.
    const LayerProfile& first =
        *std::find_if(profile.layers.begin(), profile.layers.end(),
                      [](const LayerProfile& layer) { return layer.param_count > 0; });
    for (const LayerProfile& layer : profile.layers)
      EXPECT_NEAR(layer.optimizer_step_ms.at("sgd") / first.optimizer_step_ms.at("sgd"),
                  static_cast<double>(layer.param_count) / static_cast<double>(first.param_count),
                  1e-9)
          << name << " " << layer.name;
    EXPECT_EQ(param_bytes, models::parameter_count(model) * kFloatBytes) << name;
    EXPECT_EQ(profile.model.hash, model.hash);
    EXPECT_EQ(profile.device.kind, "cpu");
    EXPECT_GE(profile.device.threads, 1);
  }
}

// Every layer of every zoo model gets the B/W split: B 0 for layer 0 (its input is the data, or
// tokens), B positive for every later layer, W positive exactly for layers with parameters; the
// fits carry it, and so does the file.
// The tp sizes a profile measures (and `profile` times group all-reduces at): ascending, each
// once, those dividing every split layer's heads and MLP width; none for a model without
// layers that split.
TEST(ModelProfilerTest, UsableTensorParallelSizesAreSortedDividingAndNoneWithoutSplits) {
  const models::Model gpt = models::make_model("gpt_tiny");  // 4 heads
  EXPECT_EQ(usable_tp_sizes(gpt, {8, 4, 2, 4, 3}), (std::vector<int>{2, 4}));
  EXPECT_TRUE(usable_tp_sizes(models::make_model("mlp_tiny"), {2, 4, 8}).empty());
}

TEST(ModelProfilerTest, EveryLayerHasTheBackwardSplit) {
  for (const std::string& name : kModels) {
    const models::Model model = models::make_model(name);
    const Profile profile = profile_model(model, quick_options({1, 2}));
    EXPECT_TRUE(profile.has_backward_split()) << name;
    for (const LayerProfile& layer : profile.layers) {
      ASSERT_TRUE(layer.fits.bwd_input_ms && layer.fits.bwd_weight_ms) << name << " " << layer.name;
      for (const LayerPoint& point : layer.points) {
        const std::string where =
            name + " " + layer.name + " b=" + std::to_string(point.batch_size);
        ASSERT_TRUE(point.bwd_input_ms && point.bwd_weight_ms) << where;
        if (layer.index == 0) {
          EXPECT_EQ(*point.bwd_input_ms, 0.0) << where;
        } else {
          EXPECT_GT(*point.bwd_input_ms, 0.0) << where;
        }
        EXPECT_EQ(*point.bwd_weight_ms > 0.0, layer.param_count > 0) << where;
      }
    }
    const Profile back = profile_from_json(to_json(profile), "profile.json");
    EXPECT_TRUE(back.has_backward_split()) << name;
  }
}

// Every layer of every zoo model gets the inference forward, in the fits and the file too: a
// positive time, a p90 at least the median, and a peak (each layer allocates its output).
TEST(ModelProfilerTest, EveryLayerHasTheInferenceForward) {
  for (const std::string& name : kModels) {
    const Profile profile = profile_model(models::make_model(name), quick_options({1, 2}));
    EXPECT_TRUE(profile.has_inference_forward()) << name;
    for (const LayerProfile& layer : profile.layers) {
      ASSERT_TRUE(layer.fits.inference_fwd_ms && layer.fits.inference_fwd_peak_bytes)
          << name << " " << layer.name;
      for (const LayerPoint& point : layer.points) {
        const std::string where =
            name + " " + layer.name + " b=" + std::to_string(point.batch_size);
        EXPECT_GT(*point.inference_fwd_ms, 0.0) << where;
        EXPECT_GE(*point.inference_fwd_ms_p90, *point.inference_fwd_ms) << where;
        EXPECT_GT(*point.inference_fwd_peak_bytes, 0) << where;
      }
    }
    EXPECT_TRUE(profile_from_json(to_json(profile), "profile.json").has_inference_forward())
        << name;
  }
}

// Per model, B + W of the layers after the first, summed, against their whole backwards summed:
// within 0.5x..3x (B and W each skip the other's gradients, but W recomputes the gradients inside
// a layer on the way to its first parameters). resnet_tiny at b=16, whose layers take
// milliseconds, so that timing noise does not decide; a miss is measured again before the test
// fails, as a busy host can slow one measurement.
TEST(ModelProfilerTest, BackwardSplitAddsUpToAboutTheWholeBackward) {
  constexpr double kMinRatio = 0.5;
  constexpr double kMaxRatio = 3.0;
  constexpr int kMeasurements = 3;
  const models::Model model = models::make_model("resnet_tiny");
  ProfileOptions options = quick_options({16});
  options.warmup = 1;
  options.repeats = 5;
  double ratio = 0;
  for (int measurement = 0; measurement < kMeasurements; ++measurement) {
    const Profile profile = profile_model(model, options);
    double split_ms = 0;
    double bwd_ms = 0;
    for (size_t layer_idx = 1; layer_idx < profile.layers.size(); ++layer_idx) {
      const LayerPoint& point = profile.layers[layer_idx].points[0];
      split_ms += *point.bwd_input_ms + *point.bwd_weight_ms;
      bwd_ms += point.bwd_ms;
    }
    ASSERT_GT(bwd_ms, 0.0);
    ratio = split_ms / bwd_ms;
    RecordProperty("split_over_bwd_" + std::to_string(measurement), std::to_string(ratio));
    if (ratio >= kMinRatio && ratio <= kMaxRatio) break;
  }
  EXPECT_GE(ratio, kMinRatio) << "sum of B + W over sum of bwd";
  EXPECT_LE(ratio, kMaxRatio) << "sum of B + W over sum of bwd";
}

TEST(ModelProfilerTest, MlpLayersRetainTheirInputAndReluOutput) {
  const models::Model model = models::make_model("mlp_tiny");
  const Profile profile = profile_model(model, quick_options({2}));
  const int64_t batch_size = 2;
  const int64_t input_bytes = batch_size * 28 * 28 * kFloatBytes;
  const int64_t hidden_bytes = batch_size * model.config["hidden"].get<int64_t>() * kFloatBytes;
  // Layer 0 (Linear+ReLU on the flattened data) saves its input (a view of the data copy) and
  // its ReLU output; hidden layers save their input and output, which the next layer saves
  // again (the same storage, counted by both: the planner subtracts the overlap).
  const LayerPoint& first = profile.layers[0].points[0];
  EXPECT_EQ(first.saved_input_bytes, input_bytes);
  EXPECT_EQ(first.saved_output_bytes, hidden_bytes);
  EXPECT_EQ(first.retained_bytes, input_bytes + hidden_bytes);
  const LayerPoint& hidden = profile.layers[1].points[0];
  EXPECT_EQ(hidden.retained_bytes, 2 * hidden_bytes);
  // The head's forward includes the loss, which saves the log-softmax of the logits.
  const LayerPoint& head = profile.layers.back().points[0];
  EXPECT_EQ(head.saved_input_bytes, hidden_bytes);
  EXPECT_GE(head.retained_bytes, hidden_bytes + head.output_bytes);
}

TEST(ModelProfilerTest, ChainsFollowTheParameterBudget) {
  const models::Model model = models::make_model("resnet_tiny");
  const int num_layers = static_cast<int>(model.layers.size());
  const auto training_bytes = [&](int layer_idx) {
    return kTrainingBytesPerParamByte * kFloatBytes * model.layers[layer_idx].param_count;
  };
  EXPECT_EQ(split_into_chains(model, kDefaultChainBudgetBytes).size(), 1u);
  // A budget of the largest layer: every chain fits it, and no two neighbours could merge.
  int64_t largest_bytes = 0;
  for (int layer_idx = 0; layer_idx < num_layers; ++layer_idx)
    largest_bytes = std::max(largest_bytes, training_bytes(layer_idx));
  const std::vector<LayerChain> chains = split_into_chains(model, largest_bytes);
  ASSERT_GT(chains.size(), 1u);
  int next_layer = 0;
  for (size_t chain_idx = 0; chain_idx < chains.size(); ++chain_idx) {
    const LayerChain& chain = chains[chain_idx];
    EXPECT_EQ(chain.first, next_layer);
    EXPECT_LT(chain.first, chain.last);
    int64_t chain_bytes = 0;
    for (int layer_idx = chain.first; layer_idx < chain.last; ++layer_idx)
      chain_bytes += training_bytes(layer_idx);
    EXPECT_LE(chain_bytes, largest_bytes);
    if (chain_idx + 1 < chains.size()) {
      EXPECT_GT(chain_bytes + training_bytes(chain.last), largest_bytes);
    }
    next_layer = chain.last;
  }
  EXPECT_EQ(next_layer, num_layers);
  // Below every layer's size, each layer is a chain of its own.
  EXPECT_EQ(split_into_chains(model, /*budget_bytes=*/1).size(), model.layers.size());
}

TEST(ModelProfilerTest, ChainsOfOneLayerGiveTheSameShapesAndMemory) {
  const models::Model model = models::make_model("gpt_tiny");
  ProfileOptions options = quick_options({2});
  const Profile together = profile_model(model, options);
  options.chain_budget_bytes = 1;  // every layer alone: backwards start from random gradients
  const Profile alone = profile_model(model, options);
  ASSERT_EQ(together.layers.size(), alone.layers.size());
  for (size_t layer_idx = 0; layer_idx < alone.layers.size(); ++layer_idx) {
    const LayerPoint& expected = together.layers[layer_idx].points[0];
    const LayerPoint& point = alone.layers[layer_idx].points[0];
    const std::string& name = alone.layers[layer_idx].name;
    EXPECT_EQ(point.output_shape, expected.output_shape) << name;
    EXPECT_EQ(point.retained_bytes, expected.retained_bytes) << name;
    EXPECT_EQ(point.bwd_transient_bytes, expected.bwd_transient_bytes) << name;
    EXPECT_GT(point.fwd_ms, 0.0) << name;
    EXPECT_EQ(point.bwd_ms > 0.0, expected.bwd_ms > 0.0) << name;
  }
}

TEST(ModelProfilerTest, CoLocatedProfileMeetsAtTheBarrierBeforeEachChainAndSize) {
  const models::Model model = models::make_model("mlp_tiny");
  ProfileOptions options = quick_options({1, 2});
  options.co_located = 2;
  options.chain_budget_bytes = 1;  // one chain per layer
  int barrier_calls = 0;
  const Profile profile = profile_model(model, options, {}, [&] { ++barrier_calls; });
  EXPECT_EQ(profile.settings.co_located, 2);
  // Per chain: one per batch size, one before the optimizer steps.
  EXPECT_EQ(barrier_calls, static_cast<int>(model.layers.size()) * (2 + 1));
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Median forward and backward ms of the whole layer sequence.
struct WholeTimes {
  double fwd_ms = 0;
  double bwd_ms = 0;
};

// Times the whole layer sequence at `batch_size` in a training loop: forward with the loss
// (building the graph), then one backward through every layer into allocated parameter
// gradients, which are zeroed between iterations, as the profile's passes run.
WholeTimes whole_times(const models::Model& model, int64_t batch_size,
                       const ProfileOptions& options) {
  const auto layers =
      models::build_layers(model, 0, static_cast<int>(model.layers.size()), options.seed);
  const auto [input, target] = models::random_batch(model, batch_size, options.seed);
  std::vector<double> fwd_samples;
  std::vector<double> bwd_samples;
  for (int iteration = 0; iteration < options.warmup + options.repeats; ++iteration) {
    auto start = std::chrono::steady_clock::now();
    torch::Tensor loss = models::compute_loss(model, models::forward_layers(layers, input), target);
    const double fwd_ms = ms_since(start);
    start = std::chrono::steady_clock::now();
    loss.backward();
    const double bwd_ms = ms_since(start);
    for (const models::LayerPtr& layer : layers)
      for (const torch::Tensor& param : layer->parameters()) param.grad().zero_();
    if (iteration < options.warmup) continue;
    fwd_samples.push_back(fwd_ms);
    bwd_samples.push_back(bwd_ms);
  }
  return {quantile(fwd_samples, 0.5), quantile(bwd_samples, 0.5)};
}

// Each layer's backward is timed as its own autograd engine call, which the whole sequence
// enters once: a few microseconds per call on a CPU, a visible share of a tiny layer's backward
// and nothing for layers of milliseconds. The backward check allows this much per layer on top
// of its relative tolerance.
constexpr double kEngineCallMs = 0.005;

// CPU time the calling thread has used, in milliseconds.
double thread_cpu_ms() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// (sum of the profile's per-layer medians) / (whole sequence) in one round.
struct SumRatios {
  double fwd = 0;
  double bwd = 0;
  double bwd_less_engine_calls = 0;  ///< with kEngineCallMs per layer taken off the sum
};

// The jiffies the hypervisor took from this machine's CPUs ("steal") and all jiffies since
// boot, from /proc/stat's first line; {0, 0} where there is no such file.
std::pair<int64_t, int64_t> steal_and_all_jiffies() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  stat >> cpu;
  int64_t value = 0, steal = 0, all = 0;
  for (int field = 0; field < 8 && stat >> value; ++field) {
    all += value;
    if (field == 7) steal = value;
  }
  return {steal, all};
}

// One round: a short profile at `batch_size`, then the whole sequence right after it, so that
// both see the same neighbours. nullopt when this thread had the CPU for less than 90% of the
// round: with more runnable threads than cores, the whole sequence's median includes waits that
// the short per-layer windows mostly miss, and the round says nothing about the profile. Also
// nullopt when a hypervisor took more than 3% of the machine's CPU time meanwhile: it does so
// in bursts (bench/history/2026-11-22-session-4.md), which the thread's own CPU time does not
// show, and which slow the whole sequence and the short windows unequally.
std::optional<SumRatios> round_ratios(const models::Model& model, int64_t batch_size) {
  constexpr double kMinCpuShare = 0.9;
  constexpr double kMaxStealShare = 0.03;
  const auto [steal_start, all_start] = steal_and_all_jiffies();
  ProfileOptions options;
  options.batch_sizes = {batch_size};
  options.warmup = 2;
  options.repeats = 7;
  options.threads = 1;  // all work on this thread, so that its CPU time is the round's
  const double cpu_start_ms = thread_cpu_ms();
  const auto wall_start = std::chrono::steady_clock::now();
  const Profile profile = profile_model(model, options);
  const WholeTimes whole = whole_times(model, batch_size, options);
  if (thread_cpu_ms() - cpu_start_ms < kMinCpuShare * ms_since(wall_start)) return std::nullopt;
  const auto [steal_end, all_end] = steal_and_all_jiffies();
  if (all_end > all_start && static_cast<double>(steal_end - steal_start) >
                                 kMaxStealShare * static_cast<double>(all_end - all_start))
    return std::nullopt;
  double fwd_sum_ms = 0;
  double bwd_sum_ms = 0;
  for (const LayerProfile& layer : profile.layers) {
    fwd_sum_ms += layer.points[0].fwd_ms;
    bwd_sum_ms += layer.points[0].bwd_ms;
  }
  const double engine_calls_ms = kEngineCallMs * static_cast<double>(profile.layers.size());
  return SumRatios{fwd_sum_ms / whole.fwd_ms, bwd_sum_ms / whole.bwd_ms,
                   (bwd_sum_ms - engine_calls_ms) / whole.bwd_ms};
}

// Medians over kRounds undisturbed rounds, or nullopt when too few rounds had the CPU. Besides
// time-slicing, a busy neighbour on the other hyperthread halves the speed for seconds at a
// time; the median is what counts, so that one such round cannot fail the test.
std::optional<SumRatios> median_ratios(const models::Model& model, int64_t batch_size) {
  constexpr int kRounds = 7;
  constexpr int kMaxAttempts = 12;
  constexpr int kMinRounds = 4;
  std::vector<double> fwd;
  std::vector<double> bwd;
  std::vector<double> bwd_less_engine_calls;
  for (int attempt = 0; attempt < kMaxAttempts && static_cast<int>(fwd.size()) < kRounds;
       ++attempt) {
    const std::optional<SumRatios> round = round_ratios(model, batch_size);
    if (!round) continue;
    fwd.push_back(round->fwd);
    bwd.push_back(round->bwd);
    bwd_less_engine_calls.push_back(round->bwd_less_engine_calls);
  }
  if (static_cast<int>(fwd.size()) < kMinRounds) return std::nullopt;
  return SumRatios{quantile(fwd, 0.5), quantile(bwd, 0.5), quantile(bwd_less_engine_calls, 0.5)};
}

// Whether `ratios` are within `tolerance` as the test below requires.
bool sums_match(const SumRatios& ratios, double tolerance) {
  return std::abs(ratios.fwd - 1.0) <= tolerance && ratios.bwd >= 1.0 - tolerance &&
         ratios.bwd_less_engine_calls <= 1.0 + tolerance;
}

// The profile's per-layer times, summed, predict the whole sequence's forward and backward in
// training within 15% (the backward with kEngineCallMs per layer of slack above), at b=32. Not
// at b=4: there resnet_tiny's whole forward takes about a millisecond, and on a busy host the
// whole sequence can take far longer than the sum while this thread keeps its CPU (likely the
// whole sequence, streaming through every layer's weights, suffers more from neighbours
// contending for the cache than each layer's chained passes do): a check CI cannot rely on.
// A miss is measured again before the test fails: a host condition can last a whole
// measurement; a real error lasts two.
TEST(ModelProfilerTest, SerialSumsOfLayerTimesMatchWholeForwardAndBackward) {
  constexpr double kTolerance = 0.15;
  constexpr int kMeasurements = 2;
  for (const std::string& name : kModels) {
    const models::Model model = models::make_model(name);
    for (int64_t batch_size : {32}) {
      const std::string point = name + " b=" + std::to_string(batch_size);
      std::optional<SumRatios> ratios;
      for (int measurement = 0; measurement < kMeasurements; ++measurement) {
        ratios = median_ratios(model, batch_size);
        if (!ratios || sums_match(*ratios, kTolerance) || measurement + 1 == kMeasurements) break;
        std::printf("%s: fwd %.3f, bwd %.3f, bwd less engine calls %.3f; measuring again\n",
                    point.c_str(), ratios->fwd, ratios->bwd, ratios->bwd_less_engine_calls);
      }
      if (!ratios)
        GTEST_SKIP() << point << ": this thread rarely had a CPU to itself (machine "
                     << "oversubscribed or its hypervisor taking CPU time), so no timing can be "
                     << "trusted";
      RecordProperty(name + "_b" + std::to_string(batch_size) + "_fwd_ratio",
                     std::to_string(ratios->fwd));
      RecordProperty(name + "_b" + std::to_string(batch_size) + "_bwd_ratio",
                     std::to_string(ratios->bwd));
      EXPECT_NEAR(ratios->fwd, 1.0, kTolerance) << point << ": sum of layers / whole forward";
      EXPECT_GE(ratios->bwd, 1.0 - kTolerance) << point << ": sum of layers / whole backward";
      EXPECT_LE(ratios->bwd_less_engine_calls, 1.0 + kTolerance)
          << point << ": sum of layers less engine calls / whole backward";
    }
  }
}

TEST(ModelProfilerTest, OptionsAreCheckedWithTheFlagNamed) {
  ProfileOptions options;
  EXPECT_EQ(error_of(options), "");
  options.device = "tpu";
  EXPECT_EQ(error_of(options), "--device: 'tpu' is not cpu, cuda or cuda:N");
  options = ProfileOptions();
  options.batch_sizes = {};
  EXPECT_EQ(error_of(options), "--batch-sizes: empty (give sizes such as 1,2,4,8)");
  options.batch_sizes = {2, 0};
  EXPECT_EQ(error_of(options),
            "--batch-sizes: 0 is out of range; expected sizes from 1 to 16777216");
  options = ProfileOptions();
  options.warmup = -1;
  EXPECT_EQ(error_of(options), "--warmup: -1 is negative (use 0 or more)");
  options = ProfileOptions();
  options.repeats = 0;
  EXPECT_EQ(error_of(options), "--repeats: 0 is below 1");
  options = ProfileOptions();
  options.threads = 0;
  EXPECT_EQ(error_of(options), "--threads: 0 is below 1");
  options = ProfileOptions();
  options.co_located = 0;
  EXPECT_EQ(error_of(options), "--co-located: 0 is below 1");
  options = ProfileOptions();
  options.precision = "fp8";
  EXPECT_EQ(error_of(options), "--precision: 'fp8': expected one of fp32, amp-bf16, amp-fp16");
  options.precision = "amp-fp16";
  EXPECT_EQ(error_of(options),
            "--precision: 'amp-fp16' needs --device cuda; the cpu is profiled in fp32 only");
#ifndef PIPEPLAN_HAS_CUDA
  options = ProfileOptions();
  options.device = "cuda:0";
  EXPECT_NE(error_of(options).find("needs a pipeplan built with CUDA"), std::string::npos);
#endif
}

TEST(GpuModelProfilerTest, ProfilesOnCudaWithKernelTimesAndAutocast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const models::Model model = models::make_model("mlp_tiny");
  ProfileOptions options = quick_options({2, 8});
  options.device = "cuda";
  options.repeats = 3;
  const Profile fp32 = profile_model(model, options);
  EXPECT_EQ(fp32.device.kind, "cuda");
  EXPECT_GT(fp32.device.memory_bytes, 0);
  EXPECT_GT(fp32.device.runtime_overhead_bytes, 0);
  for (const LayerProfile& layer : fp32.layers) {
    ASSERT_TRUE(layer.points[0].fwd_kernel_ms.has_value()) << layer.name;
    EXPECT_GT(*layer.points[0].bwd_kernel_ms, 0.0) << layer.name;
    // The split is timed with CUDA events too: W of every layer with parameters, B of every
    // layer after the data's.
    EXPECT_EQ(*layer.points[0].bwd_weight_ms > 0.0, layer.param_count > 0) << layer.name;
    EXPECT_EQ(*layer.points[0].bwd_input_ms > 0.0, layer.index > 0) << layer.name;
  }
  options.precision = "amp-bf16";
  const Profile bf16 = profile_model(model, options);
  EXPECT_EQ(bf16.layers[0].output_dtype, "bfloat16");
  EXPECT_EQ(bf16.settings.precision, "amp-bf16");
}

}  // namespace
}  // namespace pipeplan::profiler
