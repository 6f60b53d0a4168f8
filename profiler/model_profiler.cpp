// Whole-model profiling: chains of layers, every batch size, fits and the Profile record.
#include "profiler/model_profiler.h"

#include <algorithm>
#include <ctime>
#include <limits>

#include "common/error.h"
#include "common/limits.h"
#include "common/version.h"
#include "models/torchscript.h"
#include "profiler/layer_profiler.h"
#include "runtime/device.h"
#include "runtime/memory_tracker.h"

namespace pipeplan::profiler {
namespace {

constexpr int64_t kFloatBytes = 4;  // the zoo's parameters are float32

std::vector<int64_t> ascending_unique(std::vector<int64_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
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

// What profiling the chains of one model shares.
struct ChainContext {
  const models::Model& model;
  const ProfileOptions& options;
  LayerProfiler& profiler;
  const ProgressFn& progress;
  const BarrierFn& barrier;
};

// Builds the chain's layers on the device in training mode, and their profiles' static facts;
// with a tensor-parallel `group`, the shards of the layers that split.
std::vector<models::LayerPtr> build_chain(const ChainContext& context, const LayerChain& chain,
                                          std::vector<LayerProfile>& profiles,
                                          const models::TensorParallelGroupPtr& group) {
  std::vector<models::LayerPtr> layers =
      models::build_layers(context.model, chain.first, chain.last, context.options.seed, group);
  for (size_t offset = 0; offset < layers.size(); ++offset) {
    layers[offset]->to(context.profiler.settings().device);
    layers[offset]->train();
    LayerProfile profile;
    profile.index = chain.first + static_cast<int>(offset);
    profile.name = context.model.layers[profile.index].name;
    profile.kind = context.model.layers[profile.index].kind;
    for (const auto& [what, count] : context.model.layers[profile.index].tp_divides)
      profile.tp_divides[what] = count;
    profile.tp_all_reduces = context.model.layers[profile.index].tp_all_reduces;
    describe_layer(*layers[offset], profile);
    profiles.push_back(profile);
  }
  return layers;
}

// Builds, measures and releases one chain (with a tensor-parallel `group`, its split layers'
// shards); replaces the activations by its last layer's outputs.
std::vector<LayerProfile> profile_chain(const ChainContext& context, const LayerChain& chain,
                                        Activations& activations,
                                        const models::TensorParallelGroupPtr& group = {}) {
  const int num_layers = static_cast<int>(context.model.layers.size());
  std::vector<LayerProfile> profiles;
  const std::vector<models::LayerPtr> built = build_chain(context, chain, profiles, group);
  std::vector<models::Layer*> layers;
  for (const models::LayerPtr& layer : built) layers.push_back(layer.get());
  const bool ends_model = chain.last == num_layers;
  for (size_t size_idx = 0; size_idx < activations.batch_sizes.size(); ++size_idx) {
    if (context.progress)
      context.progress(chain.first, chain.last, num_layers, activations.batch_sizes[size_idx]);
    const torch::Tensor& target = activations.targets[size_idx];
    LossFn loss;
    if (ends_model)
      loss = [&](const torch::Tensor& output) {
        return models::compute_loss(context.model, output, target);
      };
    if (context.barrier) context.barrier();
    std::vector<LayerMeasurement> measurements = context.profiler.measure_chain(
        layers, activations.inputs[size_idx], /*input_requires_grad=*/chain.first > 0, loss);
    for (size_t offset = 0; offset < layers.size(); ++offset) {
      profiles[offset].points.push_back(measurements[offset].point);
      profiles[offset].output_dtype = measurements[offset].output_dtype;
    }
    activations.inputs[size_idx] = ends_model ? torch::Tensor() : measurements.back().output;
  }
  for (LayerProfile& profile : profiles) profile.fits = fit_points(profile.points);
  return profiles;
}

// Times the optimizer step over the chain's parameters in one flat buffer, as a stage holds
// them, and gives each layer its share by parameter count (the step is memory-bound, linear in
// bytes). Called after the chain's layers are released, so that the flat copy fits beside
// nothing else of the chain.
void time_optimizer_steps(const ChainContext& context, std::vector<LayerProfile>& profiles) {
  int64_t chain_params = 0;
  for (const LayerProfile& profile : profiles) chain_params += profile.param_count;
  if (context.barrier) context.barrier();
  const std::map<std::string, double> chain_ms =
      context.profiler.flat_optimizer_step_ms(chain_params);
  for (LayerProfile& profile : profiles)
    for (const auto& [optimizer, ms] : chain_ms)
      profile.optimizer_step_ms[optimizer] =
          chain_params > 0
              ? ms * static_cast<double>(profile.param_count) / static_cast<double>(chain_params)
              : 0.0;
}

// The chain measured again at each of the profile's tp sizes, from the inputs it had
// (`activations`, a copy), its split layers' records added to their `profiles`' tp_shards.
void profile_chain_shards(const ChainContext& context, const LayerChain& chain,
                          const Activations& activations, const std::vector<int>& tp_sizes,
                          std::vector<LayerProfile>& profiles) {
  const bool splits = std::any_of(
      context.model.layers.begin() + chain.first, context.model.layers.begin() + chain.last,
      [](const models::LayerSpec& spec) { return static_cast<bool>(spec.build_shard); });
  if (!splits) return;
  for (int tp : tp_sizes) {
    // Rank 0 of a group with no peers: its all-reduces sum nothing.
    const auto group = c10::make_intrusive<models::TensorParallelGroup>(/*rank=*/0, tp);
    group->set_all_reduce([](torch::Tensor&) {});
    Activations inputs = activations;
    std::vector<LayerProfile> shards = profile_chain(context, chain, inputs, group);
    for (size_t offset = 0; offset < shards.size(); ++offset) {
      LayerProfile& whole = profiles[offset];
      if (!context.model.layers[whole.index].build_shard) continue;
      LayerProfile& shard = shards[offset];
      shard.tp = tp;
      for (const auto& [optimizer, ms] : whole.optimizer_step_ms)
        shard.optimizer_step_ms[optimizer] = whole.param_count > 0
                                                 ? ms * static_cast<double>(shard.param_count) /
                                                       static_cast<double>(whole.param_count)
                                                 : 0.0;
      whole.tp_shards.push_back(std::move(shard));
    }
  }
}

// Now, in UTC, as ISO 8601 ("2025-01-31T12:00:00Z").
std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// What a rank that loads a TorchScript file keeps on the host besides its layers' tensors, as
// the executor meets it (the file loaded while memory is tracked): the file's compiled code with
// its debug records, alive as long as any of its modules is (17,648 bytes for the tests'
// tied_gpt.pt). Layer 0 built alone, its parameters and buffers subtracted.
int64_t file_overhead_bytes(const models::Model& model, uint64_t seed) {
  const auto tracker = std::make_shared<runtime::MemoryTracker>();
  const runtime::MemoryTrackingScope scope(tracker);
  const std::vector<models::LayerPtr> layers = models::build_layers(model, 0, 1, seed);
  LayerProfile tensors;
  describe_layer(*layers.front(), tensors);
  return std::max<int64_t>(
      0, tracker->current_bytes(c10::DeviceType::CPU) - tensors.param_bytes - tensors.buffer_bytes);
}

}  // namespace

void ProfileOptions::validate() const {
  runtime::check_precision(runtime::parse_device(device), parse_precision(precision, "--precision"));
  PIPEPLAN_CHECK(!batch_sizes.empty(), "--batch-sizes: empty (give sizes such as 1,2,4,8)");
  for (int64_t batch_size : batch_sizes)
    PIPEPLAN_CHECK(batch_size >= 1 && batch_size <= kMaxBatchSize, "--batch-sizes: ", batch_size,
                   " is out of range; expected sizes from 1 to ", kMaxBatchSize);
  PIPEPLAN_CHECK(warmup >= 0, "--warmup: ", warmup, " is negative (use 0 or more)");
  PIPEPLAN_CHECK(repeats >= 1, "--repeats: ", repeats, " is below 1");
  if (threads) PIPEPLAN_CHECK(*threads >= 1, "--threads: ", *threads, " is below 1");
  PIPEPLAN_CHECK(co_located >= 1, "--co-located: ", co_located, " is below 1");
  for (int tp : tp_sizes)
    PIPEPLAN_CHECK(tp >= 2 && tp <= kMaxDevices, "--tp-sizes: ", tp,
                   " is out of range; expected group sizes from 2 to ", kMaxDevices, " (or none)");
  PIPEPLAN_CHECK(seed <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                 "--seed: ", seed, " is above 2^63 - 1");
}

std::vector<LayerChain> split_into_chains(const models::Model& model, int64_t budget_bytes) {
  std::vector<LayerChain> chains;
  int64_t chain_bytes = 0;
  for (int layer_idx = 0; layer_idx < static_cast<int>(model.layers.size()); ++layer_idx) {
    const int64_t layer_bytes =
        kTrainingBytesPerParamByte * kFloatBytes * model.layers[layer_idx].param_count;
    if (chains.empty() || chain_bytes + layer_bytes > budget_bytes) {
      chains.push_back({layer_idx, layer_idx});
      chain_bytes = 0;
    }
    chains.back().last = layer_idx + 1;
    chain_bytes += layer_bytes;
  }
  return chains;
}

Profile profile_model(const models::Model& model, const ProfileOptions& options,
                      const ProgressFn& progress, const BarrierFn& barrier) {
  options.validate();
  PIPEPLAN_ASSERT(options.co_located == 1 || barrier, "co-located processes need a barrier");
  if (options.threads) at::set_num_threads(*options.threads);
  runtime::keep_freed_cpu_memory();
  const c10::Device device = runtime::parse_device(options.device);
  LayerSettings settings;
  settings.device = device;
  settings.precision = parse_precision(options.precision, "--precision");
  settings.warmup = options.warmup;
  settings.repeats = options.repeats;

  Profile profile;
  profile.tool_version = version();
  profile.created_at = utc_timestamp();
  profile.model = models::model_ref(model);
  profile.settings.device = options.device;
  profile.settings.batch_sizes = ascending_unique(options.batch_sizes);
  profile.settings.precision = to_string(settings.precision);
  profile.settings.warmup = options.warmup;
  profile.settings.repeats = options.repeats;
  profile.settings.co_located = options.co_located;
  profile.settings.seed = options.seed;
  profile.settings.tp_sizes = usable_tp_sizes(model, options.tp_sizes);
  profile.device = runtime::describe_device(device);
  // On the CPU a loaded TorchScript file's host bytes count against the device (CUDA: host
  // memory, not the device's).
  if (device.is_cpu() && models::is_torchscript_path(model.name))
    profile.device.runtime_overhead_bytes = file_overhead_bytes(model, options.seed);

  LayerProfiler profiler(settings);
  Activations activations = first_inputs(model, profile.settings.batch_sizes, options.seed, device);
  const ChainContext context{model, options, profiler, progress, barrier};
  for (const LayerChain& chain : split_into_chains(model, options.chain_budget_bytes)) {
    const Activations chain_inputs = activations;
    std::vector<LayerProfile> chain_profiles = profile_chain(context, chain, activations);
    time_optimizer_steps(context, chain_profiles);
    profile_chain_shards(context, chain, chain_inputs, profile.settings.tp_sizes, chain_profiles);
    for (LayerProfile& layer : chain_profiles) profile.layers.push_back(std::move(layer));
  }
  for (const models::TiedParameter& tie : model.ties) {
    TiedProfile tied;
    for (const models::TiedParameter::User& user : tie.users) tied.layers.push_back(user.layer);
    tied.param_count = tie.numel;
    profile.ties.push_back(std::move(tied));
  }
  profile.validate("profile");
  return profile;
}

std::vector<int> usable_tp_sizes(const models::Model& model, std::vector<int> requested) {
  const bool any_splits = std::any_of(
      model.layers.begin(), model.layers.end(),
      [](const models::LayerSpec& spec) { return static_cast<bool>(spec.build_shard); });
  std::sort(requested.begin(), requested.end());
  requested.erase(std::unique(requested.begin(), requested.end()), requested.end());
  std::vector<int> usable;
  for (int tp : requested)
    if (any_splits && models::tensor_parallel_fits(model, tp)) usable.push_back(tp);
  return usable;
}

}  // namespace pipeplan::profiler
