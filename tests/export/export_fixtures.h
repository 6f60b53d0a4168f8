// Plans and models for the export tests: a GPT-like decoder stack (embedding, decoder blocks,
// final norm, output layer) split into any stages, as pipeplan names a TorchScript GPT's layers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "export/export.h"
#include "plans/schedule.h"
#include "tests/plans/test_plan.h"

namespace pipeplan::testing {

/// "embed", "blocks.0" ... "blocks.<n-1>", "ln_f", "head" with their module class names.
inline ExportModel gpt_model(int num_blocks) {
  ExportModel model;
  model.layer_names.push_back("embed");
  model.layer_kinds.push_back("Embed");
  for (int block = 0; block < num_blocks; ++block) {
    model.layer_names.push_back("blocks." + std::to_string(block));
    model.layer_kinds.push_back("Block");
  }
  model.layer_names.insert(model.layer_names.end(), {"ln_f", "head"});
  model.layer_kinds.insert(model.layer_kinds.end(), {"LayerNorm", "Linear"});
  return model;
}

/// A training plan of `layers_per_chunk.size()` chunks of those layer counts over `pp` stages
/// (V = chunks / pp), `dp` replicas and `num_micro_batches` micro-batches of 2 samples.
inline Plan chunked_plan(const std::vector<int>& layers_per_chunk, int pp, Schedule schedule,
                         int num_micro_batches = 4, int dp = 1) {
  Plan plan = make_test_plan(dp, pp, num_micro_batches, schedule);
  plan.virtual_stages = static_cast<int>(layers_per_chunk.size()) / pp;
  plan.stages.clear();
  int first = 0;
  for (const int layers : layers_per_chunk) {
    StagePlan chunk;
    chunk.first = first;
    chunk.last = first + layers;
    plan.stages.push_back(chunk);
    first += layers;
  }
  plan.model.num_layers = first;
  return plan;
}

/// `plan` with each rank become `tp` consecutive ranks of a tensor-parallel group (as
/// chunked_plan's, not validated: the exports read no boundary shapes).
inline Plan with_tensor_parallel(Plan plan, int tp) {
  plan.tensor_parallel.tp = tp;
  plan.cluster.devices *= tp;
  std::vector<RankAssignment> ranks;
  for (const RankAssignment& group : plan.ranks)
    for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
      RankAssignment rank = group;
      rank.rank = group.rank * tp + tp_rank;
      rank.tp_rank = tp_rank;
      rank.node = rank.rank / plan.cluster.devices_per_node;
      rank.local_rank = rank.rank % plan.cluster.devices_per_node;
      ranks.push_back(rank);
    }
  plan.ranks = ranks;
  return plan;
}

/// The message of the Error(kBadInput) that `export_plan` throws, or "" when it exports.
inline std::string refusal(const Plan& plan, const ExportModel& model, ExportFormat format,
                           const ExportOptions& options = {}) {
  try {
    export_plan(plan, model, format, options);
  } catch (const Error& error) {
    EXPECT_EQ(error.exit_code(), 2) << error.what();
    return error.what();
  }
  return "";
}

/// Splits `text` at `separator` (empty pieces kept).
inline std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> pieces(1);
  for (const char c : text) {
    if (c == separator)
      pieces.emplace_back();
    else
      pieces.back() += c;
  }
  return pieces;
}

}  // namespace pipeplan::testing
