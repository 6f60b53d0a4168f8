// One rank's communication over c10d: store, process groups, transfers, all-reduces.
#include "executor/comm.h"

// LibTorch's c10d headers are gated on the flags LibTorch itself was built with; libtorch_cpu
// (and libtorch_cuda for NCCL) export these classes.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef PIPEPLAN_HAS_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/stats.h"
#include "models/torch_compat.h"
#include "models/torch_error.h"
#include "runtime/device.h"

namespace pipeplan::executor {
namespace {

using GroupPtr = c10::intrusive_ptr<compat::CommGroup>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// Gloo threads: edge groups only do point-to-point (done by Gloo's device thread) and one
// warm-up; the dp group runs several bucket all-reduces at once.
constexpr int kEdgeGroupThreads = 1;
constexpr int kWorldGroupThreads = 1;
constexpr int kDpGroupThreads = 2;
// Bucket tags (BucketCollective's ring multiplies them by dp) wrap long before int does; a tag
// is reused only after this many more buckets, long after its transfers are done.
constexpr int kRingTagPeriod = 1 << 20;
// time_links' reduce-scatter rings are tagged from here, apart from its send/recv tags.
constexpr int kLinkRingTagBase = 1 << 24;
// How long a rank waits for Gloo's worker to let go of a finished tensor-parallel all-reduce.
constexpr auto kWorkReleaseWait = std::chrono::milliseconds(100);
// How often a rank looks at the store while waiting for the others to join.
constexpr auto kJoinPollInterval = std::chrono::milliseconds(10);

// Waits for `work`, at most `timeout` (none: c10d's own default); a failure or timeout becomes
// one Error(kRuntime) line that starts with `describe()` (only called on failure).
template <typename Describe>
void wait_work(const WorkPtr& work, std::optional<std::chrono::milliseconds> timeout,
               Describe&& describe) {
  bool completed = false;
  try {
    completed = timeout ? work->wait(*timeout) : work->wait();
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime,
                detail::concat(describe(), " failed: ", models::error_line(e),
                               " (a peer rank failed or timed out; see its error)"));
  }
  PIPEPLAN_RUNTIME_CHECK(completed, describe(), " timed out after ",
                         timeout ? timeout->count() / 1000 : 0,
                         " s (a peer rank is stuck or gone; raise --timeout-s if it is slow)");
}

// Rank 0 records the job's identity; every other rank compares its own with it. A rank of another
// job that reached this store through the same MASTER_PORT stops here naming the clash, before it
// counts itself in or touches a key this job uses.
void check_same_job(c10d::Store& store, const RendezvousEnv& env, const std::string& identity) {
  const std::string key = "pipeplan/job";
  if (env.rank == 0) {
    store.set(key, std::vector<uint8_t>(identity.begin(), identity.end()));
    return;
  }
  const std::vector<uint8_t> value = store.get(key);
  const std::string recorded(value.begin(), value.end());
  PIPEPLAN_RUNTIME_CHECK(recorded == identity, "rendezvous at ", env.master_addr, ":",
                         env.master_port, ": another job is using port ", env.master_port,
                         " (its rank 0 runs ", quote(recorded), "; this rank runs ",
                         quote(identity), "); give each job its own MASTER_PORT "
                         "(pipeplan launch --master-port)");
}

// Every rank counts itself in; all wait until the count is complete, so that a missing rank is
// named here (and not as a socket timeout inside the first process group).
void wait_for_all_ranks(c10d::Store& store, const RendezvousEnv& env,
                        std::chrono::milliseconds timeout) {
  const std::string key = "pipeplan/joined";
  // More ranks than WORLD_SIZE: another job of the same identity (no launch id) shares the port.
  PIPEPLAN_RUNTIME_CHECK(store.add(key, 1) <= env.world_size, "rendezvous at ", env.master_addr,
                         ":", env.master_port, ": more than WORLD_SIZE=", env.world_size,
                         " ranks joined; another job is using port ", env.master_port,
                         "; give each job its own MASTER_PORT (pipeplan launch --master-port)");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int64_t joined = store.add(key, 0); joined < env.world_size; joined = store.add(key, 0)) {
    PIPEPLAN_RUNTIME_CHECK(std::chrono::steady_clock::now() < deadline, "rendezvous at ",
                           env.master_addr, ":", env.master_port, ": only ", joined, " of ",
                           env.world_size, " ranks joined within ", timeout.count() / 1000,
                           " s (start every rank with the same MASTER_ADDR, MASTER_PORT and "
                           "WORLD_SIZE, or raise --timeout-s)");
    std::this_thread::sleep_for(kJoinPollInterval);
  }
}

