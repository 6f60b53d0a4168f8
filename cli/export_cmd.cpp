// `pipeplan export`: write a plan in the form another runtime takes (export/export.h), or refuse
// it in one line naming what that runtime cannot express.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/run.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/json.h"
#include "export/export.h"
#include "plans/plan.h"
#include "plans/profile.h"

namespace pipeplan::cli {
namespace {

struct ExportCmdOptions {
  std::string plan;
  std::string to;
  std::optional<std::string> output;
  std::optional<std::string> profile;
  std::optional<std::string> schedule_csv;
};

// The profile the plan was made from: its bytes must hash to the plan's profile.hash.
Profile read_plan_profile(const ExportCmdOptions& o, const Plan& plan) {
  // --profile, else the plan's profile.path (as written, else beside the plan).
  const std::string path = o.profile ? *o.profile : recorded_path(plan.profile_path, o.plan);
  const char* flag = o.profile ? "--profile" : "the plan's profile.path";
  std::error_code ec;
  PIPEPLAN_CHECK(std::filesystem::exists(path, ec), flag, ": ", quote(path),
                 ": no such file; the export reads the layer names of the profile the plan was "
                 "made from (give it with --profile)");
  const std::string bytes = read_json_text(path);
  const std::string hash = content_hash(bytes);
  PIPEPLAN_CHECK(hash == plan.profile_hash, flag, ": ", quote(path), ": content hash ", hash,
                 " is not the plan's profile.hash ", plan.profile_hash,
                 " (give the profile the plan was made from with --profile)");
  return parse_profile(bytes, path);
}

int run_export(const ExportCmdOptions& o) {
  const ExportFormat format = parse_export_format(o.to, "--to");
  check_outputs_distinct(
      {{"-o", o.output.value_or("")}, {"--schedule-csv", o.schedule_csv.value_or("")}},
      {{"--plan", o.plan}, {"--profile", o.profile.value_or("")}});
  if (o.output) check_writable(*o.output, "-o");
  if (o.schedule_csv) check_writable(*o.schedule_csv, "--schedule-csv");
  const Plan plan = read_plan(o.plan);
  const bool pipelining =
      format == ExportFormat::kTorchPipelining || format == ExportFormat::kTorchtitan;
  PIPEPLAN_CHECK(!o.schedule_csv || (pipelining && plan.mode == PlanMode::kTraining),
                 "--schedule-csv: ", quote(*o.schedule_csv),
                 ": the action CSV is for training plans exported --to torch-pipelining or "
                 "torchtitan");
  const Profile profile = read_plan_profile(o, plan);
  ExportOptions options;
  options.plan_path = o.plan;
  options.schedule_csv_path = o.schedule_csv.value_or("");
  const ExportFiles files = export_plan(plan, export_model(profile), format, options);
  std::vector<OutputContent> outputs;
  if (o.output) outputs.push_back({*o.output, files.document});
  if (o.schedule_csv) outputs.push_back({*o.schedule_csv, files.schedule_csv});
  if (!o.output) std::fputs(files.document.c_str(), stdout);
  write_outputs(outputs);
  return 0;
}

// `pipeplan export --help`'s list: each format, its target, what it writes and refuses.
std::string formats_footer() {
  std::string text = "Formats (--to):\n";
  for (const ExportFormatInfo& info : export_formats())
    text += detail::concat("  ", info.name, "\n    target:  ", info.target,
                           "\n    writes:  ", info.emits, "\n    refuses: ", info.refuses, "\n");
  return text +
         "A refused plan ends with one line naming what the target cannot express, and exit 2.";
}

}  // namespace

Runner add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportCmdOptions>();
  CLI::App* sub = app.add_subcommand(
      "export",
      "Write a plan for another runtime: torch.distributed.pipelining, torchtitan, "
      "Megatron-LM, DeepSpeed or vLLM.");
  sub->add_option("--plan", o->plan, "plan.json from `pipeplan plan`")->required();
  sub->add_option("--to", o->to, "The format (listed below)")->required();
  sub->add_option("-o", o->output, "Write the export here (default: standard output)");
  sub->add_option("--profile", o->profile,
                  "The profile the plan was made from (default: the plan's profile.path); "
                  "its layer names are the modules' FQNs");
  sub->add_option("--schedule-csv", o->schedule_csv,
                  "Also write every rank's actions in the plan's order as the CSV that "
                  "pipelining's _PipelineScheduleRuntime loads (torchtitan names it; needed for "
                  "zb-h1 there)");
  sub->footer(formats_footer());
  return [o] { return run_export(*o); };
}

}  // namespace pipeplan::cli
