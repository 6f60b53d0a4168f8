// Tests for profiler/layer_profiler.h: retained bytes equal the analytically saved tensors, the
// transients follow their definitions, times and optimizer steps are measured.
#include "profiler/layer_profiler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "common/error.h"

namespace pipeplan::profiler {
namespace {

constexpr int64_t kFloatBytes = 4;
constexpr int64_t kBatch = 8;
constexpr int64_t kInFeatures = 64;
constexpr int64_t kOutFeatures = 32;

// A Linear layer, optionally followed by a ReLU.
class LinearLayer : public models::Layer {
 public:
  LinearLayer(int64_t in_features, int64_t out_features, bool relu)
      : fc_(register_module("fc", torch::nn::Linear(in_features, out_features))), relu_(relu) {}
  torch::Tensor forward(const torch::Tensor& input) override {
    torch::Tensor out = fc_->forward(input);
    return relu_ ? torch::relu(out) : out;
  }

 private:
  torch::nn::Linear fc_;
  bool relu_;
};

// A parameter-free layer computing `fn`.
class FunctionLayer : public models::Layer {
 public:
  explicit FunctionLayer(std::function<torch::Tensor(const torch::Tensor&)> fn)
      : fn_(std::move(fn)) {}
  torch::Tensor forward(const torch::Tensor& input) override { return fn_(input); }