// Why creating or joining the store failed, on one line with what to check.
std::string rendezvous_failure(const RendezvousEnv& env, std::chrono::milliseconds timeout,
                               const std::exception& e) {
  const std::string where = detail::concat(env.master_addr, ":", env.master_port);
  const std::string what = models::error_line(e);
  if (what.find(std::strerror(EADDRINUSE)) != std::string::npos)
    return detail::concat("rendezvous of rank ", env.rank, " at ", where, ": port ",
                          env.master_port, " is already in use (another job is using port ",
                          env.master_port, ", or another program); give each job its own "
                          "MASTER_PORT (pipeplan launch --master-port)");
  return detail::concat("rendezvous of rank ", env.rank, " at ", where, " failed within ",
                        timeout.count() / 1000, " s: ", what, " (check that all ",
                        env.world_size, " ranks were started with the same MASTER_ADDR and ",
                        "MASTER_PORT)");
}

// Rank 0 serves the store, unless torchrun's agent already does (env.agent_store): then every
// rank is a client and works under the agent's worker prefix.
StorePtr make_store(const RendezvousEnv& env, std::chrono::milliseconds timeout,
                    const std::string& what) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0 && !env.agent_store;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  try {
    StorePtr store = compat::make_tcp_store(env.master_addr, options);
    if (env.agent_store)
      store = c10::make_intrusive<c10d::PrefixStore>(agent_store_prefix(env.restart_count), store);
    check_same_job(*store, env, job_identity(env, what));
    wait_for_all_ranks(*store, env, timeout);
    return store;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, rendezvous_failure(env, timeout, e));
  }
}

