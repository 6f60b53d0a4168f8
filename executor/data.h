// Training data: sources addressed by sample index, and the global sample order that makes a
// run's data independent of dp and pp.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"

namespace pipeplan::executor {

enum class Split { kTrain, kTest };

/// A data set whose samples are addressed by index; the whole split is held in memory.
class DataSource {
 public:
  virtual ~DataSource() = default;
  /// Number of samples in the split.
  virtual int64_t size(Split split) const = 0;
  /// Inputs [n, sample_shape...] in the model's input dtype and targets [n, target_shape...]
  /// (int64) of the samples at `indices` (each in [0, size(split))), in that order.
  virtual std::pair<torch::Tensor, torch::Tensor> batch(Split split,
                                                        const std::vector<int64_t>& indices) const = 0;
  /// "fashion-mnist", "cifar10", "synthetic".
  virtual std::string name() const = 0;
};

/// Opens data set `kind` for `model`. `dir` is the folder of the files ("" for the default);
/// `seed` seeds synthetic data. Throws Error(kBadInput) naming the file for missing or corrupt
/// files, and naming the model and data set when the model's input does not match the data.
std::unique_ptr<DataSource> open_data(const std::string& kind, const std::string& dir,
                                      const models::Model& model, uint64_t seed);

/// Seeded, learnable synthetic data for any model: images are a class prototype plus noise,
/// token sequences follow a fixed random bigram chain with next-token targets.
std::unique_ptr<DataSource> open_synthetic(const models::Model& model, uint64_t seed,
                                           int64_t train_size, int64_t test_size);

/// The sample order of one epoch: a permutation of [0, size) determined by (seed, epoch) only.
std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int64_t epoch);

/// Where a micro-batch's samples come from. A step takes the global batch
/// order[step·G, (step+1)·G); replica r takes the r-th of dp equal slices of it, and its
/// micro-batch k the k-th of num_micro_batches equal slices of that. So micro-batch k of
/// replica r is global micro-batch r·m + k, whatever the split.
std::vector<int64_t> micro_batch_indices(const std::vector<int64_t>& order, int64_t step_in_epoch,
                                         int64_t global_batch, int dp, int replica,
                                         int num_micro_batches, int micro_batch_idx);

}  // namespace pipeplan::executor
