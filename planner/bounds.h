// Lower bounds on a candidate's simulated iteration time, used by the search to evaluate the
// most promising candidates first and to skip those that cannot reach the top K.
#pragma once

#include "planner/layer_table.h"
#include "planner/predict.h"
#include "planner/simulator.h"

namespace pipeplan {

/// A lower bound of the simulated iteration time (ms) of `candidate` for ANY split of the
/// layers into its pp stages. With per micro-batch compute T = Σ (fwd + bwd) over all layers
/// and t_s the stage sums, the simulated iteration is at least:
///   - T: micro-batch 0 goes forward through every stage and backward through every stage;
///   - max_k (Σ_{s<k} t_s + m·t_k) >= T / (1 − (1 − 1/m)^pp): the forward of micro-batch 0
///     up to stage k, all of stage k's work, the backward of micro-batch m−1 back to stage 0
///     (minimised over all t with Σ t = T);
///   - m · max(T / pp, slowest layer): the slowest stage's own work;
///   - gpipe only, T + (m − 1) · max(T / pp, slowest layer): micro-batch m−1's forward and
///     micro-batch 0's backward through every stage around the slowest stage's 2m actions;
///   - the average rank's busy time: (m·T + Σ all-reduces + Σ optimizer steps) / pp;
/// each path also ends with stage 0's gradient reduction (all-reduce, or ZeRO-1's
/// reduce-scatter), optimizer step (ZeRO-1: over 1/dp of the parameters) and ZeRO-1's all-gather,
/// each over at least layer 0 (with overlap too: layer 0's gradients complete last). With
/// overlap the average rank's busy time leaves the reductions out (only their exposed part is
/// busy).
/// Checkpoint policy kAll adds the recompute to T. Communication only adds, so it is left out.
/// zb-h1 (a table with split_backward): the two path terms use P = Σ (fwd + B) instead of T,
/// since its gradients travel back with B and W sends nothing; max_k (Σ_{s<k} p_s + m·t_k) is
/// at least max_k (Σ_{s<k} p_s + m·p_k) >= P / (1 − (1 − 1/m)^pp).
/// interleaved-1f1b (V chunks per stage): the second path runs through the pp·V chunks instead
/// (chunk k's m forwards and backwards lie between micro-batch 0's forward reaching it through
/// chunks 0..k−1 and the last backward leaving it back through them), so pp·V replaces pp in it;
/// the others hold as they are (a stage's work is the sum of its chunks').
double iteration_lower_bound_ms(const PlanningContext& context, const LayerTable& table,
                                const Candidate& candidate);

/// The path term of iteration_lower_bound_ms with whole layers: the least, over every split
/// of the table's layers into `pp` non-empty contiguous stages, of max_k (Σ_{s<k} c_s + m·c_k)
/// with c_s a stage's path_compute_ns per micro-batch (plus its forward again when
/// `recompute`), in ns. Exact: bisection over the value, each probe a greedy split (stages as
/// long as the value allows, which only loosens the stages after them, each found by galloping
/// and bisection) that also moves the interval's end to the value deciding it. O(L + 64 · pp ·
/// log L), with far fewer than 64 probes in practice.
/// With `boundary_ns`, each stage boundary the path crosses before stage k adds it (k of them):
/// least_boundary_ns, the activation forward and the gradient back that every boundary costs.
int64_t min_path_ns(const LayerTable& table, int pp, int num_micro_batches, bool recompute,
                    int64_t boundary_ns = 0);

/// The least an activation sent forward and its gradient sent back across any stage (or chunk)
/// boundary take over any link of `cluster`, in whole ns (at least 0): twice the transfer of the
/// smallest inner boundary tensor (min_inner_boundary_bytes) at the faster link.
int64_t least_boundary_ns(const Cluster& cluster, const LayerTable& table);

/// iteration_lower_bound_ms(context, table, candidate) raised by `path_ns`, a min_path_ns of
/// the candidate (over its pp·V chunks for interleaved-1f1b; recompute for
/// CheckpointPolicy::kAll), followed by the same all-reduce and optimizer step of stage 0: still
/// a lower bound for any split.
double refined_iteration_lower_bound_ms(const PlanningContext& context, const LayerTable& table,
                                        const Candidate& candidate, int64_t path_ns);

/// A tighter lower bound once the split is known: the same paths with the actual stage times,
/// recompute and the transfers along them (replica 0's links), and the busiest rank; with zb-h1,
/// a stage's Ws after its last B (min(m, s + 1) of them) are off the path back to stage 0.
/// interleaved-1f1b: the paths through the chunks (input.chunks, the transfers between chunks)
/// and each stage's work, the sum of its chunks', with its all-reduce and optimizer step.
double iteration_lower_bound_ms(const SimulationInput& input);

}  // namespace pipeplan
