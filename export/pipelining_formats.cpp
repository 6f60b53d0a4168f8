// The torch.distributed.pipelining formats: pipeplan's own JSON description (read by
// python/pipeplan_pipelining.py) and torchtitan's job-config TOML.
#include <nlohmann/json.hpp>

#include "export/formats.h"

namespace pipeplan::exporting {
namespace {

using OrderedJson = nlohmann::ordered_json;

/// The description's schema; python/pipeplan_pipelining.py refuses other versions.
constexpr const char* kTorchPipeliningSchema = "pipeplan.export.torch-pipelining/1";

// The torch.distributed.pipelining class that runs the plan's schedule. zb-h1 has no class of
// its own for one stage per rank: the runtime class loads its per-rank actions (I and W split).
std::string pipelining_schedule_class(const Plan& plan) {
  if (plan.mode == PlanMode::kInference) return "ScheduleGPipe";  // forwards only, no loss_fn
  switch (plan.schedule) {
    case Schedule::kGpipe:
      return "ScheduleGPipe";
    case Schedule::kOneFOneB:
      return "Schedule1F1B";
    case Schedule::kInterleaved1F1B:
      return "ScheduleInterleaved1F1B";
    case Schedule::kZeroBubbleH1:
      return "_PipelineScheduleRuntime";
  }
  return "";
}

// torchtitan's pipeline_parallel_schedule: a name torch's get_schedule_class knows. For zb-h1
// the CSV decides the order; "1F1B" makes torchtitan place one stage per rank.
std::string torchtitan_schedule_name(const Plan& plan) {
  switch (plan.schedule) {
    case Schedule::kGpipe:
      return "GPipe";
    case Schedule::kOneFOneB:
    case Schedule::kZeroBubbleH1:
      return "1F1B";
    case Schedule::kInterleaved1F1B:
      return "Interleaved1F1B";
  }
  return "";
}

OrderedJson stage_entries(const ExportContext& ctx) {
  OrderedJson stages = OrderedJson::array();
  for (size_t chunk_idx = 0; chunk_idx < ctx.plan.stages.size(); ++chunk_idx) {
    const StagePlan& chunk = ctx.plan.stages[chunk_idx];
    stages.push_back({{"stage_index", chunk_idx},
                      {"pp_rank", static_cast<int>(chunk_idx) % ctx.plan.pp},
                      {"layers", {chunk.first, chunk.last}},
                      {"modules", chunk_layer_names(ctx, static_cast<int>(chunk_idx))},
                      {"checkpoint", chunk.checkpoint}});
  }
  return stages;
}

OrderedJson rank_entries(const Plan& plan) {
  OrderedJson ranks = OrderedJson::array();
  for (const RankAssignment& rank : plan.ranks)
    ranks.push_back({{"rank", rank.rank}, {"pp_rank", rank.stage}, {"replica", rank.replica}});
  return ranks;
}

}  // namespace

std::string torch_pipelining_document(const ExportContext& ctx) {
  PIPEPLAN_EXPORT_CHECK(ctx, ctx.plan.tp() == 1, "tensor_parallel.tp = ", ctx.plan.tp(),
                        ": its stages run the model's own modules whole on one rank each "
                        "(plan with --tp 1, or export to torchtitan or megatron)");
  check_module_paths(ctx, /*max_depth=*/0, "");
  check_ties_within_chunks(ctx, "torch.distributed.pipelining");
  check_whole_stage_checkpointing(ctx, "this document's \"checkpoint\" flag");
  const Plan& plan = ctx.plan;
  OrderedJson doc = {
      {"schema", kTorchPipeliningSchema},
      {"target", target_of(ctx.format)},
      {"plan", {{"path", ctx.options.plan_path}, {"hash", plan_hash(plan)}}},
      {"model", {{"name", plan.model.name}, {"hash", plan.model.hash}}},
      {"mode", to_string(plan.mode)},
      {"pp", plan.pp},
      {"dp", plan.dp},
      {"virtual_stages", plan.virtual_stages},
      {"schedule", plan.mode == PlanMode::kInference ? "forward" : to_string(plan.schedule)},
      {"schedule_class", pipelining_schedule_class(plan)},
      {"n_microbatches", plan.num_micro_batches},
      {"micro_batch_size", plan.micro_batch_size},
      {"global_batch", plan.global_batch},
      {"precision", to_string(plan.precision)},
      {"zero", plan.dp > 1 ? plan.data_parallel.zero : 0},
      {"stages", stage_entries(ctx)},
      {"ranks", rank_entries(plan)},
      {"actions", pipelining_actions(plan)},
  };
  return pretty_json(doc) + "\n";
}

namespace {

// What torchtitan's job config cannot express; returns whether every stage checkpoints.
bool check_torchtitan_plan(const ExportContext& ctx) {
  const Plan& plan = ctx.plan;
  check_mode(ctx, PlanMode::kTraining,
             "torchtitan trains (export an inference plan to vllm or torch-pipelining)");
  check_module_paths(ctx, /*max_depth=*/2,
                     "torchtitan's pipeline_module_split keeps top-level modules and the items "
                     "of a top-level ModuleList or ModuleDict only");
  check_ties_within_chunks(ctx, "torchtitan's pipeline_module_split");
  PIPEPLAN_EXPORT_CHECK(ctx, plan.dp == 1 || plan.data_parallel.zero == 0,
                        "ZeRO-1 (data_parallel.zero = 1): torchtitan's sharded data parallelism "
                        "is FSDP, which shards parameters and gradients too (plan with --zero 0)");
  PIPEPLAN_EXPORT_CHECK(
      ctx, plan.precision == Precision::kFp32, "precision ", to_string(plan.precision),
      ": torchtitan applies mixed precision through FSDP, or autocast without "
      "any other parallelism, so its pipeline stages with "
      "data_parallel_shard_degree = 1 train in fp32 (plan with --precision fp32)");
  PIPEPLAN_EXPORT_CHECK(
      ctx, plan.schedule != Schedule::kZeroBubbleH1 || !ctx.options.schedule_csv_path.empty(),
      "schedule zb-h1 without a CSV file: torchtitan reads its actions from "
      "pipeline_parallel_schedule_csv (give --schedule-csv FILE)");
  return uniform_checkpointing(ctx, "torchtitan's activation_checkpoint.mode");
}

// module_fqns_per_model_part's value: one array of FQNs per chunk, in plan order.
std::string model_parts_toml(const ExportContext& ctx) {
  std::string fqns = "[\n";
  for (size_t chunk_idx = 0; chunk_idx < ctx.plan.stages.size(); ++chunk_idx) {
    fqns += "  [";
    const std::vector<std::string> names = chunk_layer_names(ctx, static_cast<int>(chunk_idx));
    for (size_t idx = 0; idx < names.size(); ++idx)
      fqns += (idx > 0 ? ", " : "") + quoted_text(names[idx]);
    fqns += "],\n";
  }
  return fqns + "]";
}

}  // namespace

std::string torchtitan_document(const ExportContext& ctx) {
  const Plan& plan = ctx.plan;
  const bool checkpoint_all = check_torchtitan_plan(ctx);
  std::string toml = header_comment(ctx);
  toml += detail::concat(
      "# per data-parallel rank: ", plan.num_micro_batches, " micro-batches of ",
      plan.micro_batch_size,
      " samples\n\n[training]\nlocal_batch_size = ", plan.num_micro_batches * plan.micro_batch_size,
      "\nglobal_batch_size = ", plan.global_batch,
      "\nmixed_precision_param = \"float32\"\n\n[parallelism]\npipeline_parallel_degree = ",
      plan.pp, "\npipeline_parallel_schedule = ", quoted_text(torchtitan_schedule_name(plan)),
      "\n");
  if (!ctx.options.schedule_csv_path.empty())
    toml += "pipeline_parallel_schedule_csv = " + quoted_text(ctx.options.schedule_csv_path) + "\n";
  toml += detail::concat("pipeline_parallel_microbatch_size = ", plan.micro_batch_size,
                         "\nmodule_fqns_per_model_part = ", model_parts_toml(ctx),
                         "\ndata_parallel_replicate_degree = ", plan.dp,
                         "\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = ", plan.tp(),
                         "\n\n");
  if (plan.tp() > 1)
    toml +=
        "# torchtitan's tensor parallelism splits the embedding and the output layer by the\n"
        "# vocabulary too, where the plan kept them whole on each rank: they take 1/tp of the\n"
        "# memory the plan predicted for them.\n";
  // A TorchScript file's configuration records its content hash: pipeplan split its MLPs only.
  if (plan.tp() > 1 && plan.model.config.contains("file_hash"))
    toml +=
        "# pipeplan split only this TorchScript model's MLPs and kept attention whole on each\n"
        "# rank; torchtitan's tensor parallelism splits attention by heads too, so its blocks\n"
        "# take less memory and time than the plan predicted.\n";
  if (checkpoint_all)
    toml +=
        "# torchtitan's full mode checkpoints each transformer block: a stage keeps every "
        "block's input\n# per micro-batch in flight, where the plan counted the stage's input "
        "alone.\n";
  toml += detail::concat(
      "[activation_checkpoint]\nmode = ", quoted_text(checkpoint_all ? "full" : "none"), "\n");
  return toml;
}

}  // namespace pipeplan::exporting
