// One gradient bucket's collective over a c10d group, started now and finished later: the
// all-reduce, ZeRO-1's reduce-scatter and all-gather, as Comm runs them over a stage's replicas
// and as time_links times them.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "models/torch_compat.h"

namespace pipeplan::executor {

/// How ZeRO-1 cuts a bucket of `elements` into `group_size` pieces: piece p starts at
/// p · piece_elements (ceil(elements / group_size)); the last pieces are shorter, or empty, so
/// that no element is padded in the flat buffers (only transfers that need equal pieces pad).
struct ShardPieces {
  int64_t elements = 0;
  int64_t piece_elements = 0;
  /// Where piece `piece` starts and how long it is.
  int64_t begin(int piece) const { return std::min(elements, piece * piece_elements); }
  int64_t length(int piece) const {
    return std::min(elements, (piece + 1) * piece_elements) - begin(piece);
  }
};

/// The pieces of a bucket of `elements` over `group_size` replicas (group_size >= 1).
ShardPieces shard_pieces(int64_t elements, int group_size);

/// What a bucket collective does to its tensor.
enum class BucketOp {
  kAllReduce,      ///< every element ends with the sum over the group
  kReduceScatter,  ///< the caller's piece ends with the sum of that piece over the group
  kAllGather,      ///< every piece ends with the values its owner (group rank = piece) holds
};

/// One bucket collective in flight. Gloo has no reduce-scatter (LibTorch 1.13's throws "does not
/// support reduce_scatter"), so over Gloo it is a ring of send/recv: in step k of group_size − 1,
/// rank r sends piece (r − k − 1) mod n to rank r + 1 and adds the piece (r − k − 2) mod n that
/// rank r − 1 sends it, so that after the last step its own piece holds the sum. Step 0 is posted
/// at start (Gloo moves it in the background); later steps need the received piece, so they run
/// in finish(). Over NCCL it is the group's reduce_scatter of the pieces padded to equal length.
class BucketCollective {
 public:
  using GroupPtr = c10::intrusive_ptr<compat::CommGroup>;
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;
  /// Waits for one c10d operation (bounded by the caller's timeout; throws Error(kRuntime)).
  using Wait = std::function<void(const WorkPtr&)>;

  /// Starts `op` on `tensor` (1-D, contiguous, on the device the group transfers from) over
  /// `group`, where this process is `group_rank` of `group_size`. `ring`: the reduce-scatter as
  /// send/recv (Gloo), else the group's own. The ring's transfers are tagged `tag` · group_size
  /// + step: every rank must start the same collectives in the same order with the same tags.
  BucketCollective(BucketOp op, const GroupPtr& group, int group_rank, int group_size,
                   torch::Tensor tensor, bool ring, int tag);

  /// Waits until the collective is done (running the ring's later steps), then leaves the
  /// result in the tensor given at start.
  void finish(const Wait& wait);
  const torch::Tensor& tensor() const { return tensor_; }

 private:
  void start_ring_step();
  void start_padded_reduce_scatter();
  void start_all_gather();
  // The piece (r − k − offset) mod n of the current step k.
  int ring_piece(int offset) const;

  BucketOp op_;
  GroupPtr group_;
  int group_rank_;
  int group_size_;
  torch::Tensor tensor_;
  bool ring_;
  int tag_;
  ShardPieces pieces_;
  int step_ = 0;
  WorkPtr work_;                    // the collective, or the ring step's receive
  std::vector<WorkPtr> sends_;      // the ring's sends, waited at the end
  torch::Tensor received_;          // the ring step's incoming piece
  torch::Tensor padded_;            // NCCL reduce-scatter input, or all-gather output, padded
  torch::Tensor own_piece_;         // the reduce-scatter's output / all-gather's input
  std::vector<at::Tensor> inputs_;  // kept alive while the operation runs
  std::vector<std::vector<at::Tensor>> lists_;
};

}  // namespace pipeplan::executor
