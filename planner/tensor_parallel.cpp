// Tensor parallelism in the planner: the group's view of the profile and the search over tp.
#include "planner/tensor_parallel.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/error.h"
#include "common/limits.h"
#include "planner/time_model.h"

namespace pipeplan {
namespace {

// The shard of `layer` measured at `tp`, or null when the layer does not split there.
const LayerProfile* shard_at(const LayerProfile& layer, int tp) {
  for (const LayerProfile& shard : layer.tp_shards)
    if (shard.tp == tp) return &shard;
  return nullptr;
}

// `shard` with the group's all-reduces of its output added to each point's times.
LayerProfile with_all_reduces(const Profile& profile, const LayerProfile& whole,
                              const LayerProfile& shard, int tp) {
  LayerProfile layer = shard;
  layer.tp = 1;  // a layer of the group's view
  for (LayerPoint& point : layer.points) {
    const double one_ms = tensor_parallel_all_reduce_ms(profile, tp, point.output_bytes);
    const double forward_ms = whole.tp_all_reduces * one_ms;
    const double backward_ms = whole.tp_all_reduces * one_ms;
    point.fwd_ms += forward_ms;
    point.fwd_ms_p90 += forward_ms;
    point.bwd_ms += backward_ms;
    point.bwd_ms_p90 += backward_ms;
    if (point.bwd_input_ms) {
      *point.bwd_input_ms += backward_ms;
      *point.bwd_weight_ms += backward_ms;  // W runs f's backward again for the layer norms
    }
    if (point.inference_fwd_ms) {
      *point.inference_fwd_ms += forward_ms;
      *point.inference_fwd_ms_p90 += forward_ms;
    }
  }
  layer.fits = fit_points(layer.points);
  return layer;
}

// "2, 4, 8".
std::string listed(const std::vector<int>& sizes) {
  std::string text;
  for (int size : sizes) text += (text.empty() ? "" : ", ") + std::to_string(size);
  return text;
}

// Whether --dp and --pp, when given, split `devices` groups.
bool divides_groups(const SearchOptions& options, int devices) {
  return (!options.dp || devices % *options.dp == 0) && (!options.pp || devices % *options.pp == 0);
}

// The best-first order of search(): higher samples/s first; a stable sort keeps the smaller tp
// first among equals.
void sort_best_first(std::vector<Plan>& plans) {
  std::stable_sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) {
    return a.predictions.samples_per_s > b.predictions.samples_per_s;
  });
}

// The profile's all-reduce fit over `tp` ranks, or null when it measured none.
const CommProfile* measured_all_reduce(const Profile& profile, int tp) {
  if (!profile.interconnect) return nullptr;
  if (tp == profile.interconnect->ranks) return &profile.interconnect->allreduce;
  for (const GroupAllReduce& group : profile.interconnect->group_allreduce)
    if (group.ranks == tp) return &group.allreduce;
  return nullptr;
}

}  // namespace

double tensor_parallel_all_reduce_ms(const Profile& profile, int tp, int64_t bytes) {
  if (tp <= 1 || !profile.interconnect) return 0;
  if (const CommProfile* measured = measured_all_reduce(profile, tp))
    return transfer_ms(bytes, measured->bandwidth_bytes_per_s, measured->latency_ms);
  // The two-rank fit is a ring of 2 steps moving the bytes once: each step's latency is half
  // the fit's, and its bandwidth the ring's.
  const CommProfile& fit = profile.interconnect->allreduce;
  return allreduce_ms(bytes, tp, fit.bandwidth_bytes_per_s, fit.latency_ms / 2);
}

