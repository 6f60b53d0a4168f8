// The autograd node of a layer recomputed on its own (partial checkpointing).
#include "executor/layer_recompute.h"

#include <torch/csrc/autograd/autograd.h>

#include "common/error.h"

namespace pipeplan::executor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kSlotKey = "slot";

// Inputs: the layer's input, an empty leaf that needs a gradient (so that the node is recorded
// even when the input needs none: the model's data), the slot, the layer. Not the layer's
// parameters: the recompute's backward accumulates their gradients in place, one operation's
// at a time as any backward does (returning them instead held a whole block's gradients at once:
// 13 MB above the predicted peak on vit_b_16), and the engine would call their accumulators a
// second time, with no gradient, firing their hooks (the overlapped all-reduce's count) twice.
class RecomputedLayerFunction : public torch::autograd::Function<RecomputedLayerFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& /*anchor*/,
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
    torch::Tensor input_gradient;
    if (slot->output.requires_grad() && output_gradients.at(0).defined()) {
      torch::autograd::backward({slot->output}, {output_gradients.at(0)});
      if (slot->input_needs_gradient) input_gradient = slot->leaf.grad();
    }
    slot->input = slot->leaf = slot->output = torch::Tensor();
    return {input_gradient, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor forward_keeping_input(models::Layer& layer, const torch::Tensor& input,
                                    const c10::intrusive_ptr<RecomputedLayer>& slot) {
  slot->input_needs_gradient = input.requires_grad();
  const torch::Tensor anchor =
      torch::empty({0}, input.options().dtype(torch::kFloat32).requires_grad(true));
  return RecomputedLayerFunction::apply(input, anchor, slot, &layer);
}

void recompute_layer(models::Layer& layer, RecomputedLayer& slot) {
  PIPEPLAN_ASSERT(slot.input.defined(), "recompute of layer ", slot.position,
                  " before its forward");
  slot.leaf = slot.input.detach();
  if (slot.input_needs_gradient) slot.leaf.requires_grad_(true);
  slot.output = layer.forward(slot.leaf);
}

}  // namespace pipeplan::executor