// Where Gloo binds: the interface GLOO_SOCKET_IFNAME names; the loopback address when rank 0's
// store is on this machine (all ranks are: works in sandboxes without a resolvable hostname);
// otherwise this machine's hostname, as torch.distributed does.
std::shared_ptr<::gloo::transport::Device> make_gloo_device(const RendezvousEnv& env) {
  if (!env.gloo_socket_ifname.empty())
    return c10d::ProcessGroupGloo::createDeviceForInterface(env.gloo_socket_ifname);
  if (is_loopback_address(env.master_addr))
    return c10d::ProcessGroupGloo::createDeviceForHostname(env.master_addr);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

// One posted receive: its buffer, where it goes on this device, and its Work.
struct PostedRecv {
  int chunk = 0;
  int micro_batch = -1;
  int peer = -1;
  torch::Tensor buffer;
  WorkPtr work;
};

// One started bucket collective and, when it runs on a host copy, the device slice it came from.
struct StartedBucket {
  BucketCollective collective;
  torch::Tensor device_slice;  // undefined unless staged through the host
};

// One started send; holds the tensor until the transfer is done.
struct StartedSend {
  torch::Tensor tensor;
  WorkPtr work;
  int chunk = 0;
  int micro_batch = -1;
  ActionKind kind = ActionKind::kSendActivation;
};

struct Comm::Impl {
  RendezvousEnv env;
  CommBackend backend = CommBackend::kSingleProcess;
  torch::Device device = torch::kCPU;
  std::chrono::milliseconds timeout{0};
  StorePtr store;
  std::shared_ptr<::gloo::transport::Device> gloo_device;
  GroupPtr world;
  // Edge groups; in each the stage activations leave is group rank 0, the one they enter group
  // rank 1 (interleaved-1f1b's wrap edge: stage pp − 1 then stage 0).
  GroupPtr act_from_prev, grad_to_prev, act_to_next, grad_from_next;
  int pp = 1;
  int stage = 0;
  int virtual_stages = 1;
  GroupPtr dp;
  int dp_size = 1;
  int replica = 0;
  std::vector<StartedBucket> buckets;
  int bucket_tag = 0;          // the ring's tags: one per started bucket, the same on every replica
  std::vector<GroupPtr> ties;  // by tie; null where this rank does not sum it
  GroupPtr tp;                 // the stage's tensor-parallel group; null without one
  int prev_rank = -1;
  int next_rank = -1;
  std::vector<PostedRecv> posted[2];  // [0] activations, [1] gradients
  std::vector<StartedSend> sends;
  std::vector<at::Tensor> one_tensor{at::Tensor()};
  WorkPtr world_sum_work;
  std::map<std::string, std::string> local_store;  // single process only

  bool stages_via_host() const { return backend == CommBackend::kGlooHostStaging; }
  // NCCL's wait with a timeout polls the CPU in 1 ms sleeps; without one it only orders the
  // current stream after the transfer, and NCCL's watchdog ends a transfer stuck past the
  // group's timeout. Gloo waits block the CPU, bounded by the timeout.
  std::optional<std::chrono::milliseconds> device_wait_timeout() const {
    if (backend == CommBackend::kNccl) return std::nullopt;
    return timeout;
  }
  torch::Device transfer_device() const {
    return backend == CommBackend::kNccl ? device : torch::Device(torch::kCPU);
  }
  GroupPtr make_group(const std::string& prefix, int group_rank, int group_size, bool on_host,
                      int gloo_threads) const;
  void warm_up_edge(const GroupPtr& group, int group_rank, bool sender, const std::string& what) const;
  void warm_up_all_reduce(const GroupPtr& group, const std::string& what) const;
  void connect_edge(const std::string& edge, bool from_prev);
  void create_groups(const Plan& plan, const std::vector<std::vector<int>>& tie_stages);
  int tag(const Action& action) const;
};

GroupPtr Comm::Impl::make_group(const std::string& prefix, int group_rank, int group_size,
                                bool on_host, int gloo_threads) const {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  try {
#ifdef PIPEPLAN_HAS_CUDA
    if (!on_host && backend == CommBackend::kNccl) {
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      return c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, group_rank, group_size, options);
    }
#endif
    (void)on_host;
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices = {gloo_device};
    options->threads = gloo_threads;
    return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, group_rank, group_size, options);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, detail::concat("rank ", env.rank, ": creating process group '",
                                                    prefix, "' failed: ", models::error_line(e),
                                                    " (a peer rank failed or never started)"));
  }
}

// One tiny transfer in the direction the edge group carries.
void Comm::Impl::warm_up_edge(const GroupPtr& group, int group_rank, bool sender,
                              const std::string& what) const {
  std::vector<at::Tensor> tensors{torch::zeros({1}, torch::TensorOptions().device(transfer_device()))};
  const int peer = 1 - group_rank;
  const WorkPtr work = sender ? group->send(tensors, peer, /*tag=*/0) : group->recv(tensors, peer, /*tag=*/0);
  wait_work(work, device_wait_timeout(),
            [&] { return detail::concat("rank ", env.rank, ": connecting ", what); });
}

// One tiny all-reduce over the group.
void Comm::Impl::warm_up_all_reduce(const GroupPtr& group, const std::string& what) const {
  std::vector<at::Tensor> tensors{torch::zeros({1}, torch::TensorOptions().device(transfer_device()))};
  wait_work(group->allreduce(tensors), device_wait_timeout(),
            [&] { return detail::concat("rank ", env.rank, ": connecting ", what); });
}

// One edge's two groups. The edge activations enter this rank by (`from_prev`, as group rank 1):
// activations in, gradients out; the one they leave it by (group rank 0): the reverse.
void Comm::Impl::connect_edge(const std::string& edge, bool from_prev) {
  const int group_rank = from_prev ? 1 : 0;
  const std::string peer = " rank " + std::to_string(from_prev ? prev_rank : next_rank);
  GroupPtr& activations = from_prev ? act_from_prev : act_to_next;
  GroupPtr& gradients = from_prev ? grad_to_prev : grad_from_next;
  activations = make_group("act/" + edge, group_rank, 2, /*on_host=*/false, kEdgeGroupThreads);
  warm_up_edge(activations, group_rank, /*sender=*/!from_prev,
               (from_prev ? "activations from" : "activations to") + peer);
  gradients = make_group("grad/" + edge, group_rank, 2, /*on_host=*/false, kEdgeGroupThreads);
  warm_up_edge(gradients, group_rank, /*sender=*/from_prev,
               (from_prev ? "gradients to" : "gradients from") + peer);
}

