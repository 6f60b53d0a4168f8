// The autograd node of a layer recomputed on its own (partial checkpointing).
#include "executor/layer_recompute.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include "common/error.h"

namespace pipeplan::executor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kSlotKey = "slot";

// Inputs: the layer's input, its parameters, the slot, the layer. The backward returns the
// parameters' gradients to the engine instead of accumulating them itself: the engine then
// accumulates each parameter once per backward, its uses summed (one layer's weight used twice,
// or by another layer of the chunk as well), and their accumulators' hooks (the overlapped
// all-reduce counts each parameter done) fire once, as in a backward without recompute.
class RecomputedLayerFunction : public torch::autograd::Function<RecomputedLayerFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               torch::TensorList /*parameters*/,
                               const c10::intrusive_ptr<RecomputedLayer>& slot,
                               models::Layer* layer) {
    // Function::apply runs this without recording a graph.
    slot->input = input.detach();
    ctx->saved_data[kSlotKey] = c10::IValue::make_capsule(slot);
    return layer->forward(slot->input);
  }

  static variable_list backward(AutogradContext* ctx, variable_list output_gradients) {
    const auto slot = c10::static_intrusive_pointer_cast<RecomputedLayer>(
        ctx->saved_data.at(kSlotKey).toCapsule());
    PIPEPLAN_ASSERT(slot->output.defined(), "backward of recomputed layer ", slot->position,
                    " before its recompute");
    const size_t num_parameters = slot->parameters.size();
    // One gradient per input of forward: the input, each parameter, the slot, the layer.
    variable_list gradients(num_parameters + 3);
    std::vector<torch::Tensor> sources;  // what the recomputed graph differentiates
    std::vector<size_t> positions;       // their places in `gradients`
    if (slot->input_needs_gradient) {
      sources.push_back(slot->leaf);
      positions.push_back(0);
    }
    for (size_t idx = 0; idx < num_parameters; ++idx) {
      if (!slot->parameters[idx].requires_grad()) continue;
      sources.push_back(slot->parameters[idx]);
      positions.push_back(idx + 1);
    }
    if (!sources.empty() && slot->output.requires_grad() && output_gradients.at(0).defined()) {
      const variable_list found =
          torch::autograd::grad({slot->output}, sources, {output_gradients.at(0)},
                                /*retain_graph=*/false, /*create_graph=*/false,
                                /*allow_unused=*/true);
      for (size_t idx = 0; idx < found.size(); ++idx) gradients[positions[idx]] = found[idx];
    }
    slot->input = slot->leaf = slot->output = torch::Tensor();
    slot->parameters.clear();
    return gradients;
  }
};

}  // namespace

torch::Tensor forward_keeping_input(models::Layer& layer, const torch::Tensor& input,
                                    const c10::intrusive_ptr<RecomputedLayer>& slot) {
  slot->input_needs_gradient = input.requires_grad();
  slot->parameters = layer.parameters();
  torch::Tensor output =
      RecomputedLayerFunction::apply(input, torch::TensorList(slot->parameters), slot, &layer);
  // Autocast caches its low-precision copies of the weights whatever the grad mode: a weight this
  // layer shares with a later one, cast here without a graph, would reach that layer without
  // one (pytorch #112583).
  at::autocast::clear_cache();
  return output;
}

void recompute_layer(models::Layer& layer, RecomputedLayer& slot) {
  PIPEPLAN_ASSERT(slot.input.defined(), "recompute of layer ", slot.position,
                  " before its forward");
  slot.leaf = slot.input.detach();
  if (slot.input_needs_gradient) slot.leaf.requires_grad_(true);
  slot.output = layer.forward(slot.leaf);
}

}  // namespace pipeplan::executor
