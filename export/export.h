// `pipeplan export`: a plan written in the form another runtime takes (torch.distributed
// .pipelining, torchtitan, Megatron-LM, DeepSpeed, vLLM), or a one-line refusal naming what the
// target cannot express. LibTorch-free: the formats need the plan and its profile's layer names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "plans/plan.h"
#include "plans/profile.h"

namespace pipeplan {

/// The runtimes a plan can be exported to (docs/export.md).
enum class ExportFormat { kTorchPipelining, kTorchtitan, kMegatron, kDeepspeed, kVllm };

/// One format as `pipeplan export --help` lists it.
struct ExportFormatInfo {
  ExportFormat format = ExportFormat::kTorchPipelining;
  const char* name = "";     ///< the word --to takes: "torch-pipelining", "torchtitan", ...
  const char* target = "";   ///< the runtime version whose keys and grammar the output follows
  const char* emits = "";    ///< what the output holds
  const char* refuses = "";  ///< what the target cannot express (the plans refused)
};

/// Every format, in the order of `pipeplan export --help`.
const std::vector<ExportFormatInfo>& export_formats();
/// The format named `text`; throws Error(kBadInput) naming `field` and listing the formats.
ExportFormat parse_export_format(std::string_view text, std::string_view field);
std::string to_string(ExportFormat format);  ///< its --to word

/// What the formats need of the model besides the plan: its layers as the profile names them.
/// A TorchScript model's layer is named by the attribute path of its call, which is the
/// fully qualified name (FQN) of that module in the user's nn.Module; a merged layer is named
/// "first..last"; a zoo model's layers by the zoo ("stem", "layer1.0", "head").
struct ExportModel {
  std::vector<std::string> layer_names;  ///< one per layer of the plan's model
  std::vector<std::string> layer_kinds;  ///< the module's class name, "group" for a merged layer
  std::vector<TiedProfile> ties;         ///< parameters several layers use
};

/// The layer names, kinds and ties of `profile`.
ExportModel export_model(const Profile& profile);

/// How the output is written.
struct ExportOptions {
  /// Where the per-rank action CSV (zb-h1) is written, for formats that name the file
  /// (torchtitan's pipeline_parallel_schedule_csv); "" when it is not written.
  std::string schedule_csv_path;
  /// The plan file, named in the output's header (informational).
  std::string plan_path;
};

/// The files of one export.
struct ExportFiles {
  std::string document;      ///< the format's file: JSON, TOML or a shell fragment
  std::string schedule_csv;  ///< pipelining's per-rank action CSV; "" when the format has none
};

/// `plan` in `format`. `model` must describe plan.model (one name and kind per layer: checked).
/// Throws Error(kBadInput) with one line "<format> cannot express ...: ... (what to change)" when
/// the target has no form for the plan: its schedule, stage layout, per-stage checkpointing,
/// ZeRO-1, precision, mode, or layer names the target cannot take (export_formats().refuses).
ExportFiles export_plan(const Plan& plan, const ExportModel& model, ExportFormat format,
                        const ExportOptions& options);

/// The per-rank compute actions of `plan` in torch.distributed.pipelining's notation, one row per
/// pipeline rank: "<stage>F<mb>" forward, "<stage>B<mb>" whole backward, "<stage>I<mb>" and
/// "<stage>W<mb>" zb-h1's input- and weight-gradient halves, where <stage> is the global stage
/// (chunk) index; the order of plans/schedule.h's expansion (forward-only for inference plans).
std::vector<std::vector<std::string>> pipelining_actions(const Plan& plan);

/// The rows as the CSV `_PipelineScheduleRuntime._load_csv` reads: one line per rank, actions
/// separated by commas.
std::string actions_csv(const std::vector<std::vector<std::string>>& rows);

}  // namespace pipeplan