// Edges are created in one order on every rank, edge s -> s + 1 for s = 0 .. pp − 2 and then
// the wrap edge pp − 1 -> 0 (interleaved-1f1b), so that no rank waits in a group's creation for
// a peer that waits in another: with pp = 2 both ranks make edge s0, then the wrap edge.
void Comm::Impl::create_groups(const Plan& plan,
                                const std::vector<std::vector<int>>& tie_stages) {
  const RankAssignment& me = plan.ranks.at(env.rank);
  replica = me.replica;
  pp = plan.pp;
  stage = me.stage;
  virtual_stages = plan.virtual_stages;
  world = make_group("world", env.rank, env.world_size, /*on_host=*/true, kWorldGroupThreads);
  // Tensor parallelism: tp rank r's pipeline, replicas and ties are groups of their own.
  const std::string tp_suffix = plan.tp() > 1 ? "t" + std::to_string(me.tp_rank) : "";
  const std::string replica = "r" + std::to_string(me.replica) + tp_suffix;
  const bool wraps = plan.virtual_stages > 1;
  if (me.stage > 0 || wraps)
    prev_rank = rank_of(plan, (me.stage + pp - 1) % pp, me.replica, me.tp_rank);
  if (me.stage < pp - 1 || wraps)
    next_rank = rank_of(plan, (me.stage + 1) % pp, me.replica, me.tp_rank);
  if (me.stage > 0) connect_edge(replica + "/s" + std::to_string(me.stage - 1), true);
  if (me.stage < pp - 1) connect_edge(replica + "/s" + std::to_string(me.stage), false);
  if (wraps && me.stage == 0) connect_edge(replica + "/wrap", true);
  if (wraps && me.stage == pp - 1) connect_edge(replica + "/wrap", false);
  if (plan.dp > 1) {
    dp_size = plan.dp;
    dp = make_group("dp/s" + std::to_string(me.stage) + tp_suffix, me.replica, plan.dp,
                    /*on_host=*/false, kDpGroupThreads);
    warm_up_all_reduce(dp, "the replicas of stage " + std::to_string(me.stage));
  }
  for (size_t tie = 0; tie < tie_stages.size(); ++tie) {
    ties.emplace_back();
    const std::vector<int>& stages = tie_stages[tie];
    const auto mine = std::find(stages.begin(), stages.end(), me.stage);
    if (stages.size() < 2 || mine == stages.end()) continue;
    ties.back() = make_group("tie" + std::to_string(tie) + "/" + replica,
                             static_cast<int>(mine - stages.begin()),
                             static_cast<int>(stages.size()), /*on_host=*/false, kDpGroupThreads);
    warm_up_all_reduce(ties.back(), "the stages that hold tied parameter " + std::to_string(tie));
  }
  if (plan.tp() > 1) {
    tp = make_group("tp/s" + std::to_string(me.stage) + "r" + std::to_string(me.replica),
                    me.tp_rank, plan.tp(), /*on_host=*/false, kEdgeGroupThreads);
    warm_up_all_reduce(tp, "the tensor-parallel group of stage " + std::to_string(me.stage));
  }
}

Comm::Comm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Comm::~Comm() = default;

std::unique_ptr<Comm> Comm::connect(const RendezvousEnv& env, const Plan& plan,
                                    const torch::Device& device,
                                    std::chrono::milliseconds timeout,
                                    const std::vector<std::vector<int>>& tie_stages) {
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->backend = choose_backend(plan);
  impl->device = device;
  impl->timeout = timeout;
  if (!env.single_process()) {
    impl->store = make_store(env, timeout, "pipeplan train of plan " + plan_hash(plan));
    impl->gloo_device = make_gloo_device(env);
    impl->create_groups(plan, tie_stages);
  }
  return std::unique_ptr<Comm>(new Comm(std::move(impl)));
}

int Comm::rank() const { return impl_->env.rank; }

