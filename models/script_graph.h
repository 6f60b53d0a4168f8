// A TorchScript module's forward graph split into layers at child-module calls, each layer a
// graph of its own that maps the live set before it to the live set after it.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"

namespace pipeplan::models {

/// A value of the module's attributes a layer reads: a child module (by attribute path,
/// "layer1.0") or a leaf attribute (a parameter, buffer, or constant such as "training").
struct ScriptAttribute {
  std::string path;        ///< attribute path from the top module
  bool is_module = false;  ///< a child module (its object is passed), else a leaf value
};

/// One layer of the split: a graph whose inputs are its attributes (in `attributes` order), then
/// the tensors live before it, and whose output is a tuple of the tensors live after it.
struct ScriptLayer {
  std::string name;  ///< the child call's attribute path, or "first..last" for a merged group
  std::string kind;  ///< the child's class ("Bottleneck"), or "group"
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<ScriptAttribute> attributes;
  std::vector<LiveTensor> live_in;   ///< the live set before this layer, per sample
  std::vector<LiveTensor> live_out;  ///< the live set after this layer, per sample
};

/// The inputs of the two probe forwards that find the live sets, and their text for errors.
struct ProbeInputs {
  /// The forward's inputs, per sample; a batch of several holds them packed (unpack_live).
  std::vector<LiveTensor> inputs;
  torch::Tensor small;      ///< a batch of the model's input
  torch::Tensor large;      ///< a batch of another size (more samples)
  std::string description;  ///< "1x28x28 float32"
  std::string hint;         ///< what to change when a layer fails on them ("; check ...")
};

/// The layers of `module`'s forward (docs/own-model.md):
///  - children whose forward only chains their own children (nn.Sequential, an unrolled
///    nn.ModuleList, such a module) are opened, and methods of the top module inlined, so that
///    the sequence reaches blocks; so are children that hold parameters or buffers of their own
///    and whose forward is a chain through their children with functional ops in between, no
///    tensor feeding two tensor-making nodes (torchvision's ViT Encoder: its positional
///    embedding goes with a neighbouring layer, its blocks become layers; a residual block
///    stays whole);
///  - nodes in graph order are grouped into segments, each holding one call of a child that
///    holds parameters or buffers; the functional ops and calls of stateless children between two
///    such calls go to the earlier or the later one so that the fewest bytes cross between them
///    (a packable live set preferred; the later place on ties, so that an activation or a
///    pooling stays with the block before it);
///  - a cut between segments is kept only where its live set (the values made before it and
///    used after it) is packable: tensors with the batch as their first dimension, all of one
///    boundary dtype, which cross packed into one [batch, Σ] tensor (TorchScriptLayer); and no
///    buffer is used on both sides of it. The segments around any other cut are merged into one
///    layer. A parameter used on both sides is a tied weight: each layer holds it.
///  - a forward that returns a tuple or named tuple trains on its element `output_element`
///    (an index, or a field name), and what only the other elements needed is dropped.
/// Live sets are found by running the segments on the two probe batches (no gradient; the caller
/// puts the module in eval mode); the model's output on `probe.small` is returned in `output`.
/// Throws Error(kBadInput) naming `file` and the node for what cannot be split: an input that is
/// no tensor, more or fewer inputs than probe.inputs, an output that is not one tensor (or a
/// tuple element `output_element` picks: absent, out of range, or not a tensor), control
/// flow whose condition depends on tensor values, an in-place op on a tensor that crosses a cut,
/// attributes read inside control flow; and naming the layer when a segment fails on a probe
/// batch.
std::vector<ScriptLayer> split_forward(const torch::jit::Module& module, const std::string& file,
                                       const ProbeInputs& probe, const std::string& output_element,
                                       torch::Tensor* output);

/// Refuses (Error(kBadInput) naming `file`) a forward that does not take tensors and return one
/// tensor or a tuple; split_forward checks it too, this says it before anything else is asked
/// for.
void check_forward_signature(const torch::jit::Module& module, const std::string& file);

/// The tensors of a live set from its packed form [batch, Σ elements per sample] (each tensor's
/// samples flattened, side by side, in `live` order), as views; a live set of one tensor travels
/// as itself.
std::vector<torch::Tensor> unpack_live(const torch::Tensor& packed,
                                       const std::vector<LiveTensor>& live);

/// The module that holds leaf `attribute` and the leaf's name in it: {module "layer1.0",
/// "weight"} for "layer1.0.weight"; {`module`, "training"} for "training".
std::pair<torch::jit::Module, std::string> attribute_owner(const torch::jit::Module& module,
                                                           const ScriptAttribute& attribute);

/// The object or value of `attribute` in `module` (a child module's object, or the leaf).
c10::IValue attribute_value(const torch::jit::Module& module, const ScriptAttribute& attribute);

/// Whether leaf `attribute` is a parameter of its owner (not a buffer or other value).
bool is_parameter(const torch::jit::Module& module, const ScriptAttribute& attribute);

/// The child module at attribute path `path` ("" for `module` itself).
torch::jit::Module child_at(const torch::jit::Module& module, const std::string& path);

}  // namespace pipeplan::models
