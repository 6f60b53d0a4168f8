// `pipeplan plan`: search the dp × pp plans of a profile for a cluster, write the best one and
// print the ranked alternatives and why the rejected families do not fit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/json.h"
#include "common/limits.h"
#include "common/units.h"
#include "planner/calibration.h"
#include "planner/search.h"
#include "planner/tensor_parallel.h"
#include "plans/profile.h"
#include "plans/run.h"

namespace pipeplan::cli {
namespace {

constexpr int kDefaultTopK = 5;
constexpr size_t kMaxStagesShown = 6;  // longer splits are shortened in the table

struct PlanOptions {
  std::string profile;
  int devices = 0;
  std::string device_memory;
  int64_t global_batch = 0;
  std::optional<int> devices_per_node;
  std::optional<std::string> inter_node_bandwidth;
  std::string optimizer = "sgd";
  std::string schedule = "auto";
  std::optional<int> virtual_stages;
  std::optional<int> zero;
  bool no_overlap = false;
  std::optional<std::string> bucket_size;
  std::optional<int> pp;
  std::optional<int> dp;
  std::optional<int> tp;
  std::optional<int64_t> micro_batch_size;
  std::string checkpoint = "auto";
  std::string partition = "optimal";
  int top = kDefaultTopK;
  std::optional<std::string> calibrate;
  bool inference = false;
  std::optional<std::string> objective;
  std::optional<double> max_latency_ms;
  std::string output;
};

// "12.5GB", "12.5GB/s" or bytes per second.
double parse_bandwidth(const std::string& text) {
  std::string size = text;
  if (size.size() > 2 && size.compare(size.size() - 2, 2, "/s") == 0) size.resize(size.size() - 2);
  const int64_t bytes = parse_size(size, "--inter-node-bandwidth");
  PIPEPLAN_CHECK(bytes > 0, "--inter-node-bandwidth: ", quote(text),
                 " must be positive (a size per second such as 12.5GB)");
  return static_cast<double>(bytes);
}

std::vector<CheckpointPolicy> parse_checkpoint(const std::string& text) {
  if (text == "auto")
    return {CheckpointPolicy::kNone, CheckpointPolicy::kAll, CheckpointPolicy::kNeeded};
  if (text == "none") return {CheckpointPolicy::kNone};
  PIPEPLAN_CHECK(text == "all", "--checkpoint: ", quote(text), " is not one of auto, none, all");
  return {CheckpointPolicy::kAll};
}

// Every size flag is bounded (common/limits.h) so that the search stays finite and fast: the
// search's PlanningContext::validate and SearchOptions::validate name the flag and the bound.
PlanningContext make_context(const PlanOptions& o, const Profile& profile,
                             const std::string& profile_hash) {
  const int64_t memory = parse_size(o.device_memory, "--device-memory");
  PIPEPLAN_CHECK(memory > 0, "--device-memory: ", quote(o.device_memory),
                 ": expected a positive size (e.g. 24GiB)");
  const int per_node = o.devices_per_node.value_or(o.devices);
  const double inter = o.inter_node_bandwidth ? parse_bandwidth(*o.inter_node_bandwidth)
                                              : kDefaultInterNodeBandwidthBytesPerS;
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = o.profile;
  context.profile_hash = profile_hash;
  context.cluster = make_cluster(profile, o.devices, memory, per_node, inter);
  context.global_batch = o.global_batch;
  context.optimizer = parse_optimizer(o.optimizer, "--optimizer");
  context.precision =
      parse_precision(profile.settings.precision, o.profile + ": settings.precision");
  context.notes = planning_notes(profile, context.cluster, o.inter_node_bandwidth.has_value());
  context.data_parallel.overlap = !o.no_overlap;
  if (o.bucket_size) {
    context.data_parallel.bucket_bytes = parse_size(*o.bucket_size, "--bucket-size");
    PIPEPLAN_CHECK(context.data_parallel.bucket_bytes >= kMinBucketBytes, "--bucket-size: ",
                   quote(*o.bucket_size), ": expected at least ", kMinBucketBytes,
                   " bytes (one float32 gradient)");
  }
  return context;
}

// The flags that contradict --inference (forward-only gpipe, nothing recomputed, no optimizer
// state or gradients), and the inference flags given without it; each refused naming the flag.
void check_inference_flags(const PlanOptions& o) {
  if (!o.inference) {
    PIPEPLAN_CHECK(!o.objective, "--objective: ", quote(o.objective.value_or("")),
                   ": only with --inference (training plans are ranked by samples/s)");
    PIPEPLAN_CHECK(!o.max_latency_ms, "--max-latency-ms: ", o.max_latency_ms.value_or(0),
                   ": only with --inference (training plans predict no latency)");
    return;
  }
  const char* why = " with --inference (forward passes stream through gpipe's forward order)";
  PIPEPLAN_CHECK(o.schedule == "auto" || o.schedule == "gpipe", "--schedule: ", quote(o.schedule),
                 ": expected auto or gpipe", why);
  PIPEPLAN_CHECK(!o.virtual_stages, "--virtual-stages: ", o.virtual_stages.value_or(0), ": not",
                 why, ", one chunk per stage");
  PIPEPLAN_CHECK(o.zero.value_or(0) == 0, "--zero: ", o.zero.value_or(0),
                 ": expected 0 with --inference (there is no optimizer state to shard)");
  PIPEPLAN_CHECK(o.checkpoint != "all", "--checkpoint: ", quote(o.checkpoint),
                 ": expected auto or none with --inference (no backward recomputes)");
  PIPEPLAN_CHECK(!o.no_overlap && !o.bucket_size, o.no_overlap ? "--no-overlap" : "--bucket-size",
                 ": not with --inference (there are no gradients to all-reduce)");
  PIPEPLAN_CHECK(!o.calibrate, "--calibrate: ", quote(o.calibrate.value_or("")),
                 ": not with --inference (calibration corrects training plans' models)");
  PIPEPLAN_CHECK(!o.objective || *o.objective == "throughput" || *o.objective == "latency",
                 "--objective: ", quote(o.objective.value_or("")),
                 " is not one of throughput, latency");
  PIPEPLAN_CHECK(!o.max_latency_ms || (std::isfinite(*o.max_latency_ms) && *o.max_latency_ms > 0),
                 "--max-latency-ms: ", o.max_latency_ms.value_or(0),
                 ": expected a positive time in ms");
}

SearchOptions make_search_options(const PlanOptions& o, const Profile& profile) {
  check_inference_flags(o);
  SearchOptions options;
  if (o.inference) {
    options.schedules = {Schedule::kGpipe};
    options.policies = {CheckpointPolicy::kNone};
    options.zero = {0};
    options.objective = o.objective.value_or("throughput") == "latency"
                            ? InferenceObjective::kLatency
                            : InferenceObjective::kThroughput;
    options.max_latency_ms = o.max_latency_ms;
  }
  options.pp = o.pp;
  options.dp = o.dp;
  options.tp = o.tp;
  options.micro_batch_size = o.micro_batch_size;
  if (o.schedule != "auto" && !o.inference)
    options.schedules = {parse_schedule(o.schedule, "--schedule")};
  if (o.virtual_stages) {
    PIPEPLAN_CHECK(options.schedules.size() == 1 &&
                       options.schedules[0] == Schedule::kInterleaved1F1B,
                   "--virtual-stages: ", *o.virtual_stages, ": only with --schedule ",
                   to_string(Schedule::kInterleaved1F1B), " (the schedule is ", quote(o.schedule),
                   ")");
    options.virtual_stages = {*o.virtual_stages};  // its range: SearchOptions::validate
  }
  if (o.zero && !o.inference) options.zero = {*o.zero};  // its range: SearchOptions::validate
  if (!o.inference) options.policies = parse_checkpoint(o.checkpoint);
  options.partition = parse_partition(o.partition, profile.model.num_layers, "--partition");
  options.top_k = o.top;
  return options;
}

std::string split_text(const Plan& plan) {
  std::string text;
  for (size_t idx = 0; idx < plan.stages.size(); ++idx) {
    if (plan.stages.size() > kMaxStagesShown && idx == kMaxStagesShown - 2) {
      text += ",...";
      idx = plan.stages.size() - 1;
    }
    text += detail::concat(idx == 0 ? "" : ",", plan.stages[idx].first, ":", plan.stages[idx].last);
  }
  return text;
}

// The checkpoint column: "none", "all", "1/4 stages" checkpointed whole, "3 layers" recomputed
// one by one (partial checkpointing), or both ("1/4 stages + 3 layers").
std::string checkpoint_text(const Plan& plan) {
  int checkpointed = 0;  // stages, or interleaved-1f1b's chunks
  size_t recomputed = 0;  // layers of stages checkpointed in part
  for (const StagePlan& stage : plan.stages) {
    checkpointed += stage.checkpoint;
    recomputed += stage.recompute_layers.size();
  }
  const std::string layers = detail::concat(recomputed, recomputed == 1 ? " layer" : " layers");
  if (checkpointed == 0) return recomputed == 0 ? "none" : layers;
  if (checkpointed == static_cast<int>(plan.stages.size())) return "all";
  return detail::concat(checkpointed, "/", plan.stages.size(),
                        plan.virtual_stages > 1 ? " chunks" : " stages",
                        recomputed == 0 ? "" : " + " + layers);
}

// The schedule column: interleaved-1f1b with its V ("interleaved-1f1b:4").
std::string schedule_text(const Plan& plan) {
  return plan.virtual_stages > 1
             ? detail::concat(to_string(plan.schedule), ":", plan.virtual_stages)
             : to_string(plan.schedule);
}

// The dp column: "2", with ZeRO-1 "2/z1", with tensor parallelism "2x2" (dp x tp).
std::string dp_text(const Plan& plan) {
  const std::string tp = plan.tp() > 1 ? detail::concat("x", plan.tp()) : "";
  return plan.data_parallel.zero == 1 ? detail::concat(plan.dp, tp, "/z1")
                                      : detail::concat(plan.dp, tp);
}

// The bubble column: "-" for one stage, which has no pipeline and so no bubble.
std::string bubble_text(const Plan& plan) {
  return plan.pp == 1 ? "-" : format_fixed(plan.predictions.bubble_fraction * 100, 1) + "%";
}

// Inference plans: one row each with the interval between requests and one request's latency.
void print_inference_table(const SearchResult& result) {
  std::printf("%-4s %6s %5s %6s %6s %-28s %12s %11s %11s %7s %11s\n", "rank", "dp", "pp", "b", "m",
              "stages", "interval_ms", "latency_ms", "samples/s", "bubble", "peak_memory");
  for (size_t idx = 0; idx < result.plans.size(); ++idx) {
    const Plan& plan = result.plans[idx];
    std::printf("%-4zu %6d %5d %6lld %6d %-28s %12.3f %11.3f %11.1f %7s %11s\n", idx + 1, plan.dp,
                plan.pp, static_cast<long long>(plan.micro_batch_size), plan.num_micro_batches,
                split_text(plan).c_str(), plan.predictions.iteration_ms,
                plan.predictions.latency_ms, plan.predictions.samples_per_s,
                bubble_text(plan).c_str(),
                format_size(plan.predictions.peak_memory_bytes()).c_str());
  }
}

void print_table(const SearchResult& result) {
  if (!result.plans.empty() && result.plans.front().mode == PlanMode::kInference)
    return print_inference_table(result);
  std::printf("%-4s %6s %5s %6s %6s %-18s %-12s %-28s %13s %11s %7s %11s\n", "rank", "dp", "pp", "b",
              "m", "schedule", "checkpoint", "stages", "iteration_ms", "samples/s", "bubble",
              "peak_memory");
  for (size_t idx = 0; idx < result.plans.size(); ++idx) {
    const Plan& plan = result.plans[idx];
    std::printf("%-4zu %6s %5d %6lld %6d %-18s %-12s %-28s %13.3f %11.1f %7s %11s\n", idx + 1,
                dp_text(plan).c_str(), plan.pp, static_cast<long long>(plan.micro_batch_size),
                plan.num_micro_batches, schedule_text(plan).c_str(),
                checkpoint_text(plan).c_str(), split_text(plan).c_str(),
                plan.predictions.iteration_ms, plan.predictions.samples_per_s,
                bubble_text(plan).c_str(),
                format_size(plan.predictions.peak_memory_bytes()).c_str());
  }
}

// With several tensor-parallel sizes: by ascending tp, each size's best plan, or the bound that
// kept it from being searched, so that the choice of tp shows.
void print_best_per_tp(const SearchResult& result) {
  if (result.best_per_tp.empty() && result.unsearched_tp.empty()) return;
  std::printf("best plan per tensor-parallel size:\n");
  auto plan_at = result.best_per_tp.begin();
  auto bound_at = result.unsearched_tp.begin();
  while (plan_at != result.best_per_tp.end() || bound_at != result.unsearched_tp.end()) {
    if (bound_at == result.unsearched_tp.end() ||
        (plan_at != result.best_per_tp.end() && plan_at->tp() < bound_at->first)) {
      const Plan& plan = *plan_at++;
      std::printf("  tp=%-3d %13.3f ms %11.1f samples/s  dp=%s pp=%d b=%lld m=%d %s\n", plan.tp(),
                  plan.predictions.iteration_ms, plan.predictions.samples_per_s,
                  dp_text(plan).c_str(), plan.pp, static_cast<long long>(plan.micro_batch_size),
                  plan.num_micro_batches, schedule_text(plan).c_str());
    } else {
      const auto [tp, bound_ms] = *bound_at++;
      std::printf(
          "  tp=%-3d >= %10.3f ms  not searched: no plan of it can enter the top %zu "
          "(--tp %d plans it)\n",
          tp, bound_ms, result.plans.size(), tp);
    }
  }
}

void print_rejections(const SearchResult& result) {
  for (const std::string& reason : result.infeasible)
    std::printf("infeasible: %s\n", reason.c_str());
  if (result.pruned > 0)
    std::printf("skipped %d of %d candidates: their bound on samples/s is below the top %zu\n",
                result.pruned, result.candidates, result.plans.size());
}

// --calibrate: the calibration the run makes to `profile`, printed; the search then plans
// with calibrated_profile and the calibration's memory corrections.
Calibration calibration_from(const std::string& run_path, const Profile& profile) {
  const Run run = read_run(run_path);
  const Plan run_plan = read_plan(recorded_path(run.plan_path, run_path));
  check_step_times_of_plan(run_plan, run, run_path);
  const CalibrationResult result = calibrate(profile, run_plan, run, run_path);
  for (const std::string& line : describe(result, run)) std::printf("%s\n", line.c_str());
  return result.calibration;
}

int run_plan(const PlanOptions& o) {
  check_outputs_distinct({{"-o", o.output}},
                         {{"--profile", o.profile}, {"--calibrate", o.calibrate.value_or("")}});
  check_writable(o.output, "-o");
  // The profile's bytes are read once, for its hash and its content (tens of MB at 10,000
  // layers); the hash is taken on another thread while they are parsed.
  const std::string profile_bytes = read_json_text(o.profile);
  std::future<std::string> hashed =
      std::async(std::launch::async, [&profile_bytes] { return content_hash(profile_bytes); });
  const Profile measured = parse_profile(profile_bytes, o.profile);
  const std::string profile_hash = hashed.get();
  std::optional<Calibration> calibration;
  if (o.calibrate) calibration = calibration_from(*o.calibrate, measured);
  std::optional<Profile> calibrated;
  if (calibration) calibrated = calibrated_profile(measured, *calibration);
  const Profile& profile = calibrated ? *calibrated : measured;
  PlanningContext context = make_context(o, profile, profile_hash);
  context.calibration = calibration;
  if (o.inference) context.mode = PlanMode::kInference;
  if (calibration)
    context.notes.push_back(detail::concat("models calibrated from ", calibration->run_path,
                                           " (plan.calibration lists the corrections)"));
  PIPEPLAN_CHECK(!calibration || o.tp.value_or(1) == 1, "--tp: ", o.tp.value_or(1),
                 ": expected 1 with --calibrate (a calibration corrects whole layers, not "
                 "shards)");
  SearchOptions options = make_search_options(o, profile);
  if (calibration) options.tp = 1;
  const SearchResult result = search_tensor_parallel(context, options);
  print_rejections(result);
  std::optional<int64_t> micro_batch_size;
  if (!result.plans.empty()) micro_batch_size = result.plans.front().micro_batch_size;
  for (const std::string& warning : planning_warnings(context, micro_batch_size))
    std::printf("warning: %s\n", warning.c_str());
  if (result.plans.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "pipeplan: no feasible plan for %d devices of %s: every candidate was rejected "
                 "(reasons above)\n",
                 o.devices, format_size(context.cluster.device_memory_bytes).c_str());
    return 1;
  }
  print_table(result);
  print_best_per_tp(result);
  for (const std::string& note : result.plans.front().predictions.notes)
    std::printf("note: %s\n", note.c_str());
  check_stream_written(stdout, "standard output");  // before the plan: a failure writes none
  write_plan(o.output, result.plans.front());
  std::printf("wrote %s\n", o.output.c_str());
  return 0;
}

}  // namespace

