// A user's own model: a TorchScript file whose forward graph is split into a layer sequence.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "models/model.h"

namespace pipeplan::models {

/// Whether `name` names a TorchScript file rather than a zoo model: it contains '/' or ends in
/// ".pt" or ".pth" (zoo names never do). A relative path is read from the current directory.
bool is_torchscript_path(const std::string& name);

/// The model saved at `path` (torch.jit.script(module).save(path), or torch.jit.trace). Its
/// forward graph is split into layers as split_forward (models/script_graph.h) says: containers
/// opened, one layer per call of a child with parameters or buffers, functional ops and
/// stateless children placed between them where the fewest bytes cross, the live set of a cut
/// packed into one tensor, layers merged across a cut whose live set cannot be packed or that a
/// buffer is used on both sides of (a merged layer is named "first..last"), a parameter used by
/// several layers tied (Model::ties). Layers are named by the attribute paths of their calls
/// ("conv1", "layer1.0"), their parameters by their state_dict names.
///
/// Input and loss come from `model_args` ("KEY=VALUE"), else from an attribute the module
/// carries (set on the nn.Module before scripting), else from a default:
///   input_shape   "3x32x32", one sample without the batch; for a forward of several inputs
///                 one shape each joined by ',' ("2x4,3"), the inputs packed side by side into
///                 one [B, Σ] batch (model.input); attribute pipeplan_input_shape (List[int] or
///                 List[List[int]]); required
///   input_dtype   float32 | int64 (tokens); attribute pipeplan_input_dtype (str); float32
///   loss          cross_entropy (output [B, C], float32 input) | next_token_cross_entropy
///                 (output [B, T, V], int64 input [T]); attribute pipeplan_loss (str); the one
///                 that fits input_dtype
///   num_classes   C or V; attribute pipeplan_num_classes (int); the last layer's output size
///   token_range   int64 inputs lie in [0, token_range); attribute pipeplan_token_range (int);
///                 num_classes
///   output        for a forward that returns a tuple or named tuple: the element that holds
///                 the logits, by index ("0") or field ("logits"); attribute pipeplan_output
///                 (str); none (the forward returns one tensor)
/// Two forwards (2 and 3 samples, eval mode) check them and find the live sets. The configuration
/// records these and the file's content hash (file_hash). Throws Error(kBadInput) with one line
/// for a missing or corrupt file, a forward split_forward refuses (naming the node), a parameter
/// that is not float32, a missing input_shape (naming the --model-arg to give) or settings the
/// forward contradicts.
///
/// The model's build_range loads layers [first, last) from one read of the file: each layer
/// holds only the children and attributes its graph reads, sharing their parameters and buffers;
/// everything else is released before it returns. Weights come from the file: no seed changes
/// them. Layers start in training mode; train() and eval() reach the module (batch norm,
/// dropout). Forward runs in the TorchScript interpreter without graph optimisation, so every
/// run executes the same operators. It throws Error(kBadInput) when the file changed since the
/// model was made.
Model make_torchscript_model(const std::string& path, const std::vector<std::string>& model_args);

/// Rebuilds the model from a configuration stored in a profile or plan. Throws Error(kBadInput)
/// "'m.pt' changed since the plan was made: ..." when the file's content hash is not
/// config.file_hash, and as make_torchscript_model for a bad file or configuration.
Model torchscript_model_from_config(const std::string& path, const Json& config);

}  // namespace pipeplan::models