std::vector<int> tensor_parallel_sizes(const Profile& profile, int devices, int devices_per_node,
                                       std::optional<int> fixed) {
  const std::vector<int>& measured = profile.settings.tp_sizes;
  const auto fits = [&](int tp) { return devices % tp == 0 && devices_per_node % tp == 0; };
  if (fixed) {
    const int tp = *fixed;
    PIPEPLAN_CHECK(tp >= 1 && tp <= kMaxDevices, "--tp: ", tp, " is out of range; expected 1 to ",
                   kMaxDevices);
    if (tp == 1) return {1};
    for (const LayerProfile& layer : profile.layers)
      for (const auto& [what, count] : layer.tp_divides)
        PIPEPLAN_CHECK(count % tp == 0, "--tp: ", tp, ": does not divide ", what, " = ", count,
                       " of layer ", quote(layer.name), "; expected a divisor of ", count,
                       " (the layer splits by its ", what, ")");
    PIPEPLAN_CHECK(std::find(measured.begin(), measured.end(), tp) != measured.end(), "--tp: ", tp,
                   ": the profile measured no shards at tp=", tp, " (it has ",
                   measured.empty() ? std::string("none") : listed(measured),
                   "); profile with --tp-sizes including ", tp,
                   ", for a model whose heads and MLP width it divides");
    PIPEPLAN_CHECK(fits(tp), "--tp: ", tp, ": expected a divisor of --devices (", devices,
                   ") and --devices-per-node (", devices_per_node,
                   "): a tensor-parallel group lies within one node");
    return {tp};
  }
  std::vector<int> sizes{1};
  for (int tp : measured)
    if (fits(tp)) sizes.push_back(tp);
  return sizes;
}

Profile tensor_parallel_profile(const Profile& profile, int tp) {
  // Every field but the layers, whose shards would be copied only to be dropped.
  Profile view;
  view.tool_version = profile.tool_version;
  view.created_at = profile.created_at;
  view.model = profile.model;
  view.settings = profile.settings;
  view.device = profile.device;
  view.interconnect = profile.interconnect;
  view.ties = profile.ties;
  view.layers.reserve(profile.layers.size());
  for (const LayerProfile& layer : profile.layers) {
    const LayerProfile* shard = shard_at(layer, tp);
    view.layers.push_back(shard != nullptr ? with_all_reduces(profile, layer, *shard, tp) : layer);
    view.layers.back().tp_shards.clear();
  }
  view.settings.tp_sizes.clear();
  return view;
}

std::string tensor_parallel_note(const Profile& profile, int tp) {
  int split = 0;
  for (const LayerProfile& layer : profile.layers) split += shard_at(layer, tp) != nullptr;
  const std::string comm =
      !profile.interconnect ? "not profiled (--no-comm): predicted free"
      : measured_all_reduce(profile, tp) != nullptr
          ? detail::concat("from the ", tp, "-rank all-reduce fit (measured)")
          : detail::concat("modelled, not measured: the ", profile.interconnect->ranks,
                           "-rank all-reduce fit as a ring of ", tp, " ranks");
  return detail::concat("tensor parallelism tp=", tp, ": ", split, " of ", profile.layers.size(),
                        " layers split (times and bytes of their measured shards), the others "
                        "replicated on each group; the group's all-reduces ",
                        comm);
}

void widen_to_tensor_parallel(Plan* plan, int tp, const Cluster& cluster) {
  plan->tensor_parallel.tp = tp;
  plan->cluster = cluster;
  std::vector<RankAssignment> ranks;
  ranks.reserve(plan->ranks.size() * static_cast<size_t>(tp));
  for (const RankAssignment& group : plan->ranks)
    for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
      RankAssignment assignment = group;
      assignment.rank = group.rank * tp + tp_rank;
      assignment.tp_rank = tp_rank;
      assignment.node = assignment.rank / cluster.devices_per_node;
      assignment.local_rank = assignment.rank % cluster.devices_per_node;
      assignment.device =
          cluster.device_kind == "cuda" ? "cuda:" + std::to_string(assignment.local_rank) : "cpu";
      ranks.push_back(std::move(assignment));
    }
  plan->ranks = std::move(ranks);
}

