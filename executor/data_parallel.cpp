// Data parallelism of a stage: the flat buffers' gradient buckets, their collectives started
// from gradient-accumulator hooks, ZeRO-1's shard and all-gather.
#include "executor/data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <limits>
#include <unordered_set>
#include <utility>

#include "common/error.h"
#include "plans/buckets.h"

namespace pipeplan::executor {
namespace {

// What the flat buffers hold at one layer: elements [begin, end) (begin == end when the layer
// holds none), the bytes of its trainable gradients and those parameters.
struct LayerSpan {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t gradient_bytes = 0;
  std::vector<torch::Tensor> trainable;
};

// The flat layout read off the parameters themselves: each is a view into the flat buffer, so its
// storage offset is its place there. A parameter met again (shared by layers, or a later chunk's
// copy of a tied parameter, which reads the first copy's elements) belongs where it was first met,
// which is where StageRuntime's flattening put it: layers in order, so each layer's elements are
// contiguous and follow the previous layer's.
std::vector<LayerSpan> layer_spans(StageRuntime& stage) {
  const torch::Tensor& flat = stage.parameters();
  std::unordered_set<int64_t> seen;
  std::vector<LayerSpan> spans;
  int64_t next = 0;
  for (const models::LayerPtr& layer : stage.layers()) {
    LayerSpan span{next, next, 0, {}};
    for (const torch::Tensor& parameter : layer->parameters()) {
      PIPEPLAN_ASSERT(parameter.storage().is_alias_of(flat.storage()),
                      "a parameter outside the stage's flat buffer");
      const int64_t offset = parameter.storage_offset();
      if (!seen.insert(offset).second || parameter.numel() == 0) continue;
      PIPEPLAN_ASSERT(offset == span.end, "flat buffer not in layer order at element ", offset);
      span.end += parameter.numel();
      if (parameter.requires_grad()) {
        span.gradient_bytes += parameter.numel() * static_cast<int64_t>(sizeof(float));
        span.trainable.push_back(parameter);
      }
    }
    next = span.end;
    spans.push_back(std::move(span));
  }
  PIPEPLAN_ASSERT(next == flat.numel(), "layers hold ", next, " of ", flat.numel(), " elements");
  return spans;
}

// Local chunks in the order of their last weight-gradient action in `actions`.
std::vector<int> chunk_order(int num_chunks, const std::vector<Action>& actions) {
  std::vector<size_t> last(static_cast<size_t>(num_chunks), std::numeric_limits<size_t>::max());
  for (size_t idx = 0; idx < actions.size(); ++idx)
    if (actions[idx].kind == ActionKind::kBackward ||
        actions[idx].kind == ActionKind::kBackwardWeight)
      last.at(static_cast<size_t>(actions[idx].chunk)) = idx;
  std::vector<int> order(static_cast<size_t>(num_chunks));
  for (int chunk = 0; chunk < num_chunks; ++chunk) order[static_cast<size_t>(chunk)] = chunk;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return last[static_cast<size_t>(a)] < last[static_cast<size_t>(b)];
  });
  return order;
}

}  // namespace

std::vector<FlatBucket> flat_buckets(const Plan& plan, StageRuntime& stage,
                                     const std::vector<Action>& actions) {
  const std::vector<LayerSpan> spans = layer_spans(stage);
  // Each chunk's layers follow the previous chunk's in StageRuntime::layers().
  std::vector<int> chunk_begin{0};
  for (int chunk = 0; chunk < stage.num_chunks(); ++chunk) {
    const StagePlan& range =
        plan.stages.at(static_cast<size_t>(chunk_index(plan.pp, stage.stage(), chunk)));
    chunk_begin.push_back(chunk_begin.back() + (range.last - range.first));
  }
  PIPEPLAN_ASSERT(chunk_begin.back() == static_cast<int>(spans.size()),
                  "chunks of the plan and stage differ");
  std::vector<FlatBucket> buckets;
  for (int chunk : chunk_order(stage.num_chunks(), actions)) {
    const int first = chunk_begin[static_cast<size_t>(chunk)];
    std::vector<int64_t> bytes;
    for (int layer = first; layer < chunk_begin[static_cast<size_t>(chunk) + 1]; ++layer)
      bytes.push_back(spans[static_cast<size_t>(layer)].gradient_bytes);
    for (const GradientBucket& cut : gradient_buckets(bytes, plan.data_parallel.bucket_bytes)) {
      FlatBucket bucket;
      bucket.chunk = chunk;
      bucket.first_layer = first + cut.first;
      bucket.last_layer = first + cut.last;
      bucket.offset = spans[static_cast<size_t>(bucket.first_layer)].begin;
      bucket.elements = spans[static_cast<size_t>(bucket.last_layer) - 1].end - bucket.offset;
      bucket.gradient_bytes = cut.bytes;
      for (int layer = bucket.first_layer; layer < bucket.last_layer; ++layer)
        for (const torch::Tensor& parameter : spans[static_cast<size_t>(layer)].trainable)
          bucket.parameters.push_back(parameter);
      buckets.push_back(std::move(bucket));
    }
  }
  return buckets;
}

