// Profiles a whole model layer by layer (what `pipeplan profile` runs): settings, inputs of every
// layer, fits, device facts and the resulting Profile.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/units.h"
#include "models/model.h"
#include "plans/profile.h"

namespace pipeplan::profiler {

/// Training bytes of a layer per byte of its parameters: weights, gradients and optimizer state
/// (AdamW's two moments).
inline constexpr int64_t kTrainingBytesPerParamByte = 4;
/// Default limit of the training bytes of one chain of layers built and timed together.
inline constexpr int64_t kDefaultChainBudgetBytes = 2 * kGiB;

/// The settings of one profile (the flags of `pipeplan profile`).
struct ProfileOptions {
  std::string device = "cpu";                       ///< "cpu", "cuda" or "cuda:N"
  std::vector<int64_t> batch_sizes = {1, 2, 4, 8};  ///< micro-batch sizes, any order
  std::string precision = "fp32";                   ///< "fp32", "amp-bf16", "amp-fp16"
  int warmup = 3;    ///< untimed passes (forwards, backwards) per chain of layers and size
  int repeats = 10;  ///< timed passes (forwards, backwards) per chain of layers and size
  std::optional<int>
      threads;        ///< intra-op threads (at::set_num_threads); LibTorch's default if unset
  uint64_t seed = 0;  ///< layer weights (build_layers) and the random batch
  /// Processes measuring at once (`--co-located`), recorded in the profile; the caller starts
  /// them and passes profile_model a barrier that synchronises them.
  int co_located = 1;
  /// Limit of the training bytes (kTrainingBytesPerParamByte x parameter bytes) of the layers
  /// built and timed together (split_into_chains); not a flag.
  int64_t chain_budget_bytes = kDefaultChainBudgetBytes;
  /// Tensor-parallel group sizes to measure the splitting layers' shards at (`--tp-sizes`);
  /// those that do not divide every count such a layer splits are skipped.
  std::vector<int> tp_sizes = {2, 4, 8};

  /// Throws Error(kBadInput) naming the flag: unknown or unavailable device, unknown precision
  /// or one the device cannot run, no batch sizes or one outside [1, kMaxBatchSize], warmup < 0,
  /// repeats < 1, threads < 1, co_located < 1, a tp size below 2 or above kMaxDevices. Checks
  /// only; changes nothing.
  void validate() const;
};

/// Consecutive layers [first, last) of a model, built and timed together.
struct LayerChain {
  int first = 0;
  int last = 0;
};

/// Splits the model's layers into chains, in order, covering every layer once: a chain grows
/// while the training bytes of its layers (kTrainingBytesPerParamByte x 4-byte parameters) stay
/// within `budget_bytes`; a layer above the budget is a chain of its own.
std::vector<LayerChain> split_into_chains(const models::Model& model, int64_t budget_bytes);

/// Called before each chain of layers [first_layer, last_layer) is measured at each batch size
/// (for a progress line).
using ProgressFn =
    std::function<void(int first_layer, int last_layer, int num_layers, int64_t batch_size)>;

/// Blocks until every co-located measuring process has called it as often (a barrier).
using BarrierFn = std::function<void()>;

/// Profiles every layer of `model` at every batch size (ascending, duplicates dropped).
/// The layers are taken in chains (split_into_chains with `chain_budget_bytes`): a chain's
/// layers are built together (build_layers(model, first, last, seed)), moved to the device,
/// measured (LayerProfiler::measure_chain: timed in sequence, as a stage runs them) and
/// released, so a model that does not fit in memory whole can still be profiled; only the last
/// chain's outputs are kept. Layer 0 gets random_batch's input; layer i > 0 the output of layer
/// i - 1 at the same batch size, so every layer sees realistic shapes and values. Layer 0's
/// input needs no gradient (it is the data); every later layer's does. The last layer's forward
/// and backward include the loss (compute_loss against random_batch's target); the last layer
/// of any other chain starts its backward from a random gradient. After a chain is released,
/// the optimizer step is timed over its parameters in one flat buffer
/// (LayerProfiler::flat_optimizer_step_ms) and shared among its layers by parameter count.
/// A chain holding layers that split (LayerSpec::build_shard) is then built and measured again
/// at each usable size of `tp_sizes` from the same inputs, rank 0's shards in place of those
/// layers and the group's all-reduces left out (no peer: the planner adds them from the
/// interconnect's fit); the shards' records go to their layers' tp_shards, with the optimizer
/// step scaled by their share of the layer's parameters, and the usable sizes to
/// settings.tp_sizes. Applies `threads` and
/// keep_freed_cpu_memory() for the rest of the process. With `co_located` > 1, `barrier` is
/// required; it is called before each chain is measured at each batch size and before its
/// optimizer steps, so that the co-located processes measure the same work at the same time.
Profile profile_model(const models::Model& model, const ProfileOptions& options,
                      const ProgressFn& progress = {}, const BarrierFn& barrier = {});

/// The sizes of `requested` at which every layer of `model` that splits can split, ascending,
/// each once; none when no layer splits (the profile's settings.tp_sizes).
std::vector<int> usable_tp_sizes(const models::Model& model, std::vector<int> requested);

}  // namespace pipeplan::profiler