Runner add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Search dp x pp plans for a cluster and write the best one (plan.json).");
  sub->add_option("--profile", o->profile, "profile.json from `pipeplan profile`")->required();
  sub->add_option("--devices", o->devices, "Number of devices")->required();
  sub->add_option("--device-memory", o->device_memory, "Usable memory per device (24GiB)")
      ->required();
  sub->add_option("--global-batch", o->global_batch,
                  "Samples per optimizer step (with --inference: per request)")
      ->required();
  sub->add_option("--devices-per-node", o->devices_per_node, "Devices per node (default: all)");
  sub->add_option("--inter-node-bandwidth", o->inter_node_bandwidth,
                  "Bandwidth between nodes, a size per second (default 12.5GB, assumed)");
  sub->add_option("--optimizer", o->optimizer, "sgd or adamw")->capture_default_str();
  sub->add_option("--schedule", o->schedule,
                  "auto, gpipe, 1f1b, interleaved-1f1b or zb-h1 (zb-h1 needs a profile with the "
                  "B/W split)")
      ->capture_default_str();
  sub->add_option("--virtual-stages", o->virtual_stages,
                  detail::concat("With --schedule interleaved-1f1b: fix V, the chunks per stage "
                                 "(2 to ", kMaxVirtualStages, "; default: search 2, 3 and 4)"));
  sub->add_option("--zero", o->zero,
                  "Fix ZeRO-1: 1 shards the optimizer state over each stage's replicas, 0 does "
                  "not (default: search both where dp > 1)");
  sub->add_flag("--no-overlap", o->no_overlap,
                "All-reduce the gradients after the last backward instead of each bucket as soon "
                "as its gradients are complete");
  sub->add_option("--bucket-size", o->bucket_size,
                  "Gradient bytes per all-reduce bucket (default 25MiB, as PyTorch DDP)");
  sub->add_option("--pp", o->pp, "Fix the number of stages");
  sub->add_option("--dp", o->dp, "Fix the number of replicas");
  sub->add_option("--tp", o->tp,
                  "Fix the ranks of a tensor-parallel group (default: 1 and each size the "
                  "profile measured shards at that divides the devices per node)");
  sub->add_option("--micro-batch-size", o->micro_batch_size, "Fix the micro-batch size");
  sub->add_option("--checkpoint", o->checkpoint,
                  "auto (none, all, or where a stage does not fit: under gpipe and 1f1b the "
                  "fewest of its layers that make it fit), none or all")->capture_default_str();
  sub->add_option("--partition", o->partition,
                  "optimal, uniform, parameters, greedy-time or ranges FIRST:LAST,... (with "
                  "interleaved-1f1b: pp*V chunk ranges, and --virtual-stages)")
      ->capture_default_str();
  sub->add_option("--top", o->top, "Alternatives to list")->capture_default_str();
  sub->add_option("--calibrate", o->calibrate,
                  "run.json of a plan of this profile: correct the models from its measurements");
  sub->add_flag("--inference", o->inference,
                "Plan forward-only inference (pipeplan infer): gpipe's forward order, weights "
                "and activations in flight only; ranked by --objective");
  sub->add_option("--objective", o->objective,
                  "With --inference: throughput (samples/s, default) or latency (one request)");
  sub->add_option("--max-latency-ms", o->max_latency_ms,
                  "With --inference: keep only plans whose predicted request latency is at most "
                  "this many ms");
  sub->add_option("-o,--output", o->output, "Where to write plan.json")->required();
  sub->footer(detail::concat(
      "Exit status: 0 when a plan was written; 1 when no plan fits (an answer, not bad input: "
      "the reasons are printed); 2 on bad input. Sizes are bounded: --devices, "
      "--devices-per-node, --pp and --dp at most ", kMaxDevices,
      "; --global-batch and --micro-batch-size at most ", kMaxBatchSize, "; at most ",
      kMaxMicroBatches, " micro-batches, and ", kMaxPipelineMicroBatches,
      " micro-batches times stages; --top at most ", kMaxTopK, "."));
  return [o] { return run_plan(*o); };
}

}  // namespace pipeplan::cli
