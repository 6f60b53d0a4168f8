// One rank's communication: the c10d store and process groups of a run, point-to-point
// transfers between pipeline neighbours, the replicas' gradient all-reduce, world-wide sums.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "executor/bucket_collectives.h"
#include "executor/rendezvous.h"
#include "plans/comm_backend.h"
#include "plans/plan.h"
#include "plans/schedule.h"

namespace pipeplan::executor {

/// Median one-way times of messages between the ranks of a job (two, or a tensor-parallel
/// group's: then the all-reduce alone), as the executor would
/// carry them on `device`: for each size in `sizes` (bytes), a point-to-point send/recv (half a
/// ping-pong), a two-rank all-reduce of float32 tensors, and the reduce-scatter and all-gather of
/// ZeRO-1 as Comm runs them (`bytes` the whole tensor: each rank ends with, or contributes, half).
struct LinkTimings {
  std::string backend;  ///< "gloo", "nccl" or "gloo-host-staging"
  struct Point {
    int64_t bytes = 0;
    double p2p_ms = 0;
    double allreduce_ms = 0;
    double reduce_scatter_ms = 0;
    double all_gather_ms = 0;
  };
  std::vector<Point> points;
};

/// The store and process groups of one rank, built once by `connect`:
///   world   all ranks, Gloo on CPU tensors: metric sums and barriers;
///   edges   per pipeline neighbour and direction one 2-rank group (activations flow through
///           one, gradients through another), so that a receive posted early in one direction
///           never queues behind a send in the other (NCCL runs a group's operations in order);
///           interleaved-1f1b adds the wrap edge from stage pp − 1 to stage 0 of each replica
///           (activations of chunk v to chunk v + 1, gradients back), with pp = 2 a second
///           edge between the same two ranks;
///   dp      the replicas of this rank's stage: the gradient buckets' all-reduces (ZeRO-1:
///           reduce-scatters) and ZeRO-1's parameter all-gathers;
///   ties    per tied parameter held by several stages, those stages of this replica: the sum
///           of its gradient;
///   tp      with tensor parallelism, the tp ranks running this stage of this replica: the
///           split layers' all-reduces (models/tensor_parallel.h).
/// With tensor parallelism each tp rank r of a stage has its own pipeline (the edges to rank r of
/// the neighbouring stages), dp group (rank r of every replica) and tie groups.
/// Every group does one tiny operation when created, in an order without cycles (world, the
/// edges in pipeline order with the wrap edge last, dp, ties in model order, tp), so that lazily
/// initialised NCCL communicators never wait on a peer that is blocked in the schedule. Transfers
/// of one group are told apart by a tag from the chunk and micro-batch. Not thread-safe.
class Comm {
 public:
  /// Rendezvous through connect_store (what: the plan's hash) and creation of the groups of
  /// `env.rank` in `plan`; `tie_stages` (executor::tie_stages) says which stages sum each tied
  /// parameter's gradient. Every blocking call waits at most `timeout`; a peer
  /// that does not show up or fails ends with Error(kRuntime) saying which and what to check.
  static std::unique_ptr<Comm> connect(const RendezvousEnv& env, const Plan& plan,
                                       const torch::Device& device,
                                       std::chrono::milliseconds timeout,
                                       const std::vector<std::vector<int>>& tie_stages = {});
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  /// This process's RANK.
  int rank() const;

  /// Posts the receive `action` (kRecvActivation or kRecvGradient of its chunk and micro-batch,
  /// from neighbour action.peer) into a new tensor of `shape` and `dtype`. At most a few
  /// receives of each kind should be outstanding (they hold their buffers).
  void post_recv(const Action& action, const std::vector<int64_t>& shape, torch::Dtype dtype);
  /// Waits for the receive `action` posted earlier; returns it on this rank's device.
  torch::Tensor wait_recv(const Action& action);
  /// Starts the send `action` (kSendActivation or kSendGradient to neighbour action.peer) of
  /// `tensor`; the transfer completes in the background and is waited by wait_sends.
  void send(const Action& action, const torch::Tensor& tensor);
  /// Waits for the oldest sends until at most `keep_outstanding` are still outstanding (0: all),
  /// so that a rank never holds more than that many sent tensors alive.
  void wait_sends(int keep_outstanding = 0);

