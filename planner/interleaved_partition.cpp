// interleaved-1f1b's split: chunks balanced for time, stages' memory checked rank by rank.
#include "planner/interleaved_partition.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "common/units.h"

namespace pipeplan {
namespace {

// One stage of the split under the policy: its memory and its chunks' flags.
struct StageFit {
  int64_t memory_bytes = 0;
  bool checkpoint = false;
};

StageFit fit_stage(const LayerTable& table, const PartitionProblem& problem,
                   const std::vector<int>& boundaries, int stage_idx) {
  const int virtual_stages = problem.virtual_stages;
  bool checkpoint = problem.policy == CheckpointPolicy::kAll;
  int64_t bytes = interleaved_stage_memory(
                      table, problem.memory, stage_idx,
                      stage_chunks(boundaries, problem.pp, virtual_stages, stage_idx, checkpoint))
                      .total_bytes;
  if (problem.policy == CheckpointPolicy::kNeeded && bytes > problem.device_memory_bytes) {
    checkpoint = true;
    bytes = interleaved_stage_memory(
                table, problem.memory, stage_idx,
                stage_chunks(boundaries, problem.pp, virtual_stages, stage_idx, checkpoint))
                .total_bytes;
  }
  return {bytes, checkpoint};
}

// Every stage of a chunk split: costs (the sum of its chunks'), memory and flags.
PartitionResult evaluate_chunks(const LayerTable& table, const PartitionProblem& problem,
                                const StageEvaluator& chunks, const std::vector<int>& boundaries) {
  const int pp = problem.pp;
  PartitionResult result;
  result.boundaries = boundaries;
  result.checkpoint.assign(boundaries.size() - 1, false);
  int worst_stage = 0;
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    const StageFit fit = fit_stage(table, problem, boundaries, stage_idx);
    int64_t cost_ns = 0;
    for (int chunk = 0; chunk < problem.virtual_stages; ++chunk) {
      const int global_chunk = chunk_index(pp, stage_idx, chunk);
      cost_ns += chunks
                     .evaluate_as(global_chunk, boundaries[global_chunk],
                                  boundaries[global_chunk + 1], fit.checkpoint)
                     .cost_ns;
      result.checkpoint[global_chunk] = fit.checkpoint;
    }
    result.bottleneck_ns = std::max(result.bottleneck_ns, cost_ns);
    result.total_ns += cost_ns;
    if (fit.memory_bytes > result.peak_memory_bytes) worst_stage = stage_idx;
    result.peak_memory_bytes = std::max(result.peak_memory_bytes, fit.memory_bytes);
  }
  result.feasible = result.peak_memory_bytes <= problem.device_memory_bytes;
  if (!result.feasible) {
    result.needed_bytes = result.peak_memory_bytes;
    result.reason = detail::concat(
        "stage ", worst_stage, " needs ",
        needs_text(result.peak_memory_bytes, problem.device_memory_bytes), " (", pp,
        " stages of ", problem.virtual_stages, " chunks, split ", split_text(boundaries), ")");
  }
  return result;
}

}  // namespace

PartitionProblem chunk_problem(const PartitionProblem& problem) {
  PIPEPLAN_ASSERT(problem.virtual_stages >= 2 &&
                  static_cast<int>(problem.inter_node_boundaries.size()) ==
                      problem.pp * problem.virtual_stages - 1);
  PartitionProblem chunks = problem;
  chunks.pp = problem.pp * problem.virtual_stages;
  chunks.virtual_stages = 1;
  chunks.policy =
      problem.policy == CheckpointPolicy::kAll ? CheckpointPolicy::kAll : CheckpointPolicy::kNone;
  chunks.device_memory_bytes = kUnlimitedMemoryBytes;  // no split is refused for memory
  chunks.memory.schedule = Schedule::kOneFOneB;
  chunks.memory.pp = chunks.pp;
  chunks.memory.virtual_stages = 1;
  chunks.memory.calibration_bytes.clear();
  return chunks;
}

std::vector<ChunkRange> stage_chunks(const std::vector<int>& boundaries, int pp,
                                     int virtual_stages, int stage_idx, bool checkpoint) {
  PIPEPLAN_ASSERT(static_cast<int>(boundaries.size()) == pp * virtual_stages + 1);
  std::vector<ChunkRange> ranges;
  for (int chunk = 0; chunk < virtual_stages; ++chunk) {
    const int global_chunk = chunk_index(pp, stage_idx, chunk);
    ranges.push_back({boundaries[global_chunk], boundaries[global_chunk + 1], checkpoint});
  }
  return ranges;
}

