// The time model (DESIGN.md): per-stage forward/backward/recompute per micro-batch, transfer
// time over a link, the ring all-reduce and the optimizer step.
#pragma once

#include <cstdint>

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

/// One stage's compute times, in ns (layer_table.h explains the unit).
struct StageTimes {
  int64_t fwd_ns = 0;        ///< one micro-batch
  int64_t bwd_ns = 0;        ///< one micro-batch
  int64_t recompute_ns = 0;  ///< the extra forward during backward when checkpointed, else 0
  /// One optimizer step over the stage's parameters, after summing the gradients of the tied
  /// parameters it shares with other stages (LayerTable::tie_sum_ns).
  int64_t optimizer_ns = 0;
};

/// The times of layers [first, last), summed over the stage's layers at the table's b.
StageTimes stage_times(const LayerTable& table, int first, int last, bool checkpoint);

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
