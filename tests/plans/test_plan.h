// A small valid plan for the tests of plans/: any dp, pp and number of micro-batches.
#pragma once

#include "plans/plan.h"

namespace pipeplan::testing {

/// A valid plan of `pp` stages of one layer each (plus `extra_layers` in the last stage), `dp`
/// replicas laid out replica-major on nodes of `devices_per_node`, and `num_micro_batches`
/// micro-batches of 2 samples.
inline Plan make_test_plan(int dp, int pp, int num_micro_batches, Schedule schedule,
                           int devices_per_node = 1 << 20, int extra_layers = 0) {
  Plan plan;
  plan.tool_version = "0.1.0";
  plan.profile_path = "profile.json";
  plan.profile_hash = "fnv1a64:0123456789abcdef";
  plan.model.name = "mlp_tiny";
  plan.model.hash = "fnv1a64:fedcba9876543210";
  plan.model.num_layers = pp + extra_layers;
  plan.model.input_shape = {1, 28, 28};
  plan.cluster.devices = dp * pp;
  plan.cluster.device_memory_bytes = int64_t{1} << 30;
  plan.cluster.devices_per_node = devices_per_node;
  plan.dp = dp;
  plan.pp = pp;
  plan.micro_batch_size = 2;
  plan.num_micro_batches = num_micro_batches;
  plan.global_batch = int64_t{dp} * num_micro_batches * plan.micro_batch_size;
  plan.schedule = schedule;
  for (int stage_idx = 0; stage_idx < pp; ++stage_idx) {
    StagePlan stage;
    stage.first = stage_idx;
    stage.last = stage_idx == pp - 1 ? pp + extra_layers : stage_idx + 1;
    stage.input_sample_shape =
        stage_idx == 0 ? std::vector<int64_t>{1, 28, 28} : std::vector<int64_t>{128};
    stage.output_sample_shape = {128};
    plan.stages.push_back(stage);
  }
  for (int rank = 0; rank < dp * pp; ++rank) {
    RankAssignment assignment;
    assignment.rank = rank;
    assignment.replica = rank / pp;
    assignment.stage = rank % pp;
    assignment.node = rank / devices_per_node;
    assignment.local_rank = rank % devices_per_node;
    plan.ranks.push_back(assignment);
  }
  plan.predictions.stages.resize(pp);
  return plan;
}

/// Makes `plan` (from make_test_plan with pp·(v − 1) extra layers, schedule interleaved-1f1b)
/// one of `v` chunks per stage: pp·v chunks of one layer each, every stage predicting v chunks.
inline void make_interleaved(Plan* plan, int v) {
  plan->schedule = Schedule::kInterleaved1F1B;
  plan->virtual_stages = v;
  plan->stages.clear();
  for (int chunk = 0; chunk < plan->pp * v; ++chunk) {
    StagePlan stage;
    stage.first = chunk;
    stage.last = chunk + 1;
    stage.input_sample_shape =
        chunk == 0 ? std::vector<int64_t>{1, 28, 28} : std::vector<int64_t>{128};
    stage.output_sample_shape = {128};
    plan->stages.push_back(stage);
  }
  plan->model.num_layers = plan->pp * v;
  for (StagePrediction& stage : plan->predictions.stages) stage.chunks.assign(v, {});
}

}  // namespace pipeplan::testing
