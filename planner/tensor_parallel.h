// Tensor parallelism in the planner: the profile as tensor-parallel groups see it, and the
// search over tp around the dp × pp search.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/search.h"
#include "plans/profile.h"

namespace pipeplan {

/// One all-reduce of `bytes` over a tensor-parallel group of `tp` ranks, in ms (a tp group is
/// always inside a node): the profile's fit over tp ranks where it measured one (the two-rank
/// link, or interconnect.group_allreduce, timed where the machine had the devices); else the
/// two-rank fit modelled as a ring, latency · (tp − 1) + 2(tp − 1)/tp · bytes / bandwidth.
/// 0 without an interconnect profile.
double tensor_parallel_all_reduce_ms(const Profile& profile, int tp, int64_t bytes);

/// The group sizes the search may use: tp = 1, and each size of profile.settings.tp_sizes that
/// divides `devices` and `devices_per_node` (a group never spans nodes); `fixed` (--tp) instead
/// when given, refused naming --tp when the profile has no shards at it or it does not divide
/// those.
std::vector<int> tensor_parallel_sizes(const Profile& profile, int devices, int devices_per_node,
                                       std::optional<int> fixed);

/// `profile` as one rank of a tensor-parallel group of `tp` sees it: each layer with a shard at
/// tp (LayerProfile::tp_shards) is that shard, its times at every point plus the group's
/// all-reduces of its output (LayerProfile::tp_all_reduces, n: g after each column–row pair in
/// the forward and inference forward, +n; f before each in the backward, +n; zb-h1's B +n and
/// W +n, since W runs f's again on its way to the replicated weights), fits refitted; every other layer whole (replicated on
/// the group). Memory follows from the shard's parameters and measured bytes. Shards and
/// settings.tp_sizes are dropped (tp = 1: the profile without them).
Profile tensor_parallel_profile(const Profile& profile, int tp);

/// The note a plan of tensor-parallel groups of `tp` carries: which layers split, and whether
/// the all-reduce time was measured (tp = 2) or modelled from the two-rank fit.
std::string tensor_parallel_note(const Profile& profile, int tp);

/// A plan found for clusters of tp-rank groups (devices / tp devices, each a group) made the
/// plan of `cluster`'s devices: tensor_parallel.tp set, each rank of the smaller plan become
/// tp consecutive ranks (tp innermost) with node, local_rank and device recomputed.
void widen_to_tensor_parallel(Plan* plan, int tp, const Cluster& cluster);

/// Each stage's predicted tp_allreduce_ms: per micro-batch, every split layer's all-reduces of
/// its output at the plan's micro-batch size (kTensorParallel*AllReduces, two more under zb-h1
/// and two more where the layer is recomputed), times the micro-batches, summed over the
/// stage's chunks. `profile` is the measured one (with shards); no-op for tp 1.
void set_tensor_parallel_times(Plan* plan, const Profile& profile);

/// search() at each size of tensor_parallel_sizes (options.tp fixes one): each on
/// tensor_parallel_profile and a cluster of devices / tp groups, its plans widened; the plans of
/// every size merged best first (top_k), the counts summed, and best_per_tp filled (one entry
/// per size searched with a feasible plan) when there is more than one size. Sizes go in ascending
/// order, each given the K-th best of those before as its rival (SearchOptions::
/// rival_samples_per_s): a size none of whose candidates could enter the top K is not searched
/// and is listed in unsearched_tp with its bound. Inference plans search tp = 1 only (a --tp
/// above 1 is refused).
SearchResult search_tensor_parallel(const PlanningContext& context, const SearchOptions& options);

}  // namespace pipeplan
