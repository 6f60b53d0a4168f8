// The format table, the dispatch of `pipeplan export`, and the checks the formats share.
#include "export/export.h"

#include <algorithm>

#include "export/formats.h"
#include "plans/schedule.h"

namespace pipeplan {
namespace {

const char kPipeliningRefusals[] =
    "a layer that is no module path (a merged 'a..b' layer, a whole 'forward'), a parameter tied "
    "across stages, some layers of a stage recomputed (recompute_layers), tensor parallelism";

}  // namespace

const std::vector<ExportFormatInfo>& export_formats() {
  static const std::vector<ExportFormatInfo> formats = {
      {ExportFormat::kTorchPipelining, "torch-pipelining",
       "torch.distributed.pipelining of PyTorch 2.6 and later, with python/pipeplan_pipelining.py",
       "JSON: each stage's module FQNs and checkpoint flag, stage -> rank (loop: s % pp), the "
       "schedule class, n_microbatches, micro-batch size, dp and each rank's replica, every rank's "
       "actions (zb-h1: the CSV that _PipelineScheduleRuntime loads; --schedule-csv writes it)",
       kPipeliningRefusals},
      {ExportFormat::kTorchtitan, "torchtitan",
       "torchtitan v0.2.2 (torchtitan/config/job_config.py)",
       "TOML: [parallelism] pipeline_parallel_degree, module_fqns_per_model_part, "
       "pipeline_parallel_schedule (zb-h1: pipeline_parallel_schedule_csv), "
       "pipeline_parallel_microbatch_size, data_parallel_replicate_degree, "
       "tensor_parallel_degree; [training] "
       "local_batch_size, global_batch_size; [activation_checkpoint] mode",
       "inference plans, ZeRO-1, amp precision, checkpointing on some stages only or of some "
       "layers of a stage, FQNs deeper than 'child' or 'list.item', zb-h1 without "
       "--schedule-csv, and torch-pipelining's refusals except tensor parallelism"},
      {ExportFormat::kMegatron, "megatron",
       "Megatron-LM core_v0.14.0 (megatron/training/arguments.py)",
       "a bash array of pretrain_gpt.py arguments: --pipeline-model-parallel-size, "
       "--pipeline-model-parallel-layout (E t L tokens; V is its stage count over pp), "
       "--num-layers, "
       "--micro-batch-size, --global-batch-size, recompute flags, --use-distributed-optimizer "
       "(ZeRO-1), --tensor-model-parallel-size, --bf16/--fp16",
       "gpipe and zb-h1, inference plans, a model that is not embedding + one repeated decoder "
       "layer kind + output layers, embedding or output layers split over stages, checkpointing on "
       "some stages only or of some layers of a stage, ties other than embedding-output"},
      {ExportFormat::kDeepspeed, "deepspeed",
       "DeepSpeed v0.19.5 (deepspeed/runtime/pipe/module.py, deepspeed/runtime/config.py)",
       "ds_config JSON: train_batch_size, train_micro_batch_size_per_gpu, "
       "gradient_accumulation_steps, pipeline.stages, pipeline.parts (applied by two lines in a "
       "PipelineModule subclass), pipeline.activation_checkpoint_interval, zero_optimization, "
       "bf16/fp16",
       "schedules other than 1f1b (DeepSpeed trains 1F1B only), inference plans, checkpointing "
       "on some stages only or of some layers of a stage, a parameter tied across stages, "
       "tensor parallelism"},
      {ExportFormat::kVllm, "vllm",
       "vLLM main at 001f69f (VLLM_PP_LAYER_PARTITION in vllm/envs.py, get_pp_indices in "
       "vllm/distributed/utils.py)",
       "a shell fragment: VLLM_PP_LAYER_PARTITION (decoder layers per stage), "
       "--pipeline-parallel-size, --tensor-parallel-size, --data-parallel-size, --dtype",
       "training plans, a model that is not a decoder stack, embedding layers off the first "
       "stage or output layers off the last"},
  };
  return formats;
}

ExportFormat parse_export_format(std::string_view text, std::string_view field) {
  std::string names;
  for (const ExportFormatInfo& info : export_formats()) {
    if (text == info.name) return info.format;
    names += std::string(names.empty() ? "" : ", ") + info.name;
  }
  PIPEPLAN_CHECK(false, field, ": ", quote(text), ": expected one of ", names);
  return ExportFormat::kTorchPipelining;
}

std::string to_string(ExportFormat format) {
  for (const ExportFormatInfo& info : export_formats())
    if (info.format == format) return info.name;
  PIPEPLAN_ASSERT(false, "unknown export format");
  return "";
}

ExportModel export_model(const Profile& profile) {
  ExportModel model;
  for (const LayerProfile& layer : profile.layers) {
    model.layer_names.push_back(layer.name);
    model.layer_kinds.push_back(layer.kind);
  }
  model.ties = profile.ties;
  return model;
}

std::vector<std::vector<std::string>> pipelining_actions(const Plan& plan) {
  const bool inference = plan.mode == PlanMode::kInference;
  const std::vector<std::vector<Action>> forward_only =
      inference ? expand_forward_only(plan, plan.num_micro_batches)
                : std::vector<std::vector<Action>>{};
  std::vector<std::vector<std::string>> rows(plan.pp);
  for (int stage_idx = 0; stage_idx < plan.pp; ++stage_idx) {
    const std::vector<Action> actions =
        inference ? forward_only[rank_of(plan, stage_idx, /*replica=*/0)]
                  : stage_actions(plan.schedule, plan.pp, stage_idx, plan.num_micro_batches,
                                  ReplicaActions{}, plan.virtual_stages);
    for (const Action& action : actions) {
      const char* letter = action.kind == ActionKind::kForward          ? "F"
                           : action.kind == ActionKind::kBackward       ? "B"
                           : action.kind == ActionKind::kBackwardInput  ? "I"
                           : action.kind == ActionKind::kBackwardWeight ? "W"
                                                                        : nullptr;
      if (letter == nullptr) continue;  // transfers: the runtime adds its own
      const int stage = chunk_index(plan.pp, stage_idx, action.chunk);
      rows[stage_idx].push_back(std::to_string(stage) + letter +
                                std::to_string(action.micro_batch));
    }
  }
  return rows;
}

std::string actions_csv(const std::vector<std::vector<std::string>>& rows) {
  std::string csv;
  for (const std::vector<std::string>& row : rows) {
    for (size_t idx = 0; idx < row.size(); ++idx) csv += (idx > 0 ? "," : "") + row[idx];
    csv += "\n";
  }
  return csv;
}

ExportFiles export_plan(const Plan& plan, const ExportModel& model, ExportFormat format,
                        const ExportOptions& options) {
  PIPEPLAN_CHECK(model.layer_names.size() == static_cast<size_t>(plan.model.num_layers) &&
                     model.layer_kinds.size() == model.layer_names.size(),
                 "the profile has ", model.layer_names.size(), " layers, the plan's model ",
                 plan.model.num_layers, ": give the profile the plan was made from");
  const exporting::ExportContext ctx{plan, model, options, format};
  ExportFiles files;
  switch (format) {
    case ExportFormat::kTorchPipelining:
      files.document = exporting::torch_pipelining_document(ctx);
      break;
    case ExportFormat::kTorchtitan:
      files.document = exporting::torchtitan_document(ctx);
      break;
    case ExportFormat::kMegatron:
      files.document = exporting::megatron_document(ctx);
      break;
    case ExportFormat::kDeepspeed:
      files.document = exporting::deepspeed_document(ctx);
      break;
    case ExportFormat::kVllm:
      files.document = exporting::vllm_document(ctx);
      break;
  }
  const bool pipelining =
      format == ExportFormat::kTorchPipelining || format == ExportFormat::kTorchtitan;
  if (pipelining && plan.mode == PlanMode::kTraining)
    files.schedule_csv = actions_csv(pipelining_actions(plan));
  return files;
}

namespace exporting {

std::vector<std::string> chunk_layer_names(const ExportContext& ctx, int chunk_idx) {
  const StagePlan& chunk = ctx.plan.stages[chunk_idx];
  return {ctx.model.layer_names.begin() + chunk.first, ctx.model.layer_names.begin() + chunk.last};
}

void check_module_paths(const ExportContext& ctx, int max_depth, std::string_view why_depth) {
  for (size_t layer_idx = 0; layer_idx < ctx.model.layer_names.size(); ++layer_idx) {
    const std::string& name = ctx.model.layer_names[layer_idx];
    PIPEPLAN_EXPORT_CHECK(ctx, name.find("..") == std::string::npos && name != "forward", "layer ",
                          layer_idx, " ", quote(name),
                          ": it is no single module (pipeplan merged calls it could not cut "
                          "between, or the forward has no child calls), so no stage can hold it "
                          "by name");
    const std::vector<std::string_view> parts = [&name] {
      std::vector<std::string_view> pieces;
      for (size_t start = 0;;) {
        const size_t dot = name.find('.', start);
        pieces.push_back(std::string_view(name).substr(start, dot - start));
        if (dot == std::string::npos) return pieces;
        start = dot + 1;
      }
    }();
    const bool empty_part =
        std::any_of(parts.begin(), parts.end(), [](std::string_view part) { return part.empty(); });
    PIPEPLAN_EXPORT_CHECK(ctx, !empty_part, "layer ", layer_idx, " ", quote(name),
                          ": not a module path");
    PIPEPLAN_EXPORT_CHECK(ctx, max_depth <= 0 || static_cast<int>(parts.size()) <= max_depth,
                          "layer ", layer_idx, " ", quote(name), ": ", why_depth);
  }
}

void check_ties_within_chunks(const ExportContext& ctx, std::string_view runtime) {
  std::vector<int> chunk_of_layer(ctx.plan.model.num_layers, 0);
  for (size_t chunk_idx = 0; chunk_idx < ctx.plan.stages.size(); ++chunk_idx)
    for (int layer = ctx.plan.stages[chunk_idx].first; layer < ctx.plan.stages[chunk_idx].last;
         ++layer)
      chunk_of_layer[layer] = static_cast<int>(chunk_idx);
  for (const TiedProfile& tie : ctx.model.ties) {
    const int first = tie.layers.front();
    for (int layer : tie.layers)
      PIPEPLAN_EXPORT_CHECK(
          ctx, chunk_of_layer[layer] == chunk_of_layer[first], "a parameter tied between layers ",
          quote(ctx.model.layer_names[first]), " (stage ", chunk_of_layer[first], ") and ",
          quote(ctx.model.layer_names[layer]), " (stage ", chunk_of_layer[layer], "): ", runtime,
          " keeps a copy per stage and does not sum their gradients (untie "
          "them, or plan with --partition ranges that keep them together)");
  }
}

void check_whole_stage_checkpointing(const ExportContext& ctx, std::string_view runtime) {
  const auto& stages = ctx.plan.stages;
  for (size_t chunk_idx = 0; chunk_idx < stages.size(); ++chunk_idx)
    PIPEPLAN_EXPORT_CHECK(ctx, stages[chunk_idx].recompute_layers.empty(), "stages[", chunk_idx,
                          "].recompute_layers (", stages[chunk_idx].recompute_layers.size(),
                          " of its layers recomputed): ", runtime,
                          " recomputes whole stages or none (plan with --checkpoint none or all)");
}

bool uniform_checkpointing(const ExportContext& ctx, std::string_view setting) {
  check_whole_stage_checkpointing(ctx, setting);
  const auto& stages = ctx.plan.stages;
  const auto checkpointed = static_cast<size_t>(std::count_if(
      stages.begin(), stages.end(), [](const StagePlan& stage) { return stage.checkpoint; }));
  PIPEPLAN_EXPORT_CHECK(ctx, checkpointed == 0 || checkpointed == stages.size(),
                        "checkpointing on ", checkpointed, " of ", stages.size(),
                        " stages: ", setting,
                        " applies to every stage (plan with --checkpoint all or none)");
  return checkpointed > 0;
}

void check_mode(const ExportContext& ctx, PlanMode mode, std::string_view remedy) {
  PIPEPLAN_EXPORT_CHECK(ctx, ctx.plan.mode == mode, "a plan of mode ", to_string(ctx.plan.mode),
                        ": ", remedy);
}

std::string quoted_text(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// pretty_json's objects of this many scalar entries or fewer take one line.
constexpr size_t kInlineObjectKeys = 3;

std::string pretty_json(const nlohmann::ordered_json& value, int indent) {
  const std::string pad(indent, ' ');
  const std::string inner(indent + 2, ' ');
  const bool all_scalars = std::none_of(
      value.begin(), value.end(), [](const auto& element) { return element.is_structured(); });
  // A small record of scalars (a rank's placement) stays on one line too.
  if (value.is_object() && all_scalars && value.size() <= kInlineObjectKeys) {
    std::string out = "{";
    for (auto it = value.begin(); it != value.end(); ++it)
      out += detail::concat(it == value.begin() ? "" : ", ", quoted_text(it.key()), ": ",
                            it.value().dump());
    return out + "}";
  }
  if (value.is_object()) {
    std::string out = "{\n";
    for (auto it = value.begin(); it != value.end(); ++it)
      out += detail::concat(it == value.begin() ? "" : ",\n", inner, quoted_text(it.key()), ": ",
                            pretty_json(it.value(), indent + 2));
    return out + "\n" + pad + "}";
  }
  if (!value.is_array() || value.empty()) return value.dump();
  const bool flat = std::none_of(value.begin(), value.end(),
                                 [](const auto& element) { return element.is_structured(); });
  std::string out = flat ? "[" : "[\n";
  for (size_t idx = 0; idx < value.size(); ++idx)
    out += flat ? (idx > 0 ? ", " : "") + value[idx].dump()
                : (idx > 0 ? ",\n" : "") + inner + pretty_json(value[idx], indent + 2);
  return out + (flat ? "]" : "\n" + pad + "]");
}

std::string target_of(ExportFormat format) {
  for (const ExportFormatInfo& info : export_formats())
    if (info.format == format) return info.target;
  return "";
}

std::string header_comment(const ExportContext& ctx) {
  return detail::concat("# pipeplan export --to ", to_string(ctx.format), " of ",
                        ctx.options.plan_path.empty() ? "a plan" : quote(ctx.options.plan_path),
                        " (plan hash ", plan_hash(ctx.plan), "), for ", target_of(ctx.format),
                        "\n");
}

}  // namespace exporting
}  // namespace pipeplan
