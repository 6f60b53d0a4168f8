// interleaved-1f1b's split: the model cut into pp·V chunks balanced for time, each stage (rank)
// holding V of them and fitting the device with their memory together.
#pragma once

#include <memory>
#include <vector>

#include "planner/baselines.h"
#include "planner/memory_model.h"
#include "planner/partition.h"
#include "planner/stage_cost.h"

namespace pipeplan {

/// The problem of an interleaved-1f1b candidate's pp·V chunks as stages of their own, for
/// time alone: `problem` (its pp stages, virtual_stages = V, inter_node_boundaries by chunk
/// boundary) with pp·V stages, V = 1, no memory limit (the stages' memory is checked by
/// interleaved_partition, rank by rank) and memory settings of a pp·V-stage 1f1b, which only
/// break ties between splits of equal time. kAll stays (every chunk recomputes: its time counts);
/// kNone and kNeeded become kNone (kNeeded decides per stage after the split).
PartitionProblem chunk_problem(const PartitionProblem& problem);

/// Local chunks v = 0 .. V − 1 of stage `stage_idx` in a split of pp·V chunks (`boundaries`,
/// pp·V + 1 positions): global chunk v·pp + s, checkpointed when `checkpoint`.
std::vector<ChunkRange> stage_chunks(const std::vector<int>& boundaries, int pp,
                                     int virtual_stages, int stage_idx, bool checkpoint);

/// The split of an interleaved-1f1b candidate (`problem.virtual_stages` >= 2): infeasible with
/// the proof when interleaved_proven_infeasible has one; else `spec`'s method
/// (kExplicit: pp·V + 1 boundaries) on chunk_problem, which for kOptimal minimises the slowest
/// chunk; then each stage's memory, interleaved_stage_memory of its V chunks, under the policy
/// (kNeeded: the stage's chunks are all checkpointed when they do not fit without). The result
/// has pp·V + 1 boundaries and a checkpoint flag per global chunk; its costs are by stage (the
/// sum of the stage's chunks' per-micro-batch costs); it is infeasible, naming the stage that
/// needs most, when a stage does not fit. Not the optimum under memory: a split balanced for
/// time whose stages do not fit is not traded for a slower one that fits.
PartitionResult interleaved_partition(const PartitionSpec& spec, const LayerTable& table,
                                      const PartitionProblem& problem);

/// interleaved_partition's two steps: the chunk boundaries of `spec`'s method on
/// chunk_problem(problem) (the same for problems that differ only in kNone against kNeeded, or in
/// device memory), and the stages of a given split evaluated under problem's policy. `sends`:
/// the table's send_times over problem.links, or null (computed).
std::vector<int> interleaved_chunk_boundaries(const PartitionSpec& spec, const LayerTable& table,
                                              const PartitionProblem& problem,
                                              std::shared_ptr<const SendTimes> sends = nullptr);
PartitionResult evaluate_interleaved(const LayerTable& table, const PartitionProblem& problem,
                                     const std::vector<int>& boundaries,
                                     std::shared_ptr<const SendTimes> sends = nullptr);

/// A quick proof that no split of `problem`'s chunks fits, O(L + pp·V), from what every split
/// has (interleaved_stage_memory): stage s holds in_flight(...) chunk micro-batches, each at
/// least one layer's activations (the least retained_bytes of a layer), or checkpointed the
/// smallest chunk input plus one layer's recompute (kNeeded: the smaller of the two), its
/// communication buffers at least of the smallest inner boundary, the runtime overhead and its
/// calibration; and the parameters and buffers of every layer are held by some stage. True with
/// `proof` set when a stage needs more than the device by these terms alone, or the stages
/// together need more than pp devices (the stage needing most needs at least their mean).
/// interleaved_partition runs it first.
bool interleaved_proven_infeasible(const LayerTable& table, const PartitionProblem& problem,
                                   PartitionResult* proof);

}  // namespace pipeplan
