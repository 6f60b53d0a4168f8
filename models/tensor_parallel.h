// Tensor parallelism inside a layer (Megatron-LM's split): the group a split layer's shards
// belong to, and the two autograd functions that carry its all-reduces.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace pipeplan::models {

/// The ranks holding the shards of the same layers: this rank's place in the group and how the
/// group sums a tensor. Layers hold it from the moment they are built; the executor gives it its
/// all-reduce once the process groups exist (set_all_reduce), before any forward.
class TensorParallelGroup : public torch::CustomClassHolder {
 public:
  /// Member `rank` of a group of `size` ranks; size 1 needs no all-reduce.
  TensorParallelGroup(int rank, int size);
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Sets the collective: sums its argument in place over the group, blocking until done.
  void set_all_reduce(std::function<void(torch::Tensor&)> all_reduce);
  /// Sums `tensor` (contiguous) in place over the group; identity for size 1.
  void all_reduce(torch::Tensor& tensor) const;

 private:
  int rank_;
  int size_;
  std::function<void(torch::Tensor&)> all_reduce_;
};
using TensorParallelGroupPtr = c10::intrusive_ptr<TensorParallelGroup>;

/// Megatron's f, before a column-parallel linear: identity in the forward, the sum of the input
/// gradient over the group in the backward (each rank's shard contributes part of it).
torch::Tensor copy_to_tensor_parallel(const torch::Tensor& input,
                                      const TensorParallelGroupPtr& group);

/// Megatron's g, after a row-parallel linear: the sum of the shards' partial outputs over the
/// group in the forward, identity in the backward (every rank needs the whole output gradient).
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& input,
                                          const TensorParallelGroupPtr& group);

/// The whole tensor of shape `whole` from shards cut from it in equal contiguous slices along one
/// dimension (a TorchScript MLP's linears: split_layer), in tp-rank order: their concatenation
/// along the one dimension where they differ from `whole`. Undefined when no single dimension
/// fits or the shards' shapes differ.
torch::Tensor join_slices(const std::vector<torch::Tensor>& shards, c10::IntArrayRef whole);

}  // namespace pipeplan::models
