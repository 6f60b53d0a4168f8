// Checks a rank makes before it waits on any other: the plan against the job and the machine.
#pragma once

#include <torch/torch.h>

#include <string>

#include "executor/rendezvous.h"
#include "models/model.h"
#include "plans/plan.h"

namespace pipeplan::executor {

/// Checks that `plan` (read from `document`, validated as read_plan does) is for `model`: same
/// hash, layer count and input (Plan::validate chained the stages' boundaries from the plan's
/// input); amp precisions need cuda. Throws Error(kBadInput) with one line naming the field.
void check_plan_matches_model(const Plan& plan, const models::Model& model,
                              const std::string& document);

/// Throws Error(kBadInput) unless WORLD_SIZE equals the plan's dp·pp ranks.
void check_world(const Plan& plan, const RendezvousEnv& env, const std::string& document);

/// The CUDA device index a rank uses for its plan device "cuda:<planned_index>" when this process
/// sees `visible_device_count` devices: 0 when it sees exactly one (the launcher gave each rank
/// its own GPU, as `srun --gpus-per-task 1` does through CUDA_VISIBLE_DEVICES), otherwise
/// `planned_index`. Throws Error(kBadInput) naming `field` when no device is visible or
/// `planned_index` is not below the count.
int visible_cuda_index(int planned_index, int visible_device_count, const std::string& field);

/// The device of `env.rank` in the rank map of `plan` (validated, as read_plan does): cpu in a cpu
/// plan; in a cuda plan the index visible_cuda_index picks for "cuda:N", with the plan's
/// local_rank equal to LOCAL_RANK. Throws Error(kBadInput) naming the field otherwise.
torch::Device rank_device(const Plan& plan, const RendezvousEnv& env, const std::string& document);

/// Sets LibTorch's intra-op threads from OMP_NUM_THREADS when it is set, so that ranks sharing a
/// machine do not oversubscribe its cores. Throws Error(kBadInput) for a malformed value.
void set_threads_from_env();

}  // namespace pipeplan::executor
