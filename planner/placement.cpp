// Rank placement: layouts, node membership, the placement rule.
#include "planner/placement.h"

#include <algorithm>

namespace pipeplan {

std::string to_string(Layout layout) {
  return layout == Layout::kReplicaMajor ? "replica-major" : "stage-major";
}

int layout_rank(Layout layout, int dp, int pp, int stage_idx, int replica) {
  return layout == Layout::kReplicaMajor ? replica * pp + stage_idx : stage_idx * dp + replica;
}

std::vector<RankAssignment> place_ranks(Layout layout, int dp, int pp, int devices_per_node,
                                        const std::string& device_kind) {
  std::vector<RankAssignment> ranks(static_cast<size_t>(dp) * pp);
  for (int replica = 0; replica < dp; ++replica)
    for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
      const int rank = layout_rank(layout, dp, pp, stage_idx, replica);
      RankAssignment& assignment = ranks[rank];
      assignment.rank = rank;
      assignment.stage = stage_idx;
      assignment.replica = replica;
      assignment.node = rank / devices_per_node;
      assignment.local_rank = rank % devices_per_node;
      assignment.device =
          device_kind == "cuda" ? "cuda:" + std::to_string(assignment.local_rank) : "cpu";
    }
  return ranks;
}

// Whether ranks x and x + d (d fixed) sit on different nodes depends on x mod devices_per_node
// alone, and a replica's rank of a stage moves by a fixed step per replica (pp or 1): the
// replicas from devices_per_node on repeat the earlier ones' answers.
static int distinct_replicas(int dp, int devices_per_node) {
  return std::min(dp, devices_per_node);
}

std::vector<bool> inter_node_boundaries(Layout layout, int dp, int pp, int devices_per_node) {
  std::vector<bool> inter(pp > 1 ? pp - 1 : 0, false);
  const int replicas = distinct_replicas(dp, devices_per_node);
  for (int boundary = 0; boundary + 1 < pp; ++boundary)
    for (int replica = 0; replica < replicas && !inter[boundary]; ++replica)
      inter[boundary] = layout_rank(layout, dp, pp, boundary, replica) / devices_per_node !=
                        layout_rank(layout, dp, pp, boundary + 1, replica) / devices_per_node;
  return inter;
}

std::vector<bool> chunk_inter_node_boundaries(Layout layout, int dp, int pp, int virtual_stages,
                                              int devices_per_node) {
  if (virtual_stages == 1) return inter_node_boundaries(layout, dp, pp, devices_per_node);
  const std::vector<bool> inner = inter_node_boundaries(layout, dp, pp, devices_per_node);
  bool wrap = false;  // stage pp − 1 to stage 0
  for (int replica = 0; replica < distinct_replicas(dp, devices_per_node) && !wrap; ++replica)
    wrap = layout_rank(layout, dp, pp, pp - 1, replica) / devices_per_node !=
           layout_rank(layout, dp, pp, 0, replica) / devices_per_node;
  std::vector<bool> inter;
  for (int boundary = 0; boundary + 1 < pp * virtual_stages; ++boundary)
    inter.push_back(boundary % pp == pp - 1 ? wrap : inner[boundary % pp]);
  return inter;
}

std::vector<bool> stages_spanning_nodes(Layout layout, int dp, int pp, int devices_per_node) {
  std::vector<bool> spanning(pp, false);
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    const int first_node = layout_rank(layout, dp, pp, stage_idx, 0) / devices_per_node;
    for (int replica = 1; replica < dp && !spanning[stage_idx]; ++replica)
      spanning[stage_idx] =
          layout_rank(layout, dp, pp, stage_idx, replica) / devices_per_node != first_node;
  }
  return spanning;
}

Layout choose_layout(double p2p_bytes, double allreduce_bytes) {
  return p2p_bytes >= allreduce_bytes ? Layout::kReplicaMajor : Layout::kStageMajor;
}

}  // namespace pipeplan
