// The formats' shared pieces (inside export/): the context one export reads, the refusal
// helper, each chunk's module names, and the decoder-stack reading of Megatron-LM and vLLM.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "export/export.h"

namespace pipeplan::exporting {

/// Everything one export reads.
struct ExportContext {
  // References to the caller's objects, which outlive the export.
  const Plan& plan;
  const ExportModel& model;
  const ExportOptions& options;
  ExportFormat format;
};

/// Throws the one-line refusal "<format> cannot express <what> (<remedy>)" unless `cond`.
#define PIPEPLAN_EXPORT_CHECK(ctx, cond, ...) \
  PIPEPLAN_CHECK(cond, ::pipeplan::to_string((ctx).format), " cannot express ", __VA_ARGS__)

/// The layer names of chunk `chunk_idx` (plan.stages[chunk_idx]), in layer order.
std::vector<std::string> chunk_layer_names(const ExportContext& ctx, int chunk_idx);

/// Refuses a layer whose name is not a module path: a merged layer ("a..b"), the whole forward
/// ("forward"), an empty name or an empty path component; and, with `max_depth` > 0, a path of
/// more than `max_depth` components.
void check_module_paths(const ExportContext& ctx, int max_depth, std::string_view why_depth);

/// Refuses a tie (a parameter several layers use) whose layers sit on different chunks: the
/// pipelining runtimes keep one copy per stage and do not sum their gradients.
void check_ties_within_chunks(const ExportContext& ctx, std::string_view runtime);

/// Refuses partial checkpointing (a stage recomputing some of its layers), which `runtime`
/// cannot run.
void check_whole_stage_checkpointing(const ExportContext& ctx, std::string_view runtime);

/// Refuses mixed per-stage checkpointing, and partial checkpointing; returns whether every chunk
/// is checkpointed.
bool uniform_checkpointing(const ExportContext& ctx, std::string_view setting);

/// Refuses an inference plan (training targets) or a training plan (serving targets).
void check_mode(const ExportContext& ctx, PlanMode mode, std::string_view remedy);

/// A decoder-only stack as Megatron-LM's layout tokens and vLLM's partition see it: layers
/// [0, first_decoder) are the embedding, [first_decoder, end_decoder) the decoder layers (all of
/// one kind, the kind most layers share), [end_decoder, num_layers) the final norm, output layer
/// and loss.
struct DecoderStack {
  std::string decoder_kind;  ///< the profile's kind of the decoder layers ("Block")
  int first_decoder = 0;     ///< the first decoder layer
  int end_decoder = 0;       ///< one past the last decoder layer
  std::vector<int> decoder_layers_per_chunk;  ///< per plan.stages entry
};

/// The plan's model read as a decoder stack; refuses a model that is not one (no repeated kind,
/// decoder layers not contiguous, no embedding before them or no output layer after them) and a
/// plan whose embedding layers are not all in the first chunk or whose output layers are not all
/// in the last.
DecoderStack decoder_stack(const ExportContext& ctx);

/// `text` as a double-quoted JSON/TOML basic string (backslash, quote and control characters
/// escaped).
std::string quoted_text(std::string_view text);

/// `value` as indented JSON with arrays of numbers and strings on one line (a stage's modules,
/// a rank's actions), so that the files read like the configs people write.
std::string pretty_json(const nlohmann::ordered_json& value, int indent = 0);

/// The header line of a text format: "# pipeplan export --to F of PLAN (hash H), for TARGET".
std::string header_comment(const ExportContext& ctx);

/// The target version of a format (export_formats().target).
std::string target_of(ExportFormat format);

/// Each format's document (export_formats() describes them); each throws the format's refusals.
/// The JSON description python/pipeplan_pipelining.py reads (pipelining_formats.cpp).
std::string torch_pipelining_document(const ExportContext& ctx);
/// torchtitan's [training], [parallelism] and [activation_checkpoint] keys as TOML.
std::string torchtitan_document(const ExportContext& ctx);
/// A bash array of Megatron-LM's pretrain_gpt.py arguments (launcher_formats.cpp).
std::string megatron_document(const ExportContext& ctx);
/// A DeepSpeed ds_config with the stage boundaries in pipeline.parts.
std::string deepspeed_document(const ExportContext& ctx);
/// VLLM_PP_LAYER_PARTITION and vllm serve's flags as a shell fragment.
std::string vllm_document(const ExportContext& ctx);

}  // namespace pipeplan::exporting