namespace {

const char* boundary_name(ActionKind kind) {
  const bool activation = kind == ActionKind::kRecvActivation || kind == ActionKind::kSendActivation;
  return activation ? "activation" : "gradient";
}

// " of local chunk v" for a local chunk above 0 (interleaved-1f1b), else "".
std::string chunk_suffix(int chunk) {
  return chunk > 0 ? detail::concat(" of local chunk ", chunk) : std::string();
}

}  // namespace

// A transfer's Gloo tag (NCCL matches by order alone). The boundary between global chunks c and
// c + 1 is named by c; the pair of stages and the direction (the group) fix c mod pp, so c / pp
// tells a group's boundaries apart and both ends compute it: tag = micro-batch · V + c / pp
// (the micro-batch itself when V = 1).
int Comm::Impl::tag(const Action& action) const {
  const int global_chunk = chunk_index(pp, stage, action.chunk);
  const bool from_below =
      action.kind == ActionKind::kRecvActivation || action.kind == ActionKind::kSendGradient;
  const int boundary = from_below ? global_chunk - 1 : global_chunk;
  PIPEPLAN_ASSERT(boundary >= 0, "no boundary below the model's first chunk at ",
                  to_string(action));
  const int64_t tag = static_cast<int64_t>(action.micro_batch) * virtual_stages + boundary / pp;
  PIPEPLAN_ASSERT(tag <= std::numeric_limits<int>::max(), "tag of ", to_string(action),
                  " beyond 32 bits");
  return static_cast<int>(tag);
}

void Comm::post_recv(const Action& action, const std::vector<int64_t>& shape, torch::Dtype dtype) {
  Impl& d = *impl_;
  const bool activation = action.kind == ActionKind::kRecvActivation;
  PIPEPLAN_ASSERT(activation || action.kind == ActionKind::kRecvGradient);
  PIPEPLAN_ASSERT(action.peer == (activation ? d.prev_rank : d.next_rank), "receive from rank ",
                  action.peer, " which is not a neighbour");
  PostedRecv posted;
  posted.chunk = action.chunk;
  posted.micro_batch = action.micro_batch;
  posted.peer = action.peer;
  posted.buffer = torch::empty(shape, torch::TensorOptions().dtype(dtype).device(d.transfer_device()));
  d.one_tensor[0] = posted.buffer;
  // Activations leave by group rank 0 and enter by group rank 1.
  posted.work = activation ? d.act_from_prev->recv(d.one_tensor, /*srcRank=*/0, d.tag(action))
                           : d.grad_from_next->recv(d.one_tensor, /*srcRank=*/1, d.tag(action));
  d.posted[activation ? 0 : 1].push_back(std::move(posted));
}

torch::Tensor Comm::wait_recv(const Action& action) {
  Impl& d = *impl_;
  std::vector<PostedRecv>& posted = d.posted[action.kind == ActionKind::kRecvActivation ? 0 : 1];
  auto it = posted.begin();
  while (it != posted.end() && (it->micro_batch != action.micro_batch || it->chunk != action.chunk))
    ++it;
  PIPEPLAN_ASSERT(it != posted.end(), "no receive posted for ", to_string(action));
  wait_work(it->work, d.device_wait_timeout(), [&] {
    return detail::concat("rank ", d.env.rank, ": receiving the ", boundary_name(action.kind),
                          " of micro-batch ", action.micro_batch, chunk_suffix(action.chunk),
                          " from rank ", it->peer);
  });
  torch::Tensor tensor = std::move(it->buffer);
  posted.erase(it);
  return d.stages_via_host() ? tensor.to(d.device) : tensor;
}

void Comm::send(const Action& action, const torch::Tensor& tensor) {
  Impl& d = *impl_;
  const bool activation = action.kind == ActionKind::kSendActivation;
  PIPEPLAN_ASSERT(activation || action.kind == ActionKind::kSendGradient);
  PIPEPLAN_ASSERT(action.peer == (activation ? d.next_rank : d.prev_rank), "send to rank ",
                  action.peer, " which is not a neighbour");
  StartedSend started;
  started.tensor = d.stages_via_host() ? tensor.to(torch::kCPU) : tensor.contiguous();
  started.chunk = action.chunk;
  started.micro_batch = action.micro_batch;
  started.kind = action.kind;
  d.one_tensor[0] = started.tensor;
  started.work = activation ? d.act_to_next->send(d.one_tensor, /*dstRank=*/1, d.tag(action))
                            : d.grad_to_prev->send(d.one_tensor, /*dstRank=*/0, d.tag(action));
  d.sends.push_back(std::move(started));
}

