// The time model (docs/models.md, Time): per-stage forward/backward/recompute per micro-batch,
// transfer time over a link, the ring all-reduce and the optimizer step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/layer_table.h"
#include "plans/plan.h"

namespace pipeplan {

/// Where the cost of a transfer comes from. A bandwidth of 0 means "not measured": transfers
/// over such a link are free (latency included), and the plan's notes say so.
struct LinkCosts {
  double latency_ms = 0;  ///< per message
  double intra_node_bandwidth_bytes_per_s = 0;
  double inter_node_bandwidth_bytes_per_s = 0;

  /// The bandwidth of an intra- or inter-node link.
  double bandwidth(bool inter_node) const {
    return inter_node ? inter_node_bandwidth_bytes_per_s : intra_node_bandwidth_bytes_per_s;
  }
};

/// The links of a plan's cluster.
LinkCosts link_costs(const Cluster& cluster);

/// One point-to-point message: latency_ms + bytes / bandwidth, or 0 when bandwidth is 0.
double transfer_ms(int64_t bytes, double bandwidth_bytes_per_s, double latency_ms);

/// Ring all-reduce of `bytes` over `dp` ranks: 2(dp−1)/dp · bytes / bandwidth plus one
/// latency per ring step, 2(dp−1) · latency_ms. 0 when dp = 1 or bandwidth is 0.
double allreduce_ms(int64_t bytes, int dp, double bandwidth_bytes_per_s, double latency_ms);

/// The collectives of a stage's replicas: the gradient all-reduce, and ZeRO-1's reduce-scatter
/// of the gradients and all-gather of the parameters.
enum class Collective { kAllReduce, kReduceScatter, kAllGather };
/// "all-reduce", "reduce-scatter", "all-gather".
std::string to_string(Collective collective);

/// Where the collectives' times come from: the profile's fits (time = latency + bytes /
/// bandwidth, `bytes` the whole tensor) over the `measured_ranks` ranks of one machine it ran,
/// else the ring formula on the point-to-point link (collective_ms).
struct CollectiveCosts {
  /// One collective's fit; a bandwidth of 0: not measured.
  struct Fit {
    double latency_ms = 0;
    double bandwidth_bytes_per_s = 0;
  };
  int measured_ranks = 0;  ///< the group the fits were measured over; 0 without any
  Fit allreduce;
  Fit reduce_scatter;
  Fit all_gather;

  /// The fit of `collective`.
  const Fit& fit(Collective collective) const;
  /// Whether `collective` over `group` ranks has a fit: measured over that many ranks, and the
  /// group within a node (the profile's ranks shared one machine).
  bool measured(Collective collective, int group, bool inter_node) const {
    return group == measured_ranks && !inter_node && fit(collective).bandwidth_bytes_per_s > 0;
  }
};

/// The profile's collective fits (none when it has no interconnect measurement).
CollectiveCosts collective_costs(const Profile& profile);

/// `collective` of a `bytes` tensor over `group` ranks: the fit when measured(...), else the ring
/// on `links` (the inter-node link when `inter_node`): the all-reduce as allreduce_ms, the
/// reduce-scatter and the all-gather each half of it, (g−1)/g · bytes / bandwidth + (g−1) ·
/// latency_ms. 0 when group = 1, or unmeasured over a link of bandwidth 0.
/// `cheapest_collective_ms` is the least of it over the links a group of `cluster` may use
/// (within a node; across nodes when the cluster has several): the lower bounds' price.
double collective_ms(const CollectiveCosts& costs, Collective collective, int64_t bytes,
                     int group, const LinkCosts& links, bool inter_node);
double cheapest_collective_ms(const CollectiveCosts& costs, Collective collective, int64_t bytes,
                              int group, const Cluster& cluster);

/// One stage's compute times, in ns (layer_table.h explains the unit).
struct StageTimes {
  int64_t fwd_ns = 0;        ///< one micro-batch
  int64_t bwd_ns = 0;        ///< one micro-batch
  int64_t recompute_ns = 0;  ///< the extra forward during backward when checkpointed, else 0
  /// One optimizer step over the stage's parameters, after summing the gradients of the tied
  /// parameters it shares with other stages (LayerTable::tie_sum_ns).
  int64_t optimizer_ns = 0;
};

/// The times of layers [first, last), summed over the stage's layers at the table's b; the
/// recompute is the whole forward when `checkpoint`, the forward of the layers `recomputed`
/// (partial checkpointing) otherwise.
StageTimes stage_times(const LayerTable& table, int first, int last, bool checkpoint,
                       const std::vector<int>& recomputed = {});

/// The coefficient of variation of an action whose p90 lies `spread_ns` above its mean time
/// `mean_ns`, taking the time as normal (p90 = mean + 1.2816 standard deviations): the profile
/// keeps medians and p90s, not the standard deviation. 0 when mean_ns is 0; at most
/// kMaxCoefficientOfVariation (common/limits.h), which a p90 13 times the median reaches.
double coefficient_of_variation(int64_t spread_ns, int64_t mean_ns);

/// Per micro-batch: forward + backward + recompute.
inline int64_t compute_ns(const StageTimes& times) {
  return times.fwd_ns + times.bwd_ns + times.recompute_ns;
}

}  // namespace pipeplan