std::vector<runtime::FlatSegment> shard_segments(const std::vector<FlatBucket>& buckets,
                                                 StageRuntime& stage, int replica, int dp) {
  std::vector<runtime::FlatSegment> segments;
  for (const FlatBucket& bucket : buckets) {
    const ShardPieces pieces = shard_pieces(bucket.elements, dp);
    const int64_t begin = bucket.offset + pieces.begin(replica);
    const int64_t length = pieces.length(replica);
    // Empty pieces stay in: every replica's list then has one segment per bucket.
    segments.push_back(
        {stage.parameters().narrow(0, begin, length), stage.gradients().narrow(0, begin, length)});
  }
  return segments;
}

// Counts a parameter's gradient done for its bucket; returns its input unchanged.
struct ReplicaSync::Hook : torch::autograd::FunctionPostHook {
  Hook(ReplicaSync* sync, size_t bucket) : sync_(sync), bucket_(bucket) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    sync_->parameter_done(bucket_);
    return outputs;
  }
  ReplicaSync* sync_;
  size_t bucket_;
};

ReplicaSync::ReplicaSync(const Plan& plan, StageRuntime& stage, Comm& comm,
                         std::vector<FlatBucket> buckets)
    : stage_(stage),
      comm_(comm),
      buckets_(std::move(buckets)),
      overlap_(plan.dp > 1 && plan.data_parallel.overlap),
      zero_(plan.dp > 1 && plan.data_parallel.zero == 1),
      dp_(plan.dp) {
  const std::vector<torch::Tensor>& tied = stage_.tied_gradients();
  for (const FlatBucket& bucket : buckets_) {
    bool holds_tie = false;
    for (size_t tie = 0; tie < tied.size(); ++tie) {
      if (!tied[tie].defined() || !comm_.sums_tie(tie)) continue;
      const int64_t offset = tied[tie].storage_offset();
      holds_tie = holds_tie || (offset < bucket.offset + bucket.elements &&
                                bucket.offset < offset + tied[tie].numel());
    }
    ops_.push_back(zero_ && !holds_tie ? BucketOp::kReduceScatter : BucketOp::kAllReduce);
  }
  reset();
  if (!overlap_) return;
  for (size_t bucket = 0; bucket < buckets_.size(); ++bucket)
    for (const torch::Tensor& parameter : buckets_[bucket].parameters) {
      // Held, so that the graph of every backward reuses this accumulator and its hook.
      std::shared_ptr<torch::autograd::Node> accumulator =
          torch::autograd::impl::grad_accumulator(parameter);
      const uintptr_t key = accumulator->add_post_hook(std::make_unique<Hook>(this, bucket));
      hooks_.emplace_back(std::move(accumulator), key);
    }
}

ReplicaSync::~ReplicaSync() {
  for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
}

void ReplicaSync::arm(int chunk) { armed_chunk_ = chunk; }

void ReplicaSync::disarm() {
  for (size_t bucket = 0; bucket < buckets_.size(); ++bucket)
    if (buckets_[bucket].chunk == armed_chunk_) pending_[bucket] = 0;
  armed_chunk_ = -1;
  start_ready();
}

// Runs in the autograd engine while the armed pass is inside its backward; earlier
// micro-batches' passes run the hooks too, and are ignored.
void ReplicaSync::parameter_done(size_t bucket) {
  if (buckets_[bucket].chunk != armed_chunk_ || pending_[bucket] == 0) return;
  if (--pending_[bucket] == 0) start_ready();
}

void ReplicaSync::start_ready() {
  while (next_ < buckets_.size() && pending_[next_] == 0) start(next_++);
}

void ReplicaSync::start(size_t bucket) {
  const FlatBucket& b = buckets_[bucket];
  if (b.gradient_bytes == 0 || dp_ == 1) return;
  comm_.start_bucket(ops_[bucket], stage_.gradients().narrow(0, b.offset, b.elements));
}

void ReplicaSync::reset() {
  next_ = 0;
  pending_.clear();
  for (const FlatBucket& bucket : buckets_)
    pending_.push_back(static_cast<int>(bucket.parameters.size()));
}

void ReplicaSync::reduce() {
  while (next_ < buckets_.size()) start(next_++);
  comm_.finish_buckets();
  if (dp_ > 1) stage_.gradients().div_(dp_);
  reset();
}

void ReplicaSync::all_gather() {
  if (!zero_) return;
  for (const FlatBucket& bucket : buckets_)
    if (bucket.elements > 0)
      comm_.start_bucket(BucketOp::kAllGather,
                         stage_.parameters().narrow(0, bucket.offset, bucket.elements));
  comm_.finish_buckets();
}

bool ReplicaSync::gradients_finite() const {
  if (!zero_) return runtime::all_finite(stage_.gradients());
  // One sum over the shard's pieces: a NaN or Inf in any makes it non-finite.
  torch::Tensor total = torch::zeros({}, stage_.gradients().options());
  for (const FlatBucket& bucket : buckets_) {
    const ShardPieces pieces = shard_pieces(bucket.elements, dp_);
    total += stage_.gradients()
                 .narrow(0, bucket.offset + pieces.begin(comm_.replica()),
                         pieces.length(comm_.replica()))
                 .sum();
  }
  return runtime::all_finite(total);
}

}  // namespace pipeplan::executor
