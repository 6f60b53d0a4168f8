// The formats of runtimes that build the model themselves from a layer list or a decoder
// stack: Megatron-LM's arguments, DeepSpeed's ds_config with its parts, vLLM's partition.
#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "export/formats.h"

namespace pipeplan::exporting {
namespace {

// The kind most layers share; "" when no kind repeats or two kinds tie for the most.
std::string most_common_kind(const std::vector<std::string>& kinds) {
  std::map<std::string, int> counts;
  for (const std::string& kind : kinds)
    if (kind != "group") ++counts[kind];
  std::string best;
  int best_count = 1;
  bool tied = false;
  for (const auto& [kind, count] : counts) {
    if (count > best_count) {
      best = kind;
      best_count = count;
      tied = false;
    } else if (count == best_count && !best.empty()) {
      tied = true;
    }
  }
  return tied ? "" : best;
}

// The chunk (plan.stages index) holding `layer`.
int chunk_of(const Plan& plan, int layer) {
  for (size_t chunk_idx = 0; chunk_idx < plan.stages.size(); ++chunk_idx)
    if (layer >= plan.stages[chunk_idx].first && layer < plan.stages[chunk_idx].last)
      return static_cast<int>(chunk_idx);
  PIPEPLAN_ASSERT(false, "layer ", layer, " in no stage");
  return 0;
}

// "t*3", "t", or "" for n decoder layers: Megatron's repetition x*n.
std::string decoder_tokens(int n) {
  if (n == 0) return "";
  return n == 1 ? "t" : "t*" + std::to_string(n);
}

// The decoder layers: the run of the kind most layers share, with layers before and after it.
DecoderStack find_decoder_run(const ExportContext& ctx) {
  const std::vector<std::string>& kinds = ctx.model.layer_kinds;
  DecoderStack stack;
  stack.decoder_kind = most_common_kind(kinds);
  PIPEPLAN_EXPORT_CHECK(ctx, !stack.decoder_kind.empty(),
                        "a model without a decoder stack: no layer kind repeats more often than "
                        "all others, so no layers read as its decoder layers");
  const auto first = std::find(kinds.begin(), kinds.end(), stack.decoder_kind);
  const auto last = std::find(kinds.rbegin(), kinds.rend(), stack.decoder_kind).base();
  stack.first_decoder = static_cast<int>(first - kinds.begin());
  stack.end_decoder = static_cast<int>(last - kinds.begin());
  for (int layer = stack.first_decoder; layer < stack.end_decoder; ++layer)
    PIPEPLAN_EXPORT_CHECK(ctx, kinds[layer] == stack.decoder_kind, "layer ", layer, " ",
                          quote(ctx.model.layer_names[layer]), " of kind ", quote(kinds[layer]),
                          " between the decoder layers (kind ", quote(stack.decoder_kind),
                          "): the target has no token for it");
  const bool has_embedding = stack.first_decoder > 0;
  const bool has_output = stack.end_decoder < static_cast<int>(kinds.size());
  PIPEPLAN_EXPORT_CHECK(ctx, has_embedding && has_output, "a model without ",
                        (has_embedding ? "output" : "embedding"),
                        " layers around its decoder layers (kind ", quote(stack.decoder_kind),
                        "): the target's stack starts with an embedding and ends with the "
                        "output layer");
  return stack;
}

}  // namespace

DecoderStack decoder_stack(const ExportContext& ctx) {
  DecoderStack stack = find_decoder_run(ctx);
  const Plan& plan = ctx.plan;
  const int last_chunk = static_cast<int>(plan.stages.size()) - 1;
  for (int layer = 0; layer < stack.first_decoder; ++layer)
    PIPEPLAN_EXPORT_CHECK(ctx, chunk_of(plan, layer) == 0, "embedding layer ",
                          quote(ctx.model.layer_names[layer]), " on stage ", chunk_of(plan, layer),
                          ": the target builds the embedding on the first stage only (replan "
                          "with stage boundaries after layer ",
                          stack.first_decoder - 1, ")");
  for (int layer = stack.end_decoder; layer < plan.model.num_layers; ++layer)
    PIPEPLAN_EXPORT_CHECK(ctx, chunk_of(plan, layer) == last_chunk, "output layer ",
                          quote(ctx.model.layer_names[layer]), " on stage ", chunk_of(plan, layer),
                          ": the target builds the final norm and output layer on the last stage "
                          "only (replan with stage boundaries before layer ",
                          stack.end_decoder, ")");
  for (const StagePlan& chunk : plan.stages)
    stack.decoder_layers_per_chunk.push_back(std::max(
        0, std::min(chunk.last, stack.end_decoder) - std::max(chunk.first, stack.first_decoder)));
  return stack;
}

namespace {

// Whether the model's ties are Megatron's embedding-output tie; refuses any other tie.
bool ties_embedding_with_output(const ExportContext& ctx, const DecoderStack& stack) {
  for (const TiedProfile& tie : ctx.model.ties) {
    const bool ends = tie.layers.size() == 2 && tie.layers.front() < stack.first_decoder &&
                      tie.layers.back() >= stack.end_decoder;
    PIPEPLAN_EXPORT_CHECK(ctx, ends, "a parameter tied between layers ",
                          quote(ctx.model.layer_names[tie.layers.front()]), " and ",
                          quote(ctx.model.layer_names[tie.layers.back()]),
                          ": Megatron-LM ties the embedding with the output layer only");
  }
  return !ctx.model.ties.empty();
}

// --pipeline-model-parallel-layout: the chunks in plan order (Megatron's index v·pp + s).
std::string megatron_layout(const DecoderStack& stack) {
  std::string layout;
  const size_t num_chunks = stack.decoder_layers_per_chunk.size();
  for (size_t chunk_idx = 0; chunk_idx < num_chunks; ++chunk_idx) {
    if (chunk_idx > 0) layout += "|";
    if (chunk_idx == 0) layout += "E";
    layout += decoder_tokens(stack.decoder_layers_per_chunk[chunk_idx]);
    if (chunk_idx == num_chunks - 1) layout += "L";
  }
  return layout;
}

std::string megatron_args(const ExportContext& ctx, const DecoderStack& stack, bool checkpoint_all,
                          bool tied) {
  const Plan& plan = ctx.plan;
  std::string args = detail::concat(
      "  --pipeline-model-parallel-size ", plan.pp, "\n  --pipeline-model-parallel-layout '",
      megatron_layout(stack), "'\n  --num-layers ", stack.end_decoder - stack.first_decoder,
      "\n  --micro-batch-size ", plan.micro_batch_size, "\n  --global-batch-size ",
      plan.global_batch, "\n  --tensor-model-parallel-size ", plan.tp(), "\n");
  // Megatron's uniform method checkpoints runs of N decoder layers from each stage's first:
  // N = the most layers of a stage makes every stage one run that keeps only its input.
  const int max_decoder_layers = *std::max_element(stack.decoder_layers_per_chunk.begin(),
                                                   stack.decoder_layers_per_chunk.end());
  if (checkpoint_all)
    args += detail::concat(
        "  --recompute-granularity full\n  --recompute-method uniform\n  --recompute-num-layers ",
        std::max(1, max_decoder_layers), "\n");
  if (plan.dp > 1 && plan.data_parallel.zero == 1) args += "  --use-distributed-optimizer\n";
  if (plan.precision == Precision::kAmpBf16) args += "  --bf16\n";
  if (plan.precision == Precision::kAmpFp16) args += "  --fp16\n";
  if (!tied) args += "  --untie-embeddings-and-output-weights\n";
  return args;
}

}  // namespace

std::string megatron_document(const ExportContext& ctx) {
  const Plan& plan = ctx.plan;
  check_mode(ctx, PlanMode::kTraining, "Megatron-LM's pretrain scripts train");
  PIPEPLAN_EXPORT_CHECK(
      ctx, plan.schedule == Schedule::kOneFOneB || plan.schedule == Schedule::kInterleaved1F1B,
      "schedule ", to_string(plan.schedule),
      ": Megatron-LM runs 1F1B and interleaved 1F1B only (plan with --schedule 1f1b or "
      "interleaved-1f1b)");
  const DecoderStack stack = decoder_stack(ctx);
  const bool checkpoint_all = uniform_checkpointing(ctx, "Megatron-LM's --recompute-method");
  const bool tied = ties_embedding_with_output(ctx, stack);
  return header_comment(ctx) +
         detail::concat(
             "# layout: E embedding, t decoder layer (", quote(stack.decoder_kind),
             "), L output layer and loss; stages split by |\n# data parallel ", plan.dp,
             " is implied: start ", plan.dp * plan.tp() * plan.pp,
             " ranks (torchrun --nproc-per-node ...) with these arguments\n",
             plan.tp() > 1 ? "# Megatron-LM's tensor parallelism splits the embedding and the "
                             "output layer by the\n# vocabulary too, where the plan kept them "
                             "whole on each rank: they take 1/tp of the\n# memory the plan "
                             "predicted for them.\n"
                           : "",
             "PIPEPLAN_MEGATRON_ARGS=(\n", megatron_args(ctx, stack, checkpoint_all, tied), ")\n");
}

std::string deepspeed_document(const ExportContext& ctx) {
  const Plan& plan = ctx.plan;
  check_mode(ctx, PlanMode::kTraining,
             "DeepSpeed's PipelineEngine trains (export an inference plan to vllm or "
             "torch-pipelining)");
  PIPEPLAN_EXPORT_CHECK(ctx, plan.schedule == Schedule::kOneFOneB, "schedule ",
                        to_string(plan.schedule),
                        ": DeepSpeed's PipelineEngine runs its 1F1B TrainSchedule only, one "
                        "stage per rank (plan with --schedule 1f1b)");
  PIPEPLAN_EXPORT_CHECK(ctx, plan.tp() == 1, "tensor_parallel.tp = ", plan.tp(),
                        ": DeepSpeed's pipeline configuration has no tensor-parallel degree (its "
                        "PipelineModule takes one from a Megatron-style topology the model "
                        "builds; plan with --tp 1, or export to megatron)");
  check_ties_within_chunks(ctx, "DeepSpeed without TiedLayerSpec");
  const bool checkpoint_all =
      uniform_checkpointing(ctx, "DeepSpeed's activation_checkpoint_interval");
  std::vector<int> parts = {0};
  int max_stage_layers = 0;
  for (const StagePlan& stage : plan.stages) {
    parts.push_back(stage.last);
    max_stage_layers = std::max(max_stage_layers, stage.last - stage.first);
  }
  nlohmann::ordered_json pipeline = {
      {"stages", plan.pp},
      {"parts", parts},
      // One interval as long as the longest stage: each checkpointed stage is one checkpointed
      // block keeping only its input, as the plan's memory model counts it.
      {"activation_checkpoint_interval", checkpoint_all ? max_stage_layers : 0},
      {"layers", ctx.model.layer_names},
  };
  nlohmann::ordered_json config = {
      {"train_batch_size", plan.global_batch},
      {"train_micro_batch_size_per_gpu", plan.micro_batch_size},
      {"gradient_accumulation_steps", plan.num_micro_batches},
      {"pipeline", pipeline},
  };
  if (plan.dp > 1 && plan.data_parallel.zero == 1) config["zero_optimization"] = {{"stage", 1}};
  if (plan.precision == Precision::kAmpBf16) config["bf16"] = {{"enabled", true}};
  if (plan.precision == Precision::kAmpFp16) config["fp16"] = {{"enabled", true}};
  config["pipeplan"] = {{"target", target_of(ctx.format)},
                        {"plan", {{"path", ctx.options.plan_path}, {"hash", plan_hash(plan)}}}};
  return pretty_json(config) + "\n";
}

std::string vllm_document(const ExportContext& ctx) {
  const Plan& plan = ctx.plan;
  check_mode(ctx, PlanMode::kInference,
             "vLLM serves (plan with --inference; train with torch-pipelining, torchtitan, "
             "megatron or deepspeed)");
  const DecoderStack stack = decoder_stack(ctx);
  std::string partition;
  for (const int layers : stack.decoder_layers_per_chunk)
    partition += (partition.empty() ? "" : ",") + std::to_string(layers);
  const char* dtype = plan.precision == Precision::kAmpBf16   ? "bfloat16"
                      : plan.precision == Precision::kAmpFp16 ? "float16"
                                                              : "float32";
  return header_comment(ctx) +
         detail::concat("# decoder layers (", quote(stack.decoder_kind),
                        ") per pipeline stage; vLLM puts the embedding on the first stage and the\n"
                        "# final norm and lm_head on the last. vLLM batches requests itself: the "
                        "plan's ",
                        plan.num_micro_batches, " micro-batches of ", plan.micro_batch_size,
                        " have no flag.\nexport VLLM_PP_LAYER_PARTITION=", partition,
                        "\nPIPEPLAN_VLLM_ARGS=(\n  --pipeline-parallel-size ", plan.pp,
                        "\n  --tensor-parallel-size ", plan.tp(), "\n  --data-parallel-size ",
                        plan.dp, "\n  --dtype ", dtype,
                        "\n)\n# vllm serve MODEL \"${PIPEPLAN_VLLM_ARGS[@]}\"\n");
}

}  // namespace pipeplan::exporting
