// The time model: transfers, ring all-reduce, per-stage compute.
#include "planner/time_model.h"

#include <algorithm>
#include <utility>

#include "common/limits.h"
#include "common/units.h"
#include "common/words.h"
#include "planner/partial_checkpoint.h"

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

std::string to_string(Collective collective) {
  static constexpr std::pair<const char*, Collective> kWords[] = {
      {"all-reduce", Collective::kAllReduce},
      {"reduce-scatter", Collective::kReduceScatter},
      {"all-gather", Collective::kAllGather}};
  return word_of(collective, kWords);
}

const CollectiveCosts::Fit& CollectiveCosts::fit(Collective collective) const {
  switch (collective) {
    case Collective::kReduceScatter:
      return reduce_scatter;
    case Collective::kAllGather:
      return all_gather;
    case Collective::kAllReduce:
      break;
  }
  return allreduce;
}

CollectiveCosts collective_costs(const Profile& profile) {
  CollectiveCosts costs;
  if (!profile.interconnect) return costs;
  const InterconnectProfile& link = *profile.interconnect;
  costs.measured_ranks = link.ranks;
  auto fit = [](const CommProfile& comm) {
    return CollectiveCosts::Fit{comm.latency_ms, comm.bandwidth_bytes_per_s};
  };
  costs.allreduce = fit(link.allreduce);
  costs.reduce_scatter = fit(link.reduce_scatter);
  costs.all_gather = fit(link.all_gather);
  return costs;
}

double collective_ms(const CollectiveCosts& costs, Collective collective, int64_t bytes,
                     int group, const LinkCosts& links, bool inter_node) {
  if (group <= 1) return 0;
  if (costs.measured(collective, group, inter_node)) {
    const CollectiveCosts::Fit& fit = costs.fit(collective);
    return fit.latency_ms + static_cast<double>(bytes) / fit.bandwidth_bytes_per_s * kMsPerSecond;
  }
  const double bandwidth = links.bandwidth(inter_node);
  const double ring = allreduce_ms(bytes, group, bandwidth, links.latency_ms);
  return collective == Collective::kAllReduce ? ring : ring / 2;
}

double cheapest_collective_ms(const CollectiveCosts& costs, Collective collective, int64_t bytes,
                              int group, const Cluster& cluster) {
  const LinkCosts links = link_costs(cluster);
  double cheapest = collective_ms(costs, collective, bytes, group, links, /*inter_node=*/false);
  if (cluster.devices_per_node < cluster.devices)
    cheapest = std::min(cheapest,
                        collective_ms(costs, collective, bytes, group, links, /*inter_node=*/true));
  return cheapest;
}

double coefficient_of_variation(int64_t spread_ns, int64_t mean_ns) {
  constexpr double kZ90 = 1.2815515655446004;  // the standard normal's 90th percentile
  if (mean_ns <= 0) return 0.0;
  return std::min(kMaxCoefficientOfVariation,
                  static_cast<double>(spread_ns) / static_cast<double>(mean_ns) / kZ90);
}

StageTimes stage_times(const LayerTable& table, int first, int last, bool checkpoint,
                       const std::vector<int>& recomputed) {
  StageTimes times;
  times.fwd_ns = table.fwd_ns(first, last);
  times.bwd_ns = table.bwd_ns(first, last);
  times.recompute_ns = checkpoint ? times.fwd_ns : recompute_ns(table, recomputed);
  times.optimizer_ns = table.optimizer_ns(first, last) + table.tie_sum_ns(first, last);
  return times;
}

}  // namespace pipeplan