std::vector<int> interleaved_chunk_boundaries(const PartitionSpec& spec, const LayerTable& table,
                                              const PartitionProblem& problem,
                                              std::shared_ptr<const SendTimes> sends) {
  const PartitionProblem chunks = chunk_problem(problem);
  const PartitionResult split =
      run_partition(spec, StageEvaluator(table, chunks, std::move(sends)));
  PIPEPLAN_ASSERT(split.feasible, "the chunk problem has no memory limit");
  return split.boundaries;
}

PartitionResult evaluate_interleaved(const LayerTable& table, const PartitionProblem& problem,
                                     const std::vector<int>& boundaries,
                                     std::shared_ptr<const SendTimes> sends) {
  const PartitionProblem chunks = chunk_problem(problem);
  return evaluate_chunks(table, problem, StageEvaluator(table, chunks, std::move(sends)),
                         boundaries);
}

PartitionResult interleaved_partition(const PartitionSpec& spec, const LayerTable& table,
                                      const PartitionProblem& problem) {
  PartitionResult proof;
  if (interleaved_proven_infeasible(table, problem, &proof)) return proof;
  return evaluate_interleaved(table, problem, interleaved_chunk_boundaries(spec, table, problem));
}

bool interleaved_proven_infeasible(const LayerTable& table, const PartitionProblem& problem,
                                   PartitionResult* proof) {
  const int layers = table.num_layers();
  const int pp = problem.pp;
  const MemorySettings& memory = problem.memory;
  // The least a chunk micro-batch in flight keeps: plain, a chunk's activations are at least one
  // layer's (LayerTable: a layer's saved input, which the overlap with the layer before takes
  // off, is within its retained bytes); checkpointed, a chunk input, which is an inner boundary
  // or (stage 0's first chunk) the model input. A recomputed chunk's graph is at least a layer's.
  int64_t least_layer_bytes = table.retained_bytes(0, 1);
  for (int layer_idx = 1; layer_idx < layers; ++layer_idx)
    least_layer_bytes = std::min(least_layer_bytes, table.retained_bytes(layer_idx, layer_idx + 1));
  const int64_t inner = table.min_inner_boundary_bytes();
  const CommBufferCounts comm = comm_buffer_counts(Schedule::kInterleaved1F1B, pp, 0);
  int64_t sum_bytes = parameter_bytes(table.param_count(0, layers), memory) +
                      table.buffer_bytes(0, layers);
  int64_t most_bytes = 0;
  int most_stage = 0;
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    const int64_t held = in_flight(Schedule::kInterleaved1F1B, pp, stage_idx,
                                   memory.num_micro_batches, memory.virtual_stages);
    const int64_t input = stage_idx == 0 ? std::min(inner, table.boundary_bytes(0)) : inner;
    const int64_t plain = held * least_layer_bytes;
    const int64_t checkpointed = held * input + least_layer_bytes;
    int64_t activations = std::min(plain, checkpointed);  // kNeeded: the rank takes the smaller
    if (problem.policy == CheckpointPolicy::kNone) activations = plain;
    if (problem.policy == CheckpointPolicy::kAll) activations = checkpointed;
    const int64_t bytes = activations + (comm.in + comm.out + comm.sends) * inner +
                          memory.runtime_overhead_bytes + memory.calibration_of(stage_idx);
    sum_bytes += bytes;
    if (bytes > most_bytes) {
      most_bytes = bytes;
      most_stage = stage_idx;
    }
  }
  const int64_t mean_bytes = (sum_bytes + pp - 1) / pp;
  const int64_t device = problem.device_memory_bytes;
  if (most_bytes <= device && mean_bytes <= device) return false;
  *proof = PartitionResult{};
  if (most_bytes > device) {
    proof->needed_bytes = most_bytes;
    proof->reason = detail::concat(
        "stage ", most_stage, " needs at least ", needs_text(most_bytes, device),
        " for its activations in flight and communication buffers alone (", pp, " stages of ",
        problem.virtual_stages, " chunks)");
  } else {
    proof->needed_bytes = mean_bytes;
    proof->reason = detail::concat("the ", pp, " stages need at least ",
                                   needs_text(mean_bytes, device), " each on average (",
                                   problem.virtual_stages, " chunks each)");
  }
  return true;
}

}  // namespace pipeplan