void Comm::wait_sends(int keep_outstanding) {
  Impl& d = *impl_;
  const size_t keep = static_cast<size_t>(std::max(keep_outstanding, 0));
  if (d.sends.size() <= keep) return;
  const size_t done = d.sends.size() - keep;
  for (size_t idx = 0; idx < done; ++idx) {
    const StartedSend& started = d.sends[idx];
    const int peer = started.kind == ActionKind::kSendActivation ? d.next_rank : d.prev_rank;
    wait_work(started.work, d.device_wait_timeout(), [&] {
      return detail::concat("rank ", d.env.rank, ": sending the ", boundary_name(started.kind),
                            " of micro-batch ", started.micro_batch, chunk_suffix(started.chunk),
                            " to rank ", peer);
    });
  }
  d.sends.erase(d.sends.begin(), d.sends.begin() + static_cast<std::ptrdiff_t>(done));
}

int Comm::replica() const { return impl_->replica; }
int Comm::dp() const { return impl_->dp_size; }

void Comm::start_bucket(BucketOp op, const torch::Tensor& slice) {
  Impl& d = *impl_;
  if (!d.dp) return;
  const int tag = d.bucket_tag;
  d.bucket_tag = (d.bucket_tag + 1) % kRingTagPeriod;
  const bool via_host = d.stages_via_host();
  torch::Tensor buffer = via_host ? slice.to(torch::kCPU) : slice;
  d.buckets.push_back(
      StartedBucket{BucketCollective(op, d.dp, d.replica, d.dp_size, std::move(buffer),
                                     /*ring=*/d.backend != CommBackend::kNccl, tag),
                    via_host ? slice : torch::Tensor()});
}

void Comm::finish_buckets() {
  Impl& d = *impl_;
  const auto wait = [&](const WorkPtr& work) {
    wait_work(work, d.device_wait_timeout(), [&] {
      return detail::concat("rank ", d.env.rank, ": exchanging gradient or parameter buckets with ",
                            "the other ", d.dp_size - 1, " replicas of stage ", d.stage);
    });
  };
  for (StartedBucket& bucket : d.buckets) {
    bucket.collective.finish(wait);
    if (bucket.device_slice.defined()) bucket.device_slice.copy_(bucket.collective.tensor());
  }
  d.buckets.clear();
}

void Comm::sum_over_tie(size_t tie, const torch::Tensor& gradient) {
  Impl& d = *impl_;
  if (tie >= d.ties.size() || !d.ties[tie]) return;
  d.one_tensor[0] = d.stages_via_host() ? gradient.to(torch::kCPU) : gradient;
  wait_work(d.ties[tie]->allreduce(d.one_tensor), d.device_wait_timeout(), [&] {
    return detail::concat("rank ", d.env.rank, ": summing the gradient of tied parameter ", tie);
  });
  if (d.stages_via_host()) gradient.copy_(d.one_tensor[0]);
}

bool Comm::sums_tie(size_t tie) const { return tie < impl_->ties.size() && impl_->ties[tie]; }

