// Tests for profiler/model_profiler.h: whole-model profiles agree with the model (parameters,
// shapes), per-layer forward times add up to the whole forward, options are checked.
#include "profiler/model_profiler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
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
        EXPECT_GE(point.retained_bytes, point.saved_input_bytes + point.saved_output_bytes);
      }
      EXPECT_EQ(layer.optimizer_step_ms.count("sgd"), 1u);
      EXPECT_EQ(layer.optimizer_step_ms.count("adamw"), 1u);
    }
    EXPECT_EQ(param_bytes, models::parameter_count(model) * kFloatBytes) << name;
    EXPECT_EQ(profile.model.hash, model.hash);
    EXPECT_EQ(profile.device.kind, "cpu");
    EXPECT_GE(profile.device.threads, 1);
  }
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

// Median ms of the whole layer sequence's forward (with the loss, building the graph as the
// profile's forwards do) at `batch_size`.
double whole_forward_ms(const models::Model& model, int64_t batch_size,
                        const ProfileOptions& options) {
  const auto layers =
      models::build_layers(model, 0, static_cast<int>(model.layers.size()), options.seed);
  const auto [input, target] = models::random_batch(model, batch_size, options.seed);
  std::vector<double> samples;
  for (int iteration = 0; iteration < options.warmup + options.repeats; ++iteration) {
    const auto start = std::chrono::steady_clock::now();
    const torch::Tensor loss =
        models::compute_loss(model, models::forward_layers(layers, input), target);
    const auto stop = std::chrono::steady_clock::now();
    if (iteration >= options.warmup)
      samples.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return quantile(samples, 0.5);
}

// Timing on a shared machine is noisy: each round profiles then times the whole model, and the
// median ratio over the rounds must be within 15% (one disturbed round cannot fail the test).
TEST(ModelProfilerTest, SerialSumOfLayerForwardTimesMatchesWholeForward) {
  constexpr int kRounds = 5;
  constexpr double kTolerance = 0.15;
  for (const std::string& name : kModels) {
    const models::Model model = models::make_model(name);
    ProfileOptions options;
    options.batch_sizes = {4, 32};
    options.warmup = 5;
    options.repeats = 30;
    options.threads = 1;
    std::vector<std::vector<double>> ratios(options.batch_sizes.size());
    for (int round = 0; round < kRounds; ++round) {
      const Profile profile = profile_model(model, options);
      for (size_t size_idx = 0; size_idx < options.batch_sizes.size(); ++size_idx) {
        double sum_ms = 0;
        for (const LayerProfile& layer : profile.layers) sum_ms += layer.points[size_idx].fwd_ms;
        const double whole_ms = whole_forward_ms(model, options.batch_sizes[size_idx], options);
        ratios[size_idx].push_back(sum_ms / whole_ms);
      }
    }
    for (size_t size_idx = 0; size_idx < options.batch_sizes.size(); ++size_idx) {
      const double ratio = quantile(ratios[size_idx], 0.5);
      RecordProperty(name + "_b" + std::to_string(options.batch_sizes[size_idx]) + "_ratio",
                     std::to_string(ratio));
      EXPECT_NEAR(ratio, 1.0, kTolerance)
          << name << " b=" << options.batch_sizes[size_idx] << ": sum of layers / whole forward";
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
  EXPECT_EQ(error_of(options), "--batch-sizes: 0 is below 1");
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
  options.precision = "fp8";
  EXPECT_EQ(error_of(options), "--precision: 'fp8' is not fp32, amp-bf16 or amp-fp16");
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
  }
  options.precision = "amp-bf16";
  const Profile bf16 = profile_model(model, options);
  EXPECT_EQ(bf16.layers[0].output_dtype, "bfloat16");
  EXPECT_EQ(bf16.settings.precision, "amp-bf16");
}

}  // namespace
}  // namespace pipeplan::profiler
