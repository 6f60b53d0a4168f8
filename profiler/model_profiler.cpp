// Whole-model profiling: one layer at a time, every batch size, fits and the Profile record.
#include "profiler/model_profiler.h"

#include <algorithm>
#include <ctime>
#include <limits>

#include "common/error.h"
#include "common/version.h"
#include "profiler/device.h"
#include "profiler/layer_profiler.h"

namespace pipeplan::profiler {
namespace {

std::vector<int64_t> ascending_unique(std::vector<int64_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

template <typename Field>
LinearFit fit_field(const std::vector<LayerPoint>& points, Field field) {
  std::vector<double> xs;
  std::vector<double> ys;
  for (const LayerPoint& point : points) {
    xs.push_back(static_cast<double>(point.batch_size));
    ys.push_back(static_cast<double>(point.*field));
  }
  return fit_linear(xs, ys);
}

LayerFits fit_points(const std::vector<LayerPoint>& points) {
  LayerFits fits;
  fits.fwd_ms = fit_field(points, &LayerPoint::fwd_ms);
  fits.bwd_ms = fit_field(points, &LayerPoint::bwd_ms);
  fits.output_bytes = fit_field(points, &LayerPoint::output_bytes);
  fits.retained_bytes = fit_field(points, &LayerPoint::retained_bytes);
  fits.fwd_transient_bytes = fit_field(points, &LayerPoint::fwd_transient_bytes);
  fits.bwd_transient_bytes = fit_field(points, &LayerPoint::bwd_transient_bytes);
  return fits;
}

// The activations flowing between layers at every batch size, and the loss targets.
struct Activations {
  std::vector<int64_t> batch_sizes;
  std::vector<torch::Tensor> inputs;   // of the layer about to be measured
  std::vector<torch::Tensor> targets;  // of the loss
};

Activations first_inputs(const models::Model& model, const std::vector<int64_t>& batch_sizes,
                         uint64_t seed, const c10::Device& device) {
  Activations activations;
  activations.batch_sizes = batch_sizes;
  for (int64_t batch_size : batch_sizes) {
    auto [input, target] = models::random_batch(model, batch_size, seed);
    activations.inputs.push_back(input.to(device));
    activations.targets.push_back(target.to(device));
  }
  return activations;
}

// Builds, measures and releases layer `layer_idx`; replaces the activations by its outputs.
LayerProfile profile_layer(const models::Model& model, int layer_idx, uint64_t seed,
                           LayerProfiler& profiler, Activations& activations,
                           const ProgressFn& progress) {
  const int num_layers = static_cast<int>(model.layers.size());
  const models::LayerSpec& spec = model.layers[layer_idx];
  models::LayerPtr layer = models::build_layers(model, layer_idx, layer_idx + 1, seed).front();
  layer->to(profiler.settings().device);
  layer->train();
  LayerProfile profile;
  profile.index = layer_idx;
  profile.name = spec.name;
  profile.kind = spec.kind;
  describe_layer(*layer, profile);
  const bool last = layer_idx + 1 == num_layers;
  for (size_t size_idx = 0; size_idx < activations.batch_sizes.size(); ++size_idx) {
    if (progress) progress(layer_idx, num_layers, spec.name, activations.batch_sizes[size_idx]);
    const torch::Tensor& target = activations.targets[size_idx];
    LossFn loss;
    if (last)
      loss = [&](const torch::Tensor& output) {
        return models::compute_loss(model, output, target);
      };
    LayerMeasurement measurement = profiler.measure(*layer, activations.inputs[size_idx],
                                                    /*input_requires_grad=*/layer_idx > 0, loss);
    profile.points.push_back(measurement.point);
    profile.output_dtype = measurement.output_dtype;
    activations.inputs[size_idx] = last ? torch::Tensor() : measurement.output;
  }
  profile.optimizer_step_ms = profiler.optimizer_step_ms(*layer);
  profile.fits = fit_points(profile.points);
  return profile;
}

}  // namespace

void ProfileOptions::validate() const {
  check_precision(parse_device(device), parse_precision(precision));
  PIPEPLAN_CHECK(!batch_sizes.empty(), "--batch-sizes: empty (give sizes such as 1,2,4,8)");
  for (int64_t batch_size : batch_sizes)
    PIPEPLAN_CHECK(batch_size >= 1, "--batch-sizes: ", batch_size, " is below 1");
  PIPEPLAN_CHECK(warmup >= 0, "--warmup: ", warmup, " is negative (use 0 or more)");
  PIPEPLAN_CHECK(repeats >= 1, "--repeats: ", repeats, " is below 1");
  if (threads) PIPEPLAN_CHECK(*threads >= 1, "--threads: ", *threads, " is below 1");
  PIPEPLAN_CHECK(seed <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                 "--seed: ", seed, " is above 2^63 - 1");
}

Profile profile_model(const models::Model& model, const ProfileOptions& options,
                      const ProgressFn& progress) {
  options.validate();
  if (options.threads) at::set_num_threads(*options.threads);
  keep_freed_cpu_memory();
  const c10::Device device = parse_device(options.device);
  LayerSettings settings;
  settings.device = device;
  settings.precision = parse_precision(options.precision);
  settings.warmup = options.warmup;
  settings.repeats = options.repeats;

  Profile profile;
  profile.tool_version = version();
  profile.created_at = utc_timestamp();
  profile.model = models::model_ref(model);
  profile.settings.device = options.device;
  profile.settings.batch_sizes = ascending_unique(options.batch_sizes);
  profile.settings.precision = precision_name(settings.precision);
  profile.settings.warmup = options.warmup;
  profile.settings.repeats = options.repeats;
  profile.settings.co_located = 1;
  profile.settings.seed = options.seed;
  profile.device = describe_device(device);

  LayerProfiler profiler(settings);
  Activations activations = first_inputs(model, profile.settings.batch_sizes, options.seed, device);
  for (int layer_idx = 0; layer_idx < static_cast<int>(model.layers.size()); ++layer_idx)
    profile.layers.push_back(
        profile_layer(model, layer_idx, options.seed, profiler, activations, progress));
  profile.validate("profile");
  return profile;
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace pipeplan::profiler
