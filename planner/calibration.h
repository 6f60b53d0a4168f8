// Calibration: from a measured run of a plan, correct the systematic terms of the time and
// memory models of a profile — per-stage compute scales applied to the stage's layers, the
// effective point-to-point latency, a per-stage memory correction — and apply them.
#pragma once

#include <string>
#include <vector>

#include "planner/predict.h"
#include "plans/calibration.h"
#include "plans/plan.h"
#include "plans/run.h"
#include "plans/profile.h"

namespace pipeplan {

/// The bandwidth standing in for "unbounded" when a profile without an interconnect is
/// calibrated to latency-only transfers: 1 EB/s, so any tensor adds under 1 ns to the latency.
inline constexpr double kLatencyOnlyBandwidthBytesPerS = 1e18;

/// A calibration and the predictions of the run's own configuration before and after it.
struct CalibrationResult {
  Calibration calibration;
  Plan before;  ///< the run's configuration predicted from the profile as it is
  Plan after;   ///< the same configuration predicted from the calibrated profile
};

/// The corrections that `run` (a run of `run_plan`, read from `run_path`) makes to
/// `profile`'s models:
///  - per stage s: fwd_scale = measured / predicted forward per micro-batch, bwd_scale the
///    same for the backward, optimizer_scale for the optimizer step, where "predicted" is
///    `profile` predicting run_plan's configuration (not the plan file's numbers, which may
///    come from another profile); a scale stays 1 when either side is 0;
///  - per stage s: memory_correction_bytes = measured peak − predicted peak;
///  - the point-to-point latency ℓ for which the run's configuration, predicted with the
///    scaled times, simulates to the measured iteration time (bisection: the simulated
///    iteration never decreases as ℓ grows). What the re-simulation with measured stage times
///    leaves unexplained is communication and per-action overhead that the profile's transfer
///    benchmark does not see; one iteration time identifies one parameter, and the bandwidth
///    is measured over many message sizes while the latency is the part a small benchmark
///    gets least right, so the latency absorbs it. A profile without an interconnect
///    predicted free transfers; it gets latency-only ones (latency_only). The profile's
///    latency is kept when the plan has no transfer (pp = 1, dp = 1); it is set to 0 when
///    even that does not bring the prediction down to the measurement.
/// Refuses (Error(kBadInput), one line) a run of another model (hash or layer count), device
/// kind or precision than the profile's, a run that is not of run_plan's configuration
/// (check_run_of_plan), and a run whose plan hash is not run_plan's.
CalibrationResult calibrate(const Profile& profile, const Plan& run_plan, const Run& run,
                            const std::string& run_path);

/// `profile` with each layer's forward and backward times (points, p90s and fits) scaled by
/// the factors of the calibration stage whose layers include it, its step time for the
/// calibration's optimizer scaled by optimizer_scale, and the point-to-point latency set to
/// calibration.latency_ms — with an interconnect of that latency and
/// kLatencyOnlyBandwidthBytesPerS when latency_only. Layers keep these factors in any
/// partition.
Profile calibrated_profile(const Profile& profile, const Calibration& calibration);

/// The context of predicting `shape`'s configuration from `profile`: shape's cluster with the
/// profile's interconnect (make_cluster), global batch, optimizer and precision.
PlanningContext context_for(const Profile& profile, const Plan& shape);

/// `shape`'s configuration — dp, pp, micro-batches, schedule, stage ranges and checkpoint
/// flags, rank map, optimizer settings — with every prediction made under `context`.
/// Throws Error(kBadInput) when shape's rank map is neither replica-major nor stage-major.
Plan predict_plan(const PlanningContext& context, const Plan& shape);

/// The lines `pipeplan plan --calibrate` prints: each correction with its before and after,
/// and the run's configuration predicted before and after against the measurement.
std::vector<std::string> describe(const CalibrationResult& result, const Run& run);

}  // namespace pipeplan
