// Bucket collectives: all-reduce, ZeRO-1's reduce-scatter (a send/recv ring on Gloo) and
// all-gather, with the padding that equal-piece transfers need.
#include "executor/bucket_collectives.h"

// As in comm.cpp: c10d's headers are gated on the flags LibTorch was built with.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <utility>

#include "common/error.h"

namespace pipeplan::executor {

ShardPieces shard_pieces(int64_t elements, int group_size) {
  PIPEPLAN_ASSERT(group_size >= 1 && elements >= 0, "pieces of ", elements, " over ", group_size);
  return {elements, (elements + group_size - 1) / group_size};
}

BucketCollective::BucketCollective(BucketOp op, const GroupPtr& group, int group_rank,
                                   int group_size, torch::Tensor tensor, bool ring, int tag)
    : op_(op),
      group_(group),
      group_rank_(group_rank),
      group_size_(group_size),
      tensor_(std::move(tensor)),
      ring_(ring),
      tag_(tag),
      pieces_(shard_pieces(tensor_.numel(), group_size)) {
  PIPEPLAN_ASSERT(tensor_.dim() == 1 && tensor_.is_contiguous(), "a bucket is a 1-D slice");
  switch (op_) {
    case BucketOp::kAllReduce:
      inputs_ = {tensor_};
      work_ = group_->allreduce(inputs_);
      break;
    case BucketOp::kReduceScatter:
      if (ring_)
        start_ring_step();
      else
        start_padded_reduce_scatter();
      break;
    case BucketOp::kAllGather:
      start_all_gather();
      break;
  }
}

int BucketCollective::ring_piece(int offset) const {
  return ((group_rank_ - step_ - offset) % group_size_ + 2 * group_size_) % group_size_;
}

// Step k: send piece (r − k − 1) to the next rank, receive piece (r − k − 2) from the previous
// one. Both ends know every piece's length, so an empty piece is neither sent nor received.
void BucketCollective::start_ring_step() {
  work_.reset();
  received_ = torch::Tensor();
  if (step_ >= group_size_ - 1) return;
  const int next = (group_rank_ + 1) % group_size_;
  const int previous = (group_rank_ + group_size_ - 1) % group_size_;
  const int tag = tag_ * group_size_ + step_;
  const int sent = ring_piece(1);
  if (pieces_.length(sent) > 0) {
    std::vector<at::Tensor> outgoing{tensor_.narrow(0, pieces_.begin(sent), pieces_.length(sent))};
    sends_.push_back(group_->send(outgoing, next, tag));
  }
  const int received = ring_piece(2);
  if (pieces_.length(received) > 0) {
    received_ = torch::empty({pieces_.length(received)}, tensor_.options());
    std::vector<at::Tensor> incoming{received_};
    work_ = group_->recv(incoming, previous, tag);
  }
}

// NCCL's reduce_scatter takes equal pieces: the bucket is copied into a buffer of
// group_size · piece_elements unless it already divides evenly.
void BucketCollective::start_padded_reduce_scatter() {
  const int64_t piece = pieces_.piece_elements;
  padded_ = tensor_;
  if (piece * group_size_ != pieces_.elements) {
    padded_ = torch::zeros({piece * group_size_}, tensor_.options());
    padded_.narrow(0, 0, pieces_.elements).copy_(tensor_);
  }
  lists_.assign(1, {});
  for (int idx = 0; idx < group_size_; ++idx)
    lists_[0].push_back(padded_.narrow(0, idx * piece, piece));
  own_piece_ = torch::empty({piece}, tensor_.options());
  inputs_ = {own_piece_};
  work_ = group_->reduce_scatter(inputs_, lists_);
}

// Every rank contributes its piece padded to piece_elements; the gathered pieces land in the
// tensor itself when it divides evenly, else in a padded buffer copied back in finish().
void BucketCollective::start_all_gather() {
  const int64_t piece = pieces_.piece_elements;
  const bool even = piece * group_size_ == pieces_.elements;
  padded_ = even ? tensor_ : torch::empty({piece * group_size_}, tensor_.options());
  own_piece_ = tensor_.narrow(0, pieces_.begin(group_rank_), pieces_.length(group_rank_));
  if (!even) {
    torch::Tensor input = torch::zeros({piece}, tensor_.options());
    input.narrow(0, 0, own_piece_.numel()).copy_(own_piece_);
    own_piece_ = input;
  }
  lists_.assign(1, {});
  for (int idx = 0; idx < group_size_; ++idx)
    lists_[0].push_back(padded_.narrow(0, idx * piece, piece));
  inputs_ = {own_piece_};
  work_ = group_->allgather(lists_, inputs_);
}

void BucketCollective::finish(const Wait& wait) {
  if (op_ == BucketOp::kReduceScatter && ring_) {
    while (step_ < group_size_ - 1) {
      if (work_) {
        wait(work_);
        tensor_.narrow(0, pieces_.begin(ring_piece(2)), received_.numel()).add_(received_);
      }
      ++step_;
      start_ring_step();
    }
    for (const WorkPtr& send : sends_) wait(send);
    sends_.clear();
    return;
  }
  wait(work_);
  work_.reset();
  if (op_ == BucketOp::kReduceScatter) {
    const int64_t length = pieces_.length(group_rank_);
    tensor_.narrow(0, pieces_.begin(group_rank_), length).copy_(own_piece_.narrow(0, 0, length));
  } else if (op_ == BucketOp::kAllGather && !padded_.is_same(tensor_)) {
    tensor_.copy_(padded_.narrow(0, 0, pieces_.elements));
  }
}

}  // namespace pipeplan::executor
