// `pipeplan simulate`: re-simulate a plan, print its iteration and every rank's busy and idle
// time, and write the timeline as a Chrome trace and an SVG.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/run.h"
#include "common/files.h"
#include "common/json.h"
#include "common/units.h"
#include "planner/predict.h"
#include "planner/simulator.h"
#include "plans/plan.h"

namespace pipeplan::cli {
namespace {


struct SimulateOptions {
  std::string plan;
  std::optional<std::string> trace;
  std::optional<std::string> svg;
};

// The per-rank table; `iteration_ms` is what idle shares are of (inference: the interval).
void print_ranks(const Plan& plan, const SimulationResult& result, double iteration_ms) {
  std::printf("%6s %6s %8s %5s %12s %12s %7s\n", "rank", "stage", "replica", "node", "busy_ms",
              "idle_ms", "idle");
  for (const RankAssignment& rank : plan.ranks) {
    const int played = rank.rank / plan.tp();  // the simulator plays one rank per tp group
    const double busy = result.busy_ms[played];
    const double idle = result.idle_ms[played];
    std::printf("%6d %6d %8d %5d %12.3f %12.3f %6.1f%%\n", rank.rank, rank.stage, rank.replica,
                rank.node, busy, idle, iteration_ms > 0 ? idle / iteration_ms * 100 : 0.0);
  }
}

// Inference plans: one request's latency and the interval of back-to-back requests
// (predict_inference_timing's two plays); each rank's idle time is the interval less its busy
// time for one request. The timeline is the one request.
SimulationResult simulate_inference(const Plan& plan, const SimulationOptions& options,
                                    const std::string& plan_path) {
  auto [result, interval_ms] = play_requests(simulation_input(plan), options);
  const double bubble_fraction = idle_at_interval(&result, interval_ms);
  const std::string bubble = plan.pp == 1 ? "-" : format_fixed(bubble_fraction * 100, 1) + " %";
  std::printf(
      "request latency %.3f ms, interval %.3f ms between back-to-back requests, %.1f samples/s, "
      "bubble %s (plan predicted latency %.3f ms, interval %.3f ms)\n",
      result.iteration_ms, interval_ms, samples_per_s(plan.global_batch, interval_ms),
      bubble.c_str(), plan.predictions.latency_ms, plan.predictions.iteration_ms);
  print_ranks(plan, result, interval_ms);
  result.timeline.title =
      detail::concat(plan_path, " (inference: dp=", plan.dp, " pp=", plan.pp,
                     " b=", plan.micro_batch_size, " m=", plan.num_micro_batches, ", one request)");
  return result;
}

// Training plans: the iteration, its throughput and bubble, every rank's busy and idle time.
SimulationResult simulate_training(const Plan& plan, const SimulationOptions& options,
                                   const std::string& plan_path) {
  SimulationResult result = simulate(simulation_input(plan), options);
  result.timeline.title =
      detail::concat(plan_path, " (dp=", plan.dp, " pp=", plan.pp, " b=", plan.micro_batch_size,
                     " m=", plan.num_micro_batches, " ", to_string(plan.schedule), ")");
  const double throughput = samples_per_s(plan.global_batch, result.iteration_ms);
  // One stage has no pipeline and so no bubble; its ranks' idle time is listed below.
  const std::string bubble =
      plan.pp == 1 ? "-" : format_fixed(result.bubble_fraction * 100, 1) + " %";
  std::printf("iteration %.3f ms, %.1f samples/s, bubble %s (plan predicted %.3f ms)\n",
              result.iteration_ms, throughput, bubble.c_str(), plan.predictions.iteration_ms);
  if (result.iteration_ms > result.mean_times_iteration_ms)
    std::printf(
        "  of which %.3f ms is the variation of the action times (%.3f ms with every "
        "action at its mean; the timeline shows that iteration)\n",
        result.iteration_ms - result.mean_times_iteration_ms, result.mean_times_iteration_ms);
  print_ranks(plan, result, result.iteration_ms);
  return result;
}

int run_simulate(const SimulateOptions& o) {
  check_outputs_distinct({{"--trace", o.trace.value_or("")}, {"--svg", o.svg.value_or("")}},
                         {{"--plan", o.plan}});
  if (o.trace) check_writable(*o.trace, "--trace");
  if (o.svg) check_writable(*o.svg, "--svg");
  const Plan plan = read_plan(o.plan);
  check_predicts_compute(plan, o.plan);
  // The timeline holds every rank's every action: build it only when it is written.
  SimulationOptions options;
  options.record_timeline = o.trace.has_value() || o.svg.has_value();
  const SimulationResult result = plan.mode == PlanMode::kInference
                                      ? simulate_inference(plan, options, o.plan)
                                      : simulate_training(plan, options, o.plan);
  // All outputs or none: a failed --svg leaves no new --trace behind.
  std::vector<OutputContent> outputs;
  if (o.trace) outputs.push_back({*o.trace, to_chrome_trace(result.timeline).dump() + "\n"});
  if (o.svg) outputs.push_back({*o.svg, to_svg(result.timeline)});
  write_outputs(outputs);
  return 0;
}

}  // namespace

Runner add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* sub = app.add_subcommand(
      "simulate", "Re-simulate a plan: iteration time, per-rank busy/idle, timeline.");
  sub->add_option("--plan", o->plan, "plan.json from `pipeplan plan`")->required();
  sub->add_option("--trace", o->trace, "Write the timeline as a Chrome trace (Perfetto)");
  sub->add_option("--svg", o->svg, "Write the timeline as an SVG");
  return [o] { return run_simulate(*o); };
}

}  // namespace pipeplan::cli
