// The search space both searches enumerate (dp × pp, micro-batch sizes), and the inference
// search: forward-only plans ranked by throughput or latency.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/search.h"

namespace pipeplan {

/// The divisors of `value` (>= 1), ascending, in O(sqrt(value)) steps.
std::vector<int64_t> divisors(int64_t value);

/// The pp values to search: divisors of the device count up to the layer count, narrowed by
/// --pp, --dp and an explicit --partition. Throws Error(kBadInput) naming the flag that
/// contradicts the devices, the global batch or the model.
std::vector<int> pipeline_depths(const PlanningContext& context, const SearchOptions& options);

/// The micro-batch sizes for one dp: divisors of global_batch / dp (or the forced one) that make
/// at most kMaxMicroBatches micro-batches; none when dp does not divide the global batch.
std::vector<int64_t> micro_batch_sizes(int64_t global_batch, int dp, const SearchOptions& options);

/// Throws Error(kBadInput) naming the flag when no (dp, pp, b) of `depths` exists.
void check_some_family(const PlanningContext& context, const SearchOptions& options,
                       const std::vector<int>& depths);

/// The inference search (context.mode inference; `search` calls it after validating both):
/// every dp × pp and micro-batch size b as the training search enumerates them (m = global
/// batch / (dp · b) micro-batches per request and replica; a family is infeasible, with the
/// reason, where the profile cannot be planned at b or 2m·pp passes kMaxPipelineMicroBatches:
/// the interval plays two requests), each with schedule gpipe, no
/// checkpointing, no ZeRO and one chunk per stage, placed replica-major, partitioned by
/// options.partition on a forward-only layer table (cost: the forward and the activation send;
/// memory: forward_stage_memory), and predicted by predict_inference_timing with mean action
/// times; the top K are the best by their predictions with the draws where they apply
/// (predict_variation: each plan that could still enter them is drawn, in mean-times order).
/// Ranked by options.objective: throughput — samples/s first, then latency — keeping only
/// plans whose latency_ms is at most options.max_latency_ms when given; latency — latency_ms
/// first, then samples/s; ties by peak memory, pp, dp, b, boundaries. A family (dp, pp, b)
/// none of whose plans is kept is reported in `infeasible` with why: its memory reason, or
/// "latency X ms > --max-latency-ms Y". --schedule other than gpipe (or auto), --checkpoint
/// all, --virtual-stages and --zero 1 are the plan command's to refuse. No pruning: every
/// candidate is partitioned and simulated (evaluated = simulated = candidates).
SearchResult search_inference(const PlanningContext& context, const SearchOptions& options);

}  // namespace pipeplan