 private:
  std::function<torch::Tensor(const torch::Tensor&)> fn_;
};

LayerSettings quick_settings(const c10::Device& device = c10::Device(c10::DeviceType::CPU)) {
  LayerSettings settings;
  settings.device = device;
  settings.warmup = 1;
  settings.repeats = 3;
  return settings;
}

torch::Tensor input_of(int64_t features,
                       const c10::Device& device = c10::Device(c10::DeviceType::CPU)) {
  return torch::randn({kBatch, features}, torch::TensorOptions().device(device));
}

LayerPoint measure(models::Layer& layer, const torch::Tensor& input,
                   bool input_requires_grad = true) {
  LayerProfiler profiler(quick_settings());
  return profiler.measure(layer, input, input_requires_grad).point;
}

TEST(LayerProfilerTest, LinearRetainsExactlyItsInput) {
  LinearLayer layer(kInFeatures, kOutFeatures, /*relu=*/false);
  const LayerPoint point = measure(layer, input_of(kInFeatures));
  const int64_t input_bytes = kBatch * kInFeatures * kFloatBytes;
  EXPECT_EQ(point.retained_bytes, input_bytes);
  EXPECT_EQ(point.saved_input_bytes, input_bytes);
  EXPECT_EQ(point.saved_output_bytes, 0);
  EXPECT_EQ(point.output_bytes, kBatch * kOutFeatures * kFloatBytes);
  EXPECT_EQ(point.output_shape, (std::vector<int64_t>{kBatch, kOutFeatures}));
  EXPECT_EQ(point.batch_size, kBatch);
}

TEST(LayerProfilerTest, ReluRetainsExactlyItsOutput) {
  FunctionLayer layer([](const torch::Tensor& x) { return torch::relu(x); });
  const LayerPoint point = measure(layer, input_of(kInFeatures));
  const int64_t bytes = kBatch * kInFeatures * kFloatBytes;
  EXPECT_EQ(point.retained_bytes, bytes);
  EXPECT_EQ(point.saved_output_bytes, bytes);
  EXPECT_EQ(point.saved_input_bytes, 0);
  // Forward allocates only the output; backward only the input gradient (threshold_backward).
  EXPECT_EQ(point.fwd_transient_bytes, 0);
  EXPECT_EQ(point.bwd_transient_bytes, bytes);
}

TEST(LayerProfilerTest, LinearReluRetainsInputAndOutputAndFreesThePreActivation) {
  LinearLayer layer(kInFeatures, kOutFeatures, /*relu=*/true);
  const LayerPoint point = measure(layer, input_of(kInFeatures));
  const int64_t input_bytes = kBatch * kInFeatures * kFloatBytes;
  const int64_t output_bytes = kBatch * kOutFeatures * kFloatBytes;
  EXPECT_EQ(point.retained_bytes, input_bytes + output_bytes);
  EXPECT_EQ(point.saved_input_bytes, input_bytes);
  EXPECT_EQ(point.saved_output_bytes, output_bytes);
  // The Linear's output exists only until the ReLU has run.
  EXPECT_EQ(point.fwd_transient_bytes, output_bytes);
  // Backward produces the input gradient and the parameter gradients before accumulating them.
  const int64_t param_bytes = (kInFeatures * kOutFeatures + kOutFeatures) * kFloatBytes;
  EXPECT_GE(point.bwd_transient_bytes, input_bytes + kInFeatures * kOutFeatures * kFloatBytes);
  EXPECT_LE(point.bwd_transient_bytes, input_bytes + param_bytes + 2 * output_bytes);
}

TEST(LayerProfilerTest, ScalingRetainsNothing) {
  FunctionLayer layer([](const torch::Tensor& x) { return x * 2.0; });
  const LayerPoint point = measure(layer, input_of(kInFeatures));
  EXPECT_EQ(point.retained_bytes, 0);
  EXPECT_EQ(point.saved_input_bytes, 0);
  EXPECT_EQ(point.saved_output_bytes, 0);
}

TEST(LayerProfilerTest, SavedIntermediateIsRetainedButIsNeitherInputNorOutput) {
  // tanh saves its result; the scaling after it saves nothing.
  FunctionLayer layer([](const torch::Tensor& x) { return torch::tanh(x) * 3.0; });
  const LayerPoint point = measure(layer, input_of(kInFeatures));
  const int64_t bytes = kBatch * kInFeatures * kFloatBytes;
  EXPECT_EQ(point.retained_bytes, bytes);
  EXPECT_EQ(point.saved_input_bytes, 0);
  EXPECT_EQ(point.saved_output_bytes, 0);
  // Both tensors are alive at the end; only the wrapped scalar 3.0 comes and goes.
  EXPECT_LT(point.fwd_transient_bytes, 16);
}

TEST(LayerProfilerTest, OutputViewingASavedResultCountsAsSavedOutput) {
  // sigmoid saves its result; the layer returns a flattened view of it.
  FunctionLayer layer([](const torch::Tensor& x) { return torch::sigmoid(x).flatten(1); });
  const LayerPoint point =
      measure(layer, torch::randn({kBatch, 4, kInFeatures / 4}), /*input_requires_grad=*/true);
  const int64_t bytes = kBatch * kInFeatures * kFloatBytes;
  EXPECT_EQ(point.retained_bytes, bytes);
  EXPECT_EQ(point.saved_output_bytes, bytes);  // the view shares sigmoid's saved result
  EXPECT_EQ(point.saved_input_bytes, 0);
}

TEST(LayerProfilerTest, DataInputOfAParameterFreeLayerHasNoBackward) {
  FunctionLayer layer([](const torch::Tensor& x) { return torch::relu(x); });
  const LayerPoint point = measure(layer, input_of(kInFeatures), /*input_requires_grad=*/false);
  EXPECT_EQ(point.retained_bytes, 0);  // nothing requires a gradient: no graph at all
  EXPECT_EQ(point.bwd_ms, 0.0);
  EXPECT_EQ(point.bwd_transient_bytes, 0);
  EXPECT_GT(point.fwd_ms, 0.0);
}

TEST(LayerProfilerTest, LossOfTheLastLayerIsMeasuredWithIt) {
  LinearLayer layer(kInFeatures, kOutFeatures, /*relu=*/false);
  const torch::Tensor input = input_of(kInFeatures);
  const torch::Tensor target = torch::randint(kOutFeatures, {kBatch}, torch::kInt64);
  LayerProfiler profiler(quick_settings());
  const LayerPoint plain = profiler.measure(layer, input, /*input_requires_grad=*/true).point;
  const LossFn loss = [&](const torch::Tensor& output) {
    return torch::nn::functional::cross_entropy(output, target);
  };
  const LayerMeasurement with_loss =
      profiler.measure(layer, input, /*input_requires_grad=*/true, loss);
  // log_softmax saves its result, the size of the logits.
  EXPECT_GE(with_loss.point.retained_bytes, plain.retained_bytes + plain.output_bytes);
  EXPECT_EQ(with_loss.point.output_shape, plain.output_shape);  // the logits, not the loss
  EXPECT_EQ(with_loss.output.sizes().vec(), plain.output_shape);
}

TEST(LayerProfilerTest, TimesArePositive) {
  LinearLayer layer(kInFeatures, kOutFeatures, /*relu=*/true);
  const LayerMeasurement measurement =
      LayerProfiler(quick_settings()).measure(layer, input_of(kInFeatures), true);
  const LayerPoint& point = measurement.point;
  EXPECT_GT(point.fwd_ms, 0.0);
  EXPECT_GT(point.bwd_ms, 0.0);
  EXPECT_GT(point.fwd_ms_p90, 0.0);
  EXPECT_GT(point.bwd_ms_p90, 0.0);
  EXPECT_FALSE(point.fwd_kernel_ms.has_value());  // CPU: no kernel records
  EXPECT_EQ(measurement.output_dtype, "float32");
  EXPECT_FALSE(measurement.output.requires_grad());
  // Parameter gradients stay allocated and zeroed.
  for (const torch::Tensor& param : layer.parameters()) {
    ASSERT_TRUE(param.grad().defined());
    EXPECT_EQ(param.grad().abs().sum().item<double>(), 0.0);
  }
}

// The inference forward keeps no graph: a Linear allocates its output alone; a Linear + ReLU
// its pre-activation and the ReLU's output, both alive as the ReLU runs. Above the input, which
// the forward does not free.
TEST(LayerProfilerTest, InferencePeakCountsTheOutputAndTheTemporariesBesideIt) {
  const int64_t output_bytes = kBatch * kOutFeatures * kFloatBytes;
  LinearLayer linear(kInFeatures, kOutFeatures, /*relu=*/false);
  const LayerPoint linear_point = measure(linear, input_of(kInFeatures));
  ASSERT_TRUE(linear_point.inference_fwd_peak_bytes.has_value());
  EXPECT_EQ(*linear_point.inference_fwd_peak_bytes, output_bytes);
  LinearLayer linear_relu(kInFeatures, kOutFeatures, /*relu=*/true);
  const LayerPoint point = measure(linear_relu, input_of(kInFeatures));
  EXPECT_EQ(*point.inference_fwd_peak_bytes, 2 * output_bytes);
  ASSERT_TRUE(point.inference_fwd_ms && point.inference_fwd_ms_p90);
  EXPECT_GT(*point.inference_fwd_ms, 0.0);
  EXPECT_GE(*point.inference_fwd_ms_p90, *point.inference_fwd_ms);
  // A view of the input allocates nothing.
  FunctionLayer view([](const torch::Tensor& x) { return x.view({-1}); });
  EXPECT_EQ(*measure(view, input_of(kInFeatures)).inference_fwd_peak_bytes, 0);
}

// The inference passes run as `pipeplan infer` does: evaluation mode, no autograd graph, no loss;
// every timed and warm-up pass and the memory pass, and the layer is back in training mode.
TEST(LayerProfilerTest, InferenceForwardRunsInEvaluationModeWithoutGradients) {
  struct Seen {
    int inference = 0;  // forwards in evaluation mode with gradients off
    int training = 0;   // forwards in training mode with gradients on
    int other = 0;
  };
  Seen seen;
  class Watching : public models::Layer {
   public:
    explicit Watching(Seen& seen) : seen_(seen) {}
    torch::Tensor forward(const torch::Tensor& input) override {
      const bool grad = torch::GradMode::is_enabled();
      if (!is_training() && !grad) {
        ++seen_.inference;
      } else if (is_training() && grad) {
        ++seen_.training;
      } else {
        ++seen_.other;
      }
      return input * 2.0;
    }

   private:
    Seen& seen_;
  };
  Watching watching(seen);
  int loss_calls = 0;
  const LossFn loss = [&](const torch::Tensor& output) {
    ++loss_calls;
    return output.sum();
  };
  const LayerSettings settings = quick_settings();
  LayerProfiler(settings).measure(watching, input_of(kInFeatures), true, loss);
  const int passes = settings.warmup + settings.repeats;
  EXPECT_EQ(seen.inference, passes + 1);  // + the memory measurement
  EXPECT_EQ(seen.other, 0);
  EXPECT_EQ(loss_calls, seen.training);  // the loss only with the training forwards
  EXPECT_TRUE(watching.is_training());
}

TEST(LayerProfilerTest, ChainMeasuresEachLayerAsItWouldAlone) {
  LinearLayer first(kInFeatures, kOutFeatures, /*relu=*/true);
  LinearLayer second(kOutFeatures, kOutFeatures, /*relu=*/false);
  const torch::Tensor input = input_of(kInFeatures);
  LayerProfiler profiler(quick_settings());
  const std::vector<LayerMeasurement> chain =
      profiler.measure_chain({&first, &second}, input, /*input_requires_grad=*/true);
  ASSERT_EQ(chain.size(), 2u);
  const LayerMeasurement alone_first = profiler.measure(first, input, true);
  const LayerMeasurement alone_second = profiler.measure(second, alone_first.output, true);
  // The second layer's input is the first one's output; memory is measured per layer.
  EXPECT_TRUE(torch::equal(chain[0].output, alone_first.output));
  EXPECT_TRUE(torch::equal(chain[1].output, alone_second.output));
  for (size_t layer_idx = 0; layer_idx < chain.size(); ++layer_idx) {
    const LayerPoint& in_chain = chain[layer_idx].point;
    const LayerPoint& alone = (layer_idx == 0 ? alone_first : alone_second).point;
    EXPECT_EQ(in_chain.output_shape, alone.output_shape);
    EXPECT_EQ(in_chain.retained_bytes, alone.retained_bytes);
    EXPECT_EQ(in_chain.saved_input_bytes, alone.saved_input_bytes);
    EXPECT_EQ(in_chain.fwd_transient_bytes, alone.fwd_transient_bytes);
    EXPECT_EQ(in_chain.bwd_transient_bytes, alone.bwd_transient_bytes);
    EXPECT_GT(in_chain.fwd_ms, 0.0);
    EXPECT_GT(in_chain.bwd_ms, 0.0);  // the first from the second's input gradient
  }
}

TEST(LayerProfilerTest, ChainAfterAParameterFreeDataLayerTimesTheRestsBackward) {
  // Nothing before the second layer needs a gradient: the first has no backward at all.
  FunctionLayer scale([](const torch::Tensor& x) { return x * 2.0; });
  LinearLayer linear(kInFeatures, kOutFeatures, /*relu=*/false);
  const std::vector<LayerMeasurement> chain =
      LayerProfiler(quick_settings())
          .measure_chain({&scale, &linear}, input_of(kInFeatures), /*input_requires_grad=*/false);
  EXPECT_EQ(chain[0].point.bwd_ms, 0.0);
  EXPECT_EQ(chain[0].point.retained_bytes, 0);
  EXPECT_GT(chain[1].point.bwd_ms, 0.0);
  EXPECT_EQ(chain[1].point.saved_input_bytes, kBatch * kInFeatures * kFloatBytes);
}

TEST(LayerProfilerTest, SplitIsZeroWhereThereIsNoInputGradientOrNoParameter) {
  LinearLayer linear(kInFeatures, kOutFeatures, /*relu=*/true);
  FunctionLayer relu([](const torch::Tensor& x) { return torch::relu(x); });
  LayerProfiler profiler(quick_settings());
  // The data's layer: W only.
  const LayerPoint data = profiler.measure(linear, input_of(kInFeatures), false).point;
  ASSERT_TRUE(data.bwd_input_ms && data.bwd_weight_ms);
  EXPECT_EQ(*data.bwd_input_ms, 0.0);
  EXPECT_GT(*data.bwd_weight_ms, 0.0);
  // A later layer: B and W.
  const LayerPoint later = profiler.measure(linear, input_of(kInFeatures), true).point;
  EXPECT_GT(*later.bwd_input_ms, 0.0);
  EXPECT_GT(*later.bwd_weight_ms, 0.0);
  // No parameters: B only; and nothing at all on the data.
  const LayerPoint param_free = profiler.measure(relu, input_of(kInFeatures), true).point;
  EXPECT_GT(*param_free.bwd_input_ms, 0.0);
  EXPECT_EQ(*param_free.bwd_weight_ms, 0.0);
  const LayerPoint none = profiler.measure(relu, input_of(kInFeatures), false).point;
  EXPECT_EQ(*none.bwd_input_ms, 0.0);
  EXPECT_EQ(*none.bwd_weight_ms, 0.0);
  // The split passes leave the parameter gradients allocated and zeroed.
  for (const torch::Tensor& param : linear.parameters()) {
    ASSERT_TRUE(param.grad().defined());
    EXPECT_EQ(param.grad().abs().sum().item<double>(), 0.0);
  }
}

// A Linear layer's backward is two matmuls of the forward's size: B computes dX = dY·Wᵀ alone and
// W computes dW = Xᵀ·dY (and the bias's sum) alone, so each takes about half of the whole
// backward. Large enough (a matmul of milliseconds) that timing noise does not decide; a miss is
// measured again before the test fails, as a busy host can slow one measurement.
TEST(LayerProfilerTest, SplitOfALinearTakesEachMatmulOnce) {
  constexpr int64_t kWidth = 512;
  constexpr int64_t kRows = 512;
  constexpr double kMaxShare = 0.8;  // of the whole backward, for B and for W each
  constexpr int kMeasurements = 3;
  LinearLayer layer(kWidth, kWidth, /*relu=*/false);
  const torch::Tensor input = torch::randn({kRows, kWidth});
  LayerSettings settings = quick_settings();
  settings.repeats = 7;
  LayerProfiler profiler(settings);
  LayerPoint point;
  const auto within = [&] {
    const double input_ms = *point.bwd_input_ms;
    const double weight_ms = *point.bwd_weight_ms;
    return input_ms < kMaxShare * point.bwd_ms && weight_ms < kMaxShare * point.bwd_ms &&
           input_ms + weight_ms > (1 - kMaxShare) * point.bwd_ms;
  };
  for (int measurement = 0; measurement < kMeasurements; ++measurement) {
    point = profiler.measure(layer, input, /*input_requires_grad=*/true).point;
    if (within()) break;
  }
  EXPECT_LT(*point.bwd_input_ms, kMaxShare * point.bwd_ms) << "bwd " << point.bwd_ms;
  EXPECT_LT(*point.bwd_weight_ms, kMaxShare * point.bwd_ms) << "bwd " << point.bwd_ms;
  EXPECT_GT(*point.bwd_input_ms + *point.bwd_weight_ms, (1 - kMaxShare) * point.bwd_ms)
      << "B " << *point.bwd_input_ms << ", W " << *point.bwd_weight_ms;
}

TEST(LayerProfilerTest, FlatOptimizerStepsAreTimedPerOptimizer) {
  LayerProfiler profiler(quick_settings());
  const auto step_ms = profiler.flat_optimizer_step_ms(kInFeatures * kOutFeatures);
  ASSERT_EQ(step_ms.size(), 2u);
  EXPECT_GT(step_ms.at("sgd"), 0.0);
  EXPECT_GT(step_ms.at("adamw"), 0.0);
  const auto none = profiler.flat_optimizer_step_ms(0);
  EXPECT_EQ(none.at("sgd"), 0.0);
  EXPECT_EQ(none.at("adamw"), 0.0);
}

TEST(LayerProfilerTest, DescribesParametersAndBuffers) {
  LinearLayer linear(kInFeatures, kOutFeatures, /*relu=*/false);
  LayerProfile profile;
  describe_layer(linear, profile);
  EXPECT_EQ(profile.param_count, kInFeatures * kOutFeatures + kOutFeatures);
  EXPECT_EQ(profile.param_bytes, profile.param_count * kFloatBytes);
  EXPECT_EQ(profile.buffer_bytes, 0);
  torch::nn::BatchNorm1d norm(kOutFeatures);
  FunctionLayer with_buffers([](const torch::Tensor& x) { return x; });
  with_buffers.register_module("norm", norm);
  describe_layer(with_buffers, profile);
  // running_mean, running_var (float) and num_batches_tracked (int64).
  EXPECT_EQ(profile.buffer_bytes, 2 * kOutFeatures * kFloatBytes + 8);
}

TEST(LayerProfilerTest, SettingsAreChecked) {
  LayerSettings settings = quick_settings();
  settings.repeats = 0;
  EXPECT_THROW(LayerProfiler{settings}, Error);
  settings = quick_settings();
  settings.warmup = -1;
  EXPECT_THROW(LayerProfiler{settings}, Error);
  settings = quick_settings();
  settings.precision = Precision::kAmpBf16;  // the CPU runs fp32 only
  EXPECT_THROW(LayerProfiler{settings}, Error);
}

TEST(GpuLayerProfilerTest, LinearRetainsItsInputBlockOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const c10::Device device(c10::DeviceType::CUDA, 0);
  LinearLayer layer(kInFeatures, kOutFeatures, /*relu=*/false);
  layer.to(device);
  LayerProfiler profiler(quick_settings(device));
  const LayerPoint point = profiler.measure(layer, input_of(kInFeatures, device), true).point;
  // The caching allocator hands out blocks in multiples of 512 bytes.
  const int64_t input_bytes = kBatch * kInFeatures * kFloatBytes;
  EXPECT_EQ(point.retained_bytes, point.saved_input_bytes);
  EXPECT_GE(point.saved_input_bytes, input_bytes);
  EXPECT_LT(point.saved_input_bytes, input_bytes + 512);
  EXPECT_EQ(point.saved_output_bytes, 0);
  ASSERT_TRUE(point.fwd_kernel_ms.has_value());
  ASSERT_TRUE(point.bwd_kernel_ms.has_value());
  EXPECT_GT(*point.fwd_kernel_ms, 0.0);
  EXPECT_LE(*point.fwd_kernel_ms, point.fwd_ms_p90 * 1.05);
}

}  // namespace
}  // namespace pipeplan::profiler
