// The inference search: forward-only gpipe candidates over dp × pp and micro-batch size, each
// partitioned and simulated, ranked by throughput (within a latency bound) or by latency.
#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "common/error.h"
#include "common/limits.h"
#include "common/units.h"
#include "planner/search_space.h"

namespace pipeplan {
namespace {

using FamilyKey = std::tuple<int, int, int64_t>;  // dp, pp, micro-batch size

// Why a family (dp, pp, b) has no plan: its memory reason, or its latency over the bound.
struct InferenceFamily {
  std::string reason;
  int64_t needed_bytes = 0;
  bool over_bound = false;      // its plan's latency passed options.max_latency_ms
  double least_latency_ms = 0;  // that latency
};

// The ranking key of `plan` under `objective`; whole nanoseconds so that rounding ties.
auto ranking_key(const Plan& plan, InferenceObjective objective) {
  std::vector<int> split;
  for (const StagePlan& stage : plan.stages) split.push_back(stage.last);
  const int64_t interval_ns = to_ns(plan.predictions.iteration_ms);
  const int64_t latency_ns = to_ns(plan.predictions.latency_ms);
  const bool by_latency = objective == InferenceObjective::kLatency;
  return std::make_tuple(by_latency ? latency_ns : interval_ns,
                         by_latency ? interval_ns : latency_ns,
                         plan.predictions.peak_memory_bytes(), plan.pp, plan.dp,
                         plan.micro_batch_size, split);
}

class InferenceSearch {
 public:
  InferenceSearch(const PlanningContext& context, const SearchOptions& options)
      : context_(context), options_(options) {}

  SearchResult run() {
    const std::vector<int> depths = pipeline_depths(context_, options_);
    check_some_family(context_, options_, depths);
    for (int pp : depths) {
      const int dp = context_.cluster.devices / pp;
      for (int64_t b : micro_batch_sizes(context_.global_batch, dp, options_)) {
        ++result_.candidates;
        InferenceFamily& family = families_[{dp, pp, b}];
        const int num_micro_batches = static_cast<int>(context_.global_batch / (dp * b));
        family.reason = unplannable_reason(*context_.profile, b, context_.optimizer);
        // The interval plays two requests: 2m micro-batches through pp stages.
        if (family.reason.empty() && 2 * int64_t{pp} * num_micro_batches > kMaxPipelineMicroBatches)
          family.reason = detail::concat(
              num_micro_batches, " micro-batches of ", pp, " stages: expected at most ",
              kMaxPipelineMicroBatches / 2,
              " micro-batches times stages (the simulator's limit, which plays two requests)");
        if (!family.reason.empty()) continue;
        evaluate({dp, pp, b, num_micro_batches, Schedule::kGpipe, CheckpointPolicy::kNone,
                  Layout::kReplicaMajor, /*virtual_stages=*/1, /*zero=*/0},
                 &family);
      }
    }
    result_.plans = top_with_draws(std::move(result_.plans));
    report_families();
    return std::move(result_);
  }

 private:
  const LayerTable& table(int64_t micro_batch_size) {
    auto it = tables_.find(micro_batch_size);
    if (it == tables_.end())
      it = tables_
               .emplace(micro_batch_size,
                        std::make_unique<LayerTable>(*context_.profile, micro_batch_size,
                                                     context_.optimizer, /*split_backward=*/false,
                                                     /*forward_only=*/true))
               .first;
    return *it->second;
  }

  // The top K of `plans` (predicted with mean times) by their predictions with the draws where
  // they apply (predict_variation), as the training search ranks. The draws only lengthen a
  // request: taken in the order of their mean-times ranking, once a plan cannot rank before the
  // K-th kept, none after it can. A plan the draws move over the latency bound leaves the list,
  // its family's reason then its drawn latency.
  std::vector<Plan> top_with_draws(std::vector<Plan> plans) {
    auto before = [&](const Plan& a, const Plan& b) {
      return ranking_key(a, options_.objective) < ranking_key(b, options_.objective);
    };
    std::stable_sort(plans.begin(), plans.end(), before);
    std::vector<Plan> top;
    for (Plan& plan : plans) {
      const bool full = static_cast<int>(top.size()) >= options_.top_k;
      if (full && !before(plan, top.back())) break;
      predict_variation(&plan);
      if (!within_bound(plan)) {
        over_bound(&families_[{plan.dp, plan.pp, plan.micro_batch_size}], plan);
        continue;
      }
      top.insert(std::upper_bound(top.begin(), top.end(), plan, before), std::move(plan));
      if (static_cast<int>(top.size()) > options_.top_k) top.pop_back();
    }
    return top;
  }

  bool within_bound(const Plan& plan) const {
    return !options_.max_latency_ms ||
           plan.predictions.latency_ms <= *options_.max_latency_ms * (1 + kLatencySlack);
  }

  // Partitions and simulates one candidate (mean times); a plan within the bound is kept.
  void evaluate(const Candidate& candidate, InferenceFamily* family) {
    const LayerTable& layer_table = table(candidate.micro_batch_size);
    const PartitionProblem problem = partition_problem(context_, candidate);
    const PartitionResult split =
        run_partition(options_.partition, StageEvaluator(layer_table, problem));
    ++result_.evaluated;
    if (!split.feasible) {
      family->reason = split.reason + " (inference, gpipe)";
      family->needed_bytes = split.needed_bytes;
      return;
    }
    Plan plan = build_plan(context_, layer_table, candidate, split, options_.partition.name());
    predict_timing(&plan, SimulationOptions{/*record_timeline=*/false,
                                            /*merge_identical_replicas=*/true,
                                            /*variability_draws=*/0});
    ++result_.simulated;
    if (!within_bound(plan)) {
      over_bound(family, plan);
      return;
    }
    result_.plans.push_back(std::move(plan));
  }

  static void over_bound(InferenceFamily* family, const Plan& plan) {
    family->over_bound = true;
    family->least_latency_ms = plan.predictions.latency_ms;
  }

  void report_families() {
    for (const auto& [key, family] : families_) {
      const auto& [dp, pp, b] = key;
      const bool listed = std::any_of(
          result_.plans.begin(), result_.plans.end(),
          [&](const Plan& p) { return p.dp == dp && p.pp == pp && p.micro_batch_size == b; });
      if (listed) continue;
      std::string reason = family.reason;
      if (reason.empty() && family.over_bound)
        reason = detail::concat("latency ", family.least_latency_ms, " ms > --max-latency-ms ",
                                *options_.max_latency_ms);
      if (reason.empty()) continue;  // feasible, only ranked below the top K
      result_.infeasible.push_back(detail::concat("dp=", dp, " pp=", pp, " b=", b, ": ", reason));
    }
  }

  // A latency equal to the bound up to rounding is within it.
  static constexpr double kLatencySlack = 1e-9;

  const PlanningContext& context_;
  const SearchOptions& options_;
  std::map<int64_t, std::unique_ptr<LayerTable>> tables_;  // forward-only, by micro-batch size
  std::map<FamilyKey, InferenceFamily> families_;
  SearchResult result_;
};

}  // namespace

SearchResult search_inference(const PlanningContext& context, const SearchOptions& options) {
  PIPEPLAN_ASSERT(context.mode == PlanMode::kInference);
  return InferenceSearch(context, options).run();
}

}  // namespace pipeplan
