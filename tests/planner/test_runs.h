// Plans and runs built by hand for the compare and calibration tests: no LibTorch, no
// executor; a "measured" run is what a plan of the same configuration predicts.
#pragma once

#include <cstdint>

#include "plans/plan.h"
#include "plans/run.h"
#include "plans/profile.h"

namespace pipeplan::testing {

/// Four layers of different times, parameters and activations on a CPU with an interconnect
/// (latency 0.05 ms, 1 GB/s) and 1 MiB of runtime overhead.
Profile four_layer_profile();

/// The best 1f1b plan of `profile` without checkpointing for `dp` × `pp` devices on one node
/// of 1 GiB each, micro-batches of 2, `global_batch` samples.
Plan plan_for(const Profile& profile, int dp, int pp, int64_t global_batch = 16,
              Schedule schedule = Schedule::kOneFOneB);

/// A run of `plan` (its hash, world size, rank map) whose every measurement is what
/// `predicted` — a plan of the same configuration, possibly from another profile — predicts:
/// stage and rank times, peaks, iteration, samples/s, bubble, and the simulated timeline as
/// its representative step. run_as_predicted(plan, plan) is a perfect run.
Run run_as_predicted(const Plan& plan, const Plan& predicted);

}  // namespace pipeplan::testing
