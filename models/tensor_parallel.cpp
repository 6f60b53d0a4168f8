// The tensor-parallel group and the autograd functions f and g around split linears.
#include "models/tensor_parallel.h"

#include <utility>

#include "common/error.h"

namespace pipeplan::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kGroupKey = "group";

TensorParallelGroupPtr group_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<TensorParallelGroup>(
      ctx->saved_data.at(kGroupKey).toCapsule());
}

// A new contiguous tensor holding the sum of `tensor` over the group (the input is left alone:
// autograd may still read it).
torch::Tensor summed(const torch::Tensor& tensor, const TensorParallelGroup& group) {
  torch::Tensor sum = tensor.contiguous().clone();
  group.all_reduce(sum);
  return sum;
}

class CopyToTensorParallel : public torch::autograd::Function<CopyToTensorParallel> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const TensorParallelGroupPtr& group) {
    ctx->saved_data[kGroupKey] = c10::IValue::make_capsule(group);
    // Function::apply makes an output that is an input a view of it with this node as its
    // gradient function: no copy.
    return input;
  }

  static variable_list backward(AutogradContext* ctx, variable_list output_gradients) {
    const torch::Tensor& gradient = output_gradients.at(0);
    if (!gradient.defined()) return {torch::Tensor(), torch::Tensor()};
    return {summed(gradient, *group_of(ctx)), torch::Tensor()};
  }
};

class ReduceFromTensorParallel : public torch::autograd::Function<ReduceFromTensorParallel> {
 public:
  static torch::Tensor forward(AutogradContext* /*ctx*/, const torch::Tensor& input,
                               const TensorParallelGroupPtr& group) {
    return summed(input, *group);
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list output_gradients) {
    return {output_gradients.at(0), torch::Tensor()};
  }
};

}  // namespace

TensorParallelGroup::TensorParallelGroup(int rank, int size) : rank_(rank), size_(size) {
  PIPEPLAN_ASSERT(size >= 1 && rank >= 0 && rank < size, "tensor-parallel rank ", rank, " of ",
                  size);
}

void TensorParallelGroup::set_all_reduce(std::function<void(torch::Tensor&)> all_reduce) {
  all_reduce_ = std::move(all_reduce);
}

void TensorParallelGroup::all_reduce(torch::Tensor& tensor) const {
  if (size_ == 1) return;
  PIPEPLAN_ASSERT(all_reduce_, "tensor-parallel all-reduce before the group was connected");
  all_reduce_(tensor);
}

torch::Tensor copy_to_tensor_parallel(const torch::Tensor& input,
                                      const TensorParallelGroupPtr& group) {
  if (group->size() == 1) return input;
  return CopyToTensorParallel::apply(input, group);
}

torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& input,
                                          const TensorParallelGroupPtr& group) {
  if (group->size() == 1) return input;
  return ReduceFromTensorParallel::apply(input, group);
}

torch::Tensor join_slices(const std::vector<torch::Tensor>& shards, c10::IntArrayRef whole) {
  if (shards.empty() || shards.front().dim() != static_cast<int64_t>(whole.size())) return {};
  for (const torch::Tensor& shard : shards)
    if (shard.sizes() != shards.front().sizes()) return {};
  const auto parts = static_cast<int64_t>(shards.size());
  int64_t joined_dim = -1;
  for (int64_t dim = 0; dim < shards.front().dim(); ++dim) {
    const int64_t size = shards.front().size(dim);
    if (size == whole[dim]) continue;
    if (joined_dim >= 0 || size * parts != whole[dim]) return {};
    joined_dim = dim;
  }
  return joined_dim < 0 ? torch::Tensor() : torch::cat(shards, joined_dim);
}

}  // namespace pipeplan::models
