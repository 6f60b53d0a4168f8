// A user's own model: a TorchScript file whose forward chains its children, as a layer sequence.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "models/model.h"

namespace pipeplan::models {

/// Whether `name` names a TorchScript file rather than a zoo model: it contains '/' or ends in
/// ".pt" or ".pth" (zoo names never do). A relative path is read from the current directory.
bool is_torchscript_path(const std::string& name);

/// The model saved at `path` (torch.jit.script(module).save(path) in PyTorch). The module's
/// forward must chain its children: take one tensor, pass it through children one after another
/// and return the last one's output (a scripted nn.Sequential, or a module whose forward runs
/// `for layer in self.layers: x = layer(x)`). Those children, in call order, are the layers,
/// named by their attribute paths ("0", "layers.3"). When forward calls a single child whose own
/// forward is such a chain (`return self.layers(x)`), that child's children are the layers.
///
/// Input and loss come from `model_args` ("KEY=VALUE"), else from an attribute the module
/// carries (set on the nn.Module before scripting), else from a default:
///   input_shape   "3x32x32", one sample without the batch; attribute pipeplan_input_shape
///                 (List[int]); required
///   input_dtype   float32 | int64 (tokens); attribute pipeplan_input_dtype (str); float32
///   loss          cross_entropy (output [B, C], float32 input) | next_token_cross_entropy
///                 (output [B, T, V], int64 input [T]); attribute pipeplan_loss (str); the one
///                 that fits input_dtype
///   num_classes   C or V; attribute pipeplan_num_classes (int); the last layer's output size
///   token_range   int64 inputs lie in [0, token_range); attribute pipeplan_token_range (int);
///                 num_classes
/// One forward of two samples (eval mode) checks them. The configuration records these and the
/// file's content hash (file_hash). Throws Error(kBadInput) with one line for a missing or
/// corrupt file, a module that is not such a chain, weights tied across layers (or a child used
/// as two layers), a parameter that is not float32, a missing input_shape (naming the
/// --model-arg to give) or settings the forward contradicts.
///
/// The model's build_range loads layers [first, last) from one read of the file: each layer
/// holds only its child module, whose parameters and buffers it shares; every other child is
/// released before it returns. Weights come from the file: no seed changes them. Layers start in
/// training mode; train() and eval() reach the module (batch norm, dropout). Forward runs in the
/// TorchScript interpreter without graph optimisation, so every run executes the same
/// operators. It throws Error(kBadInput) when the file changed since the model was made.
Model make_torchscript_model(const std::string& path, const std::vector<std::string>& model_args);

/// Rebuilds the model from a configuration stored in a profile or plan. Throws Error(kBadInput)
/// "'m.pt' changed since the plan was made: ..." when the file's content hash is not
/// config.file_hash, and as make_torchscript_model for a bad file or configuration.
Model torchscript_model_from_config(const std::string& path, const Json& config);

}  // namespace pipeplan::models