  /// This rank's replica index in [0, dp) and the plan's dp: its place in the dp group.
  int replica() const;
  int dp() const;
  /// Starts `op` over the stage's replicas on `slice`, a 1-D view into this stage's flat
  /// gradients (kAllReduce: the sum; kReduceScatter: the sum of piece replica() of
  /// shard_pieces(slice.numel(), dp)) or flat parameters (kAllGather: every piece its owner's
  /// values). The result is in `slice` once finish_buckets returns; `slice` must not change
  /// until then. Every replica starts the same buckets in the same order. May be called from an
  /// autograd hook while this rank's thread is inside the backward. No-op for dp = 1.
  void start_bucket(BucketOp op, const torch::Tensor& slice);
  /// Waits for every bucket started, in the order started, and puts the results in place.
  void finish_buckets();

  /// Sums `gradient` (tied parameter `tie`'s, a view into the flat gradients) in place over the
  /// stages of this replica that hold it; no-op where this rank's stage holds it alone or not.
  void sum_over_tie(size_t tie, const torch::Tensor& gradient);
  /// Whether sum_over_tie(tie, ...) sums with other stages here (this stage and another hold it).
  bool sums_tie(size_t tie) const;

  /// Sums `tensor` (contiguous, on this rank's device) in place over this rank's tensor-parallel
  /// group and waits for it; no-op without tensor parallelism.
  void tp_all_reduce(torch::Tensor& tensor);

  /// Starts summing the CPU float64 tensor `values` element-wise over all ranks, in place.
  /// One sum at a time; every rank must start the same sums in the same order.
  void start_world_sum(const torch::Tensor& values);
  /// Waits for the sum started last (no-op when none is pending).
  void finish_world_sum();
  /// Sums like start_world_sum and waits for it; may run while a started sum is pending.
  void world_sum(const torch::Tensor& values);
  /// Waits until every rank has reached the barrier.
  void barrier();

  /// The rendezvous store (an in-process map for a single process); get blocks until the key is
  /// set, at most the timeout.
  void store_set(const std::string& key, const std::string& value);
  std::string store_get(const std::string& key);

 private:
  struct Impl;
  explicit Comm(std::unique_ptr<Impl> impl);
  friend LinkTimings time_links(const RendezvousEnv& env, const torch::Device& device,
                                const std::vector<int64_t>& sizes, int repeats,
                                std::chrono::milliseconds timeout);
  std::unique_ptr<Impl> impl_;
};

/// Runs `job->run()`; when it throws, leaks `job` instead of destroying it and lets the exception
/// go on: the process groups it holds could wait in their destructors for a collective that a
/// failed peer never finishes, while the process should report the error and exit at once.
template <typename Job>
void run_leaking_on_failure(std::unique_ptr<Job> job) {
  try {
    job->run();
  } catch (...) {
    (void)job.release();
    throw;
  }
}

/// The job's store at MASTER_ADDR:MASTER_PORT (rank 0 serves it, or torchrun's agent when
/// env.agent_store), returned once every rank has joined. `what` names what the job runs; with
/// the world size and launch id it is the job's identity (job_identity), which each rank compares
/// with rank 0's. Throws Error(kRuntime) saying what to check when a rank does not show up within
/// `timeout`, and "another job is using port P" when the port is taken or the identities differ.
/// What Comm::connect rendezvouses through, for other multi-process tools.
c10::intrusive_ptr<c10d::Store> connect_store(const RendezvousEnv& env,
                                              std::chrono::milliseconds timeout,
                                              const std::string& what);

/// Times the link between the two ranks of `env` over a TCPStore at MASTER_ADDR:MASTER_PORT.
/// Every rank must call it with the same sizes and repeats. CPU ranks use Gloo; CUDA ranks NCCL
/// when there is a GPU for each and Gloo with host staging when they share one (as Comm does).
/// `repeats` timed rounds per size after one untimed round. With WORLD_SIZE above 2 (a
/// tensor-parallel group's size) only the all-reduce over every rank is timed; the other times
/// are 0.
LinkTimings time_links(const RendezvousEnv& env, const torch::Device& device,
                       const std::vector<int64_t>& sizes, int repeats,
                       std::chrono::milliseconds timeout);

}  // namespace pipeplan::executor
