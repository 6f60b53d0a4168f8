// Rank placement: which rank runs which (stage, replica), and so which transfers and
// all-reduces stay inside a node.
#pragma once

#include <string>
#include <vector>

#include "plans/plan.h"

namespace pipeplan {

/// How ranks are numbered; rank r runs on node r / devices_per_node (torchrun's numbering).
///   replica-major: rank = replica · pp + stage  (a pipeline's neighbours are adjacent)
///   stage-major:   rank = stage · dp + replica  (a stage's replicas are adjacent)
enum class Layout { kReplicaMajor, kStageMajor };

/// "replica-major", "stage-major".
std::string to_string(Layout layout);

/// The rank of `stage_idx` of `replica` under `layout`.
int layout_rank(Layout layout, int dp, int pp, int stage_idx, int replica);

/// The rank map, indexed by rank, with node = rank / devices_per_node, local_rank = rank %
/// devices_per_node, and device "cpu" or "cuda:<local_rank>" for `device_kind` "cuda".
std::vector<RankAssignment> place_ranks(Layout layout, int dp, int pp, int devices_per_node,
                                        const std::string& device_kind);

/// For each boundary s in [0, pp − 1) (between stages s and s + 1): true when, for at least
/// one replica, the two ranks are on different nodes.
std::vector<bool> inter_node_boundaries(Layout layout, int dp, int pp, int devices_per_node);

/// For each chunk boundary c in [0, pp·V − 1) of interleaved-1f1b (chunk c on stage c mod pp,
/// chunk c + 1 on stage (c + 1) mod pp: the last stage's next is stage 0): true when, for at
/// least one replica, the two ranks are on different nodes. inter_node_boundaries when V = 1.
std::vector<bool> chunk_inter_node_boundaries(Layout layout, int dp, int pp, int virtual_stages,
                                              int devices_per_node);

/// For each stage: true when its replicas are not all on one node (its all-reduce crosses
/// nodes, so it runs at the inter-node bandwidth).
std::vector<bool> stages_spanning_nodes(Layout layout, int dp, int pp, int devices_per_node);

/// The placement rule: keep the heavier traffic inside a node. `p2p_bytes` is what one
/// replica's pipeline neighbours exchange per iteration (activations and gradients of every
/// micro-batch at every boundary), `allreduce_bytes` what its ranks send in the gradient
/// all-reduces (2(dp−1)/dp of all gradient bytes). Replica-major when p2p_bytes >=
/// allreduce_bytes, else stage-major.
Layout choose_layout(double p2p_bytes, double allreduce_bytes);

}  // namespace pipeplan
