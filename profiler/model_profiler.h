// Profiles a whole model layer by layer (what `pipeplan profile` runs): settings, inputs of every
// layer, fits, device facts and the resulting Profile.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "profiler/report.h"

namespace pipeplan::profiler {

/// The settings of one profile (the flags of `pipeplan profile`).
struct ProfileOptions {
  std::string device = "cpu";                       ///< "cpu", "cuda" or "cuda:N"
  std::vector<int64_t> batch_sizes = {1, 2, 4, 8};  ///< micro-batch sizes, any order
  std::string precision = "fp32";                   ///< "fp32", "amp-bf16", "amp-fp16"
  int warmup = 3;    ///< untimed runs per layer, size and phase (forward, backward)
  int repeats = 10;  ///< timed runs of forward and of backward per layer and size
  std::optional<int>
      threads;        ///< intra-op threads (at::set_num_threads); LibTorch's default if unset
  uint64_t seed = 0;  ///< layer weights (build_layers) and the random batch

  /// Throws Error(kBadInput) naming the flag: unknown or unavailable device, unknown precision
  /// or one the device cannot run, no batch sizes or one below 1, warmup < 0, repeats < 1,
  /// threads < 1. Checks only; changes nothing.
  void validate() const;
};

/// Called before each layer is measured at each batch size (for a progress line).
using ProgressFn = std::function<void(int layer_idx, int num_layers, const std::string& layer_name,
                                      int64_t batch_size)>;

/// Profiles every layer of `model` at every batch size (ascending, duplicates dropped).
/// Layers are built one at a time (build_layers(model, i, i + 1, seed)), moved to the device,
/// measured (LayerProfiler) and released, so a model that does not fit in memory whole can still
/// be profiled; only the previous layer's outputs are kept. Layer 0 gets random_batch's input;
/// layer i > 0 the output of layer i - 1 at the same batch size, so every layer sees realistic
/// shapes and values. Layer 0's input needs no gradient (it is the data); every later layer's
/// does. The last layer's forward and backward include the loss (compute_loss against
/// random_batch's target). Applies `threads` and keep_freed_cpu_memory() for the rest of the
/// process.
Profile profile_model(const models::Model& model, const ProfileOptions& options,
                      const ProgressFn& progress = {});

/// Now, in UTC, as ISO 8601 ("2025-01-31T12:00:00Z").
std::string utc_timestamp();

}  // namespace pipeplan::profiler
