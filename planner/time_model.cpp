// The time model: transfers, ring all-reduce, per-stage compute.
#include "planner/time_model.h"

#include <algorithm>

#include "common/limits.h"
#include "common/units.h"

namespace pipeplan {

LinkCosts link_costs(const Cluster& cluster) {
  return {cluster.latency_ms, cluster.intra_node_bandwidth_bytes_per_s,
          cluster.inter_node_bandwidth_bytes_per_s};
}

double transfer_ms(int64_t bytes, double bandwidth_bytes_per_s, double latency_ms) {
  if (bandwidth_bytes_per_s <= 0) return 0;
  return latency_ms + static_cast<double>(bytes) / bandwidth_bytes_per_s * kMsPerSecond;
}

double allreduce_ms(int64_t bytes, int dp, double bandwidth_bytes_per_s, double latency_ms) {
  if (dp <= 1 || bandwidth_bytes_per_s <= 0) return 0;
  const double steps = 2.0 * (dp - 1);
  return steps * latency_ms +
         steps / dp * static_cast<double>(bytes) / bandwidth_bytes_per_s * kMsPerSecond;
}

double coefficient_of_variation(int64_t spread_ns, int64_t mean_ns) {
  constexpr double kZ90 = 1.2815515655446004;  // the standard normal's 90th percentile
  if (mean_ns <= 0) return 0.0;
  return std::min(kMaxCoefficientOfVariation,
                  static_cast<double>(spread_ns) / static_cast<double>(mean_ns) / kZ90);
}

StageTimes stage_times(const LayerTable& table, int first, int last, bool checkpoint) {
  StageTimes times;
  times.fwd_ns = table.fwd_ns(first, last);
  times.bwd_ns = table.bwd_ns(first, last);
  times.recompute_ns = checkpoint ? times.fwd_ns : 0;
  times.optimizer_ns = table.optimizer_ns(first, last) + table.tie_sum_ns(first, last);
  return times;
}

}  // namespace pipeplan
