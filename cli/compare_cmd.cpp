// `pipeplan compare`: a plan's predictions beside what a run of it measured, as a table, and
// optionally compare.json and compare.svg.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/run.h"
#include "common/files.h"
#include "common/json.h"
#include "planner/compare.h"
#include "planner/predict.h"
#include "plans/plan.h"
#include "plans/run.h"

namespace pipeplan::cli {
namespace {

struct CompareOptions {
  std::string plan;
  std::string run;
  std::optional<std::string> json;
  std::optional<std::string> svg;
};

int run_compare(const CompareOptions& o) {
  check_outputs_distinct({{"--json", o.json.value_or("")}, {"--svg", o.svg.value_or("")}},
                         {{"--plan", o.plan}, {"--run", o.run}});
  if (o.json) check_writable(*o.json, "--json");
  if (o.svg) check_writable(*o.svg, "--svg");
  const Plan plan = read_plan(o.plan);
  check_predicts_compute(plan, o.plan);
  const Run run = read_run(o.run);
  check_run_of_plan(plan, o.plan, run, o.run);
  check_step_times_of_plan(plan, run, o.run);
  const Comparison comparison = compare(plan, o.plan, run, o.run);
  std::fputs(to_table(comparison).c_str(), stdout);
  // All outputs or none: a failed --svg leaves no new --json behind.
  std::vector<OutputContent> outputs;
  if (o.json) outputs.push_back({*o.json, to_json(comparison).dump(2) + "\n"});
  if (o.svg) outputs.push_back({*o.svg, to_svg(comparison)});
  write_outputs(outputs);
  return 0;
}

}  // namespace

Runner add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* sub = app.add_subcommand(
      "compare", "Show how far a plan's predictions were from what a run of it measured.");
  sub->add_option("--plan", o->plan, "plan.json the run ran")->required();
  sub->add_option("--run", o->run, "run.json from `pipeplan train`")->required();
  sub->add_option("--json", o->json, "Write every number as compare.json");
  sub->add_option("--svg", o->svg, "Write memory and compute bars and both timelines as an SVG");
  return [o] { return run_compare(*o); };
}

}  // namespace pipeplan::cli
