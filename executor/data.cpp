// Training data: the source registry, epoch order and micro-batch slicing.
#include "executor/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"
#include "common/hash.h"
#include "executor/image_data.h"

namespace pipeplan::executor {
namespace {

// Synthetic split sizes: an epoch of a few hundred steps at small batches.
constexpr int64_t kSyntheticTrainSamples = 8192;
constexpr int64_t kSyntheticTestSamples = 1024;

}  // namespace

std::unique_ptr<DataSource> open_data(const std::string& kind, const std::string& dir,
                                      const models::Model& model, uint64_t seed) {
  if (kind == "fashion-mnist") return open_fashion_mnist(dir, model);
  if (kind == "cifar10") return open_cifar10(dir, model);
  if (kind == "synthetic")
    return open_synthetic(model, seed, kSyntheticTrainSamples, kSyntheticTestSamples);
  throw Error(ErrorKind::kBadInput,
              detail::concat("--data: ", quote(kind), " is not one of fashion-mnist, cifar10, synthetic"));
}

// Written straight into the vector (randperm_out into a view of it), not through a tensor of its
// own: the trainer draws an epoch's order while it tracks memory, and a tensor of 8 bytes per sample
// (64 KiB for the synthetic data, 469 KiB for Fashion-MNIST) would set the peak of a small stage.
std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int64_t epoch) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, static_cast<uint64_t>(epoch)));
  std::vector<int64_t> order(static_cast<size_t>(size));
  torch::Tensor perm = torch::from_blob(order.data(), {size}, torch::kInt64);
  torch::randperm_out(perm, size, generator);
  return order;
}

std::vector<int64_t> micro_batch_indices(const std::vector<int64_t>& order, int64_t step_in_epoch,
                                         int64_t global_batch, int dp, int replica,
                                         int num_micro_batches, int micro_batch_idx) {
  PIPEPLAN_ASSERT(global_batch % (static_cast<int64_t>(dp) * num_micro_batches) == 0);
  const int64_t micro_batch_size = global_batch / dp / num_micro_batches;
  const int64_t global_micro_batch = static_cast<int64_t>(replica) * num_micro_batches + micro_batch_idx;
  const int64_t begin = step_in_epoch * global_batch + global_micro_batch * micro_batch_size;
  PIPEPLAN_ASSERT(begin + micro_batch_size <= static_cast<int64_t>(order.size()),
                  "step ", step_in_epoch, " is beyond the epoch");
  return std::vector<int64_t>(order.begin() + begin, order.begin() + begin + micro_batch_size);
}

}  // namespace pipeplan::executor
