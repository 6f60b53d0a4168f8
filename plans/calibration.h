// The Calibration: the corrections a measured run made to the time and memory models, as a
// plan records them (plan.json "calibration"); planner/calibration.h computes and applies them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace pipeplan {

/// What one stage of the calibrating run (interleaved-1f1b: one chunk) taught the models.
struct StageCalibration {
  int first = 0;  ///< the layers [first, last) the stage (chunk) ran; its factors apply to them
  int last = 0;
  double fwd_scale = 1;        ///< measured / predicted forward per micro-batch
  double bwd_scale = 1;        ///< measured / predicted backward per micro-batch
  double optimizer_scale = 1;  ///< measured / predicted optimizer step (Calibration::optimizer)
  /// Measured peak − predicted peak (the allocator's runtime overhead the model lacks, or its
  /// overcount when negative); a chunk carries its stage's.
  int64_t memory_correction_bytes = 0;
  /// bwd_scale for zb-h1's B and W apart (optional keys): from a zb-h1 run its B and its W;
  /// from any other run both bwd_scale, the whole backward's.
  double bwd_input_scale = 1;
  double bwd_weight_scale = 1;
};

/// The corrections, and where they came from.
struct Calibration {
  std::string run_path;                  ///< the run.json given to --calibrate
  std::string run_hash;                  ///< run_hash of that run
  std::string plan_hash;                 ///< the plan the run ran
  std::string configuration;             ///< plan_configuration of that plan
  std::string optimizer;                 ///< the optimizer the run stepped ("sgd", "adamw")
  /// One per stage of that plan (interleaved-1f1b: per chunk, in chunk order), contiguous from
  /// layer 0.
  std::vector<StageCalibration> stages;
  int virtual_stages = 1;  ///< the run's V: stages holds pp · V chunks, chunk c on stage c % pp
  double profile_latency_ms = 0;         ///< the profile's point-to-point latency, before
  double latency_ms = 0;                 ///< the effective point-to-point latency, after
  /// The profile measured no interconnect, so transfers were free: after calibration they
  /// cost latency_ms each, with unbounded bandwidth (nothing measured a bandwidth).
  bool latency_only = false;
  /// How latency_ms was found: "fitted: ..." or why the profile's was kept.
  std::string latency_note;

  /// One StageCalibration per stage (chunk), covering layers [0, L) contiguously, a multiple
  /// of virtual_stages (in [1, kMaxVirtualStages]) of them; scales in [1/1000, 1000]; memory
  /// corrections within ±kMaxBytes; latencies in [0, kMaxTimeMs]. Throws Error(kBadInput)
  /// naming `document` and the field.
  void validate(std::string_view document) const;

  /// The memory correction of each of `pp` stages: stage s's own when `pp` is the calibrating
  /// run's stage count (stages.size() / virtual_stages), else the largest one for every stage
  /// (the stages differ; the largest correction errs on the side of fitting).
  std::vector<int64_t> memory_corrections(int pp) const;
};

Json to_json(const Calibration& calibration);
/// Reads and validates; errors name the reader's document and path.
Calibration calibration_from_json(const JsonReader& reader);

}  // namespace pipeplan