void set_tensor_parallel_times(Plan* plan, const Profile& profile) {
  const int tp = plan->tp();
  if (tp == 1) return;
  // zb-h1's W runs f's all-reduces again.
  const int backward_passes = plan->schedule == Schedule::kZeroBubbleH1 ? 2 : 1;
  for (size_t chunk_idx = 0; chunk_idx < plan->stages.size(); ++chunk_idx) {
    const StagePlan& chunk = plan->stages[chunk_idx];
    double per_micro_batch_ms = 0;
    for (int layer_idx = chunk.first; layer_idx < chunk.last; ++layer_idx) {
      const LayerProfile& layer = profile.layers[layer_idx];
      if (shard_at(layer, tp) == nullptr) continue;
      const LayerPoint& point = layer.points.front();
      const std::vector<int64_t> sample(point.output_shape.begin() + 1, point.output_shape.end());
      const int64_t bytes = activation_bytes(sample, layer.output_dtype, plan->micro_batch_size);
      const bool recomputed =
          chunk.checkpoint ||
          std::find(chunk.recompute_layers.begin(), chunk.recompute_layers.end(), layer_idx) !=
              chunk.recompute_layers.end();
      const int count = layer.tp_all_reduces * ((recomputed ? 2 : 1) + backward_passes);
      per_micro_batch_ms += count * tensor_parallel_all_reduce_ms(profile, tp, bytes);
    }
    plan->predictions.stages[chunk_idx % static_cast<size_t>(plan->pp)].tp_allreduce_ms +=
        per_micro_batch_ms * plan->num_micro_batches;
  }
}

SearchResult search_tensor_parallel(const PlanningContext& context, const SearchOptions& options) {
  context.validate();
  const Profile& profile = *context.profile;
  if (context.mode == PlanMode::kInference) {
    PIPEPLAN_CHECK(options.tp.value_or(1) == 1, "--tp: ", options.tp.value_or(1),
                   ": expected 1 with --inference (tensor-parallel serving is not built)");
    return search(context, options);
  }
  const std::vector<int> sizes = tensor_parallel_sizes(
      profile, context.cluster.devices, context.cluster.devices_per_node, options.tp);
  SearchResult merged;
  for (int tp : sizes) {
    // A size the fixed --dp or --pp cannot split is not searched (unless asked for by --tp,
    // when search() names the flag).
    if (tp > 1 && !options.tp && !divides_groups(options, context.cluster.devices / tp)) continue;
    // tp = 1 plans the profile as it is: search() reads no shards.
    std::optional<Profile> view;
    if (tp > 1) view = tensor_parallel_profile(profile, tp);
    PlanningContext groups = context;
    groups.profile = view ? &*view : &profile;
    groups.cluster.devices = context.cluster.devices / tp;
    groups.cluster.devices_per_node = context.cluster.devices_per_node / tp;
    SearchOptions group_options = options;
    // A plan slower than the K-th best so far matters only as its size's best.
    if (static_cast<int>(merged.plans.size()) >= options.top_k)
      group_options.rival_samples_per_s =
          merged.plans[static_cast<size_t>(options.top_k) - 1].predictions.samples_per_s;
    if (tp > 1) {
      groups.notes.push_back(tensor_parallel_note(profile, tp));
      // ZeRO-1 beside tensor parallelism is not built (plan validation refuses it).
      PIPEPLAN_CHECK(!options.tp || options.zero != std::vector<int>{1},
                     "--zero: 1: expected 0 "
                     "with --tp ",
                     tp, " (ZeRO-1 beside tensor parallelism is not built)");
      group_options.zero = {0};
    }
    SearchResult result = search(groups, group_options);
    for (Plan& plan : result.plans) {
      if (tp > 1) {
        widen_to_tensor_parallel(&plan, tp, context.cluster);
        set_tensor_parallel_times(&plan, profile);
      }
      plan.validate("plan");
    }
    if (!result.plans.empty()) merged.best_per_tp.push_back(result.plans.front());
    if (result.unsearched_bound_ms)
      merged.unsearched_tp.emplace_back(tp, *result.unsearched_bound_ms);
    merged.plans.insert(merged.plans.end(), result.plans.begin(), result.plans.end());
    for (std::string& line : result.infeasible)
      merged.infeasible.push_back(tp > 1 ? detail::concat("tp=", tp, " ", line) : line);
    merged.candidates += result.candidates;
    merged.evaluated += result.evaluated;
    merged.simulated += result.simulated;
    merged.pruned += result.pruned;
    sort_best_first(merged.plans);
    if (static_cast<int>(merged.plans.size()) > options.top_k)
      merged.plans.resize(static_cast<size_t>(options.top_k));
  }
  if (sizes.size() == 1) {
    merged.best_per_tp.clear();
    merged.unsearched_tp.clear();
  }
  return merged;
}

}  // namespace pipeplan
