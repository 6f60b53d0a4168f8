// The partitioners a user can pick: the exact one, three baselines (equal layer counts, equal
// parameter counts as DeepSpeed's default, greedy time balance) and explicit ranges.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "planner/layer_table.h"
#include "planner/partition.h"

namespace pipeplan {

/// Which partitioner --partition picked.
enum class PartitionMethod { kOptimal, kUniform, kParameters, kGreedyTime, kExplicit };

/// A parsed --partition value.
struct PartitionSpec {
  PartitionMethod method = PartitionMethod::kOptimal;
  std::vector<int> boundaries;  ///< kExplicit only: pp + 1 positions from 0 to num_layers
  /// The plan's `partition` word: "optimal", "uniform", "parameters", "greedy-time", "explicit".
  std::string name() const;
};

/// Parses optimal | uniform | parameters | greedy-time | FIRST:LAST,FIRST:LAST,... where each
/// range is the stage's layers [FIRST, LAST). Explicit ranges must start at 0, be contiguous,
/// non-empty and end at `num_layers`. Throws Error(kBadInput) naming `field` otherwise.
PartitionSpec parse_partition(std::string_view text, int num_layers, std::string_view field);

/// Equal layer counts: stage s holds [floor(s·L/pp), floor((s+1)·L/pp)).
std::vector<int> uniform_boundaries(int num_layers, int pp);

/// Equal parameter counts (DeepSpeed's partition_method="parameters"): boundary s is the
/// position whose cumulative parameter count is closest to s/pp of the total, kept strictly
/// increasing with room for the later stages. Uniform when the model has no parameters.
std::vector<int> parameter_boundaries(const LayerTable& table, int pp);

/// Greedy time balance: each stage takes layers while its compute (forward + backward)
/// stays within total/pp, taking at least one layer and leaving one for each later stage;
/// the last stage takes the rest.
std::vector<int> greedy_time_boundaries(const LayerTable& table, int pp);

/// Runs the method for the evaluator's pp and evaluates the split (memory under the policy).
/// kExplicit requires spec.boundaries.size() == pp + 1.
PartitionResult run_partition(const PartitionSpec& spec, const StageEvaluator& evaluator);

}  // namespace pipeplan