void Comm::tp_all_reduce(torch::Tensor& tensor) {
  Impl& d = *impl_;
  if (!d.tp) return;
  PIPEPLAN_ASSERT(tensor.is_contiguous(), "tensor-parallel all-reduce of a strided tensor");
  std::vector<at::Tensor> tensors{d.stages_via_host() ? tensor.to(torch::kCPU) : tensor};
  WorkPtr work = d.tp->allreduce(tensors);
  wait_work(work, d.device_wait_timeout(), [&] {
    return detail::concat("rank ", d.env.rank,
                          ": summing a split layer's output or gradient "
                          "over its tensor-parallel group");
  });
  if (d.stages_via_host()) tensor.copy_(tensors[0]);
  // Gloo's worker thread lets go of a finished work a moment after wait() returns. Were its
  // reference the last, the tensors the work holds would be freed on that thread, which the
  // memory tracker does not watch: the measured peak then grew step by step (by 7.8 MiB in 10
  // steps of gpt_tiny at tp = 2). Waiting for it makes this thread free them.
  if (d.backend != CommBackend::kNccl) {
    const auto deadline = std::chrono::steady_clock::now() + kWorkReleaseWait;
    while (work.use_count() > 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  }
}

void Comm::start_world_sum(const torch::Tensor& values) {
  Impl& d = *impl_;
  PIPEPLAN_ASSERT(values.device().is_cpu() && !d.world_sum_work, "one world sum at a time");
  if (!d.world) return;
  d.one_tensor[0] = values;
  d.world_sum_work = d.world->allreduce(d.one_tensor);
}

void Comm::finish_world_sum() {
  Impl& d = *impl_;
  if (!d.world_sum_work) return;
  const WorkPtr work = std::move(d.world_sum_work);
  d.world_sum_work.reset();
  wait_work(work, d.timeout, [&] { return detail::concat("rank ", d.env.rank, ": summing metrics"); });
}

// Independent of a pending start_world_sum: Gloo runs a group's collectives in the order they
// were started, the same on every rank.
void Comm::world_sum(const torch::Tensor& values) {
  Impl& d = *impl_;
  PIPEPLAN_ASSERT(values.device().is_cpu());
  if (!d.world) return;
  d.one_tensor[0] = values;
  wait_work(d.world->allreduce(d.one_tensor), d.timeout,
            [&] { return detail::concat("rank ", d.env.rank, ": summing over all ranks"); });
}

void Comm::barrier() {
  Impl& d = *impl_;
  if (!d.world) return;
  wait_work(d.world->barrier(), d.timeout,
            [&] { return detail::concat("rank ", d.env.rank, ": waiting for all ranks"); });
}

void Comm::store_set(const std::string& key, const std::string& value) {
  Impl& d = *impl_;
  if (!d.store) {
    d.local_store[key] = value;
    return;
  }
  try {
    d.store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, detail::concat("rank ", d.env.rank, ": store set '", key,
                                                    "' failed: ", models::error_line(e)));
  }
}

std::string Comm::store_get(const std::string& key) {
  Impl& d = *impl_;
  if (!d.store) {
    auto it = d.local_store.find(key);
    PIPEPLAN_ASSERT(it != d.local_store.end(), "store key ", key, " was never set");
    return it->second;
  }
  try {
    const std::vector<uint8_t> value = d.store->get(key);
    return std::string(value.begin(), value.end());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime,
                detail::concat("rank ", d.env.rank, ": waiting for '", key,
                               "' from another rank failed: ", models::error_line(e),
                               " (that rank failed or timed out; see its error)"));
  }
}

c10::intrusive_ptr<c10d::Store> connect_store(const RendezvousEnv& env,
                                              std::chrono::milliseconds timeout,
                                              const std::string& what) {
  return make_store(env, timeout, what);
}

LinkTimings time_links(const RendezvousEnv& env, const torch::Device& device,
                       const std::vector<int64_t>& sizes, int repeats,
                       std::chrono::milliseconds timeout) {
  PIPEPLAN_CHECK(env.world_size >= 2, "timing a link needs WORLD_SIZE of 2 or more, not ",
                 env.world_size);
  const int ranks = env.world_size;
  PIPEPLAN_ASSERT(repeats >= 1 && !sizes.empty());
  // The link is timed with the groups a run makes: a two-rank edge group (or a tensor-parallel
  // group of every rank) of this device's backend, transfers through the host when the ranks
  // share one GPU.
  Comm::Impl d;
  d.env = env;
  d.device = device;
  d.timeout = timeout;
  d.backend = !device.is_cuda() ? CommBackend::kGloo
              : static_cast<int>(torch::cuda::device_count()) >= ranks
                  ? CommBackend::kNccl
                  : CommBackend::kGlooHostStaging;
  d.store = make_store(env, timeout, "pipeplan link-bench");
  d.gloo_device = make_gloo_device(env);
  const GroupPtr group =
      d.make_group("link", env.rank, ranks, /*on_host=*/false, kEdgeGroupThreads);
  auto wait = [&](const WorkPtr& work, const char* what, int64_t bytes) {
    wait_work(work, d.device_wait_timeout(), [&] {
      return detail::concat("rank ", env.rank, ": timing ", what, " of ", bytes, " bytes");
    });
  };
  auto ms_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  // Half a ping-pong of `tensor` (on `device`): rank 0 sends, rank 1 sends it back.
  auto p2p_ms = [&](torch::Tensor& tensor, int tag) {
    const int peer = 1 - env.rank;  // two ranks only
    const int64_t bytes = tensor.numel() * tensor.element_size();
    runtime::synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    for (int leg = 0; leg < 2; ++leg) {
      const bool sending = (leg == 0) == (env.rank == 0);
      std::vector<at::Tensor> buffer{d.stages_via_host() ? tensor.to(torch::kCPU) : tensor};
      wait(sending ? group->send(buffer, peer, tag) : group->recv(buffer, peer, tag),
           "a send/recv", bytes);
      if (!sending && d.stages_via_host()) tensor.copy_(buffer[0]);
      runtime::synchronize(device);
    }
    return ms_since(start) / 2;
  };
  auto allreduce_ms = [&](torch::Tensor& tensor) {
    const int64_t bytes = tensor.numel() * tensor.element_size();
    std::vector<at::Tensor> one{
        torch::zeros({1}, torch::TensorOptions().device(d.transfer_device()))};
    wait(group->allreduce(one), "a start-line all-reduce", 4);  // both ranks start together
    runtime::synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> buffer{d.stages_via_host() ? tensor.to(torch::kCPU) : tensor};
    wait(group->allreduce(buffer), "an all-reduce", bytes);
    if (d.stages_via_host()) tensor.copy_(buffer[0]);
    runtime::synchronize(device);
    return ms_since(start);
  };
  // ZeRO-1's collectives as Comm runs them (start_bucket, finish_buckets) on the whole tensor.
  int ring_tag = kLinkRingTagBase;
  auto bucket_ms = [&](torch::Tensor& tensor, BucketOp op, const char* what) {
    const int64_t bytes = tensor.numel() * tensor.element_size();
    std::vector<at::Tensor> one{
        torch::zeros({1}, torch::TensorOptions().device(d.transfer_device()))};
    wait(group->allreduce(one), "a start-line all-reduce", 4);
    runtime::synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    BucketCollective collective(op, group, env.rank, 2,
                                d.stages_via_host() ? tensor.to(torch::kCPU) : tensor,
                                /*ring=*/d.backend != CommBackend::kNccl, ring_tag++);
    collective.finish([&](const WorkPtr& work) { wait(work, what, bytes); });
    if (d.stages_via_host()) tensor.copy_(collective.tensor());
    runtime::synchronize(device);
    return ms_since(start);
  };
  LinkTimings timings;
  timings.backend = to_string(d.backend);
  int tag = 0;
  for (int64_t bytes : sizes) {
    PIPEPLAN_CHECK(bytes >= 4 && bytes % 4 == 0, "message size ", bytes,
                   " bytes is not a positive multiple of 4");
    torch::Tensor tensor = torch::ones({bytes / 4}, torch::TensorOptions().device(device));
    std::vector<double> p2p_samples, allreduce_samples, reduce_scatter_samples, all_gather_samples;
    // Untimed rounds first; more before the first size, whose first messages also set up the
    // connection, which would otherwise inflate the fitted latency
    // (bench/history/2026-11-22-sessions-1-3.md).
    const int untimed = bytes == sizes.front() ? 5 : 1;
    const bool pair = ranks == 2;
    for (int round = 0; round < untimed + repeats; ++round) {
      const double p2p = pair ? p2p_ms(tensor, tag++) : 0;
      const double allreduce = allreduce_ms(tensor);
      const double reduce_scatter =
          pair ? bucket_ms(tensor, BucketOp::kReduceScatter, "a reduce-scatter") : 0;
      const double all_gather = pair ? bucket_ms(tensor, BucketOp::kAllGather, "an all-gather") : 0;
      tensor.fill_(1);  // keep the summed values finite
      if (round < untimed) continue;
      p2p_samples.push_back(p2p);
      allreduce_samples.push_back(allreduce);
      reduce_scatter_samples.push_back(reduce_scatter);
      all_gather_samples.push_back(all_gather);
    }
    timings.points.push_back({bytes, median(p2p_samples), median(allreduce_samples),
                              median(reduce_scatter_samples), median(all_gather_samples)});
  }
  return timings;
}

}  // namespace pipeplan::executor
