// The autograd node of a layer recomputed on its own (partial checkpointing).
#include "executor/layer_recompute.h"

#include <torch/csrc/autograd/autograd.h>

#include "common/error.h"

namespace pipeplan::executor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kSlotKey = "slot";
constexpr const char* kInputsKey = "inputs";

// Inputs: the layer's input, its parameters (so that the node is recorded even when the input
// needs no gradient: the parameters' gradients come from its backward), the slot, the layer.
class RecomputedLayerFunction : public torch::autograd::Function<RecomputedLayerFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               torch::TensorList parameters,
                               const c10::intrusive_ptr<RecomputedLayer>& slot,
                               models::Layer* layer) {
    // Function::apply runs this without recording a graph.
    slot->input = input.detach();
    ctx->saved_data[kSlotKey] = c10::IValue::make_capsule(slot);
    // backward returns a gradient for each: the input, each parameter, the slot, the layer.
    ctx->saved_data[kInputsKey] = static_cast<int64_t>(parameters.size() + 3);
    return layer->forward(slot->input);
  }

  static variable_list backward(AutogradContext* ctx, variable_list output_gradients) {
    const auto slot = c10::static_intrusive_pointer_cast<RecomputedLayer>(
        ctx->saved_data.at(kSlotKey).toCapsule());
    PIPEPLAN_ASSERT(slot->output.defined(), "backward of recomputed layer ", slot->position,
                    " before its recompute");
    torch::Tensor input_gradient;
    if (slot->output.requires_grad()) {
      torch::autograd::backward({slot->output}, {output_gradients.at(0)});
      if (slot->input_needs_gradient) input_gradient = slot->leaf.grad();
    }
    slot->input = slot->leaf = slot->output = torch::Tensor();
    const auto num_inputs = static_cast<size_t>(ctx->saved_data.at(kInputsKey).toInt());
    variable_list gradients(num_inputs);  // the parameters' went into their .grad above
    gradients[0] = input_gradient;
    return gradients;
  }
};

}  // namespace

torch::Tensor forward_keeping_input(models::Layer& layer, const torch::Tensor& input,
                                    const c10::intrusive_ptr<RecomputedLayer>& slot) {
  slot->input_needs_gradient = input.requires_grad();
  const std::vector<torch::Tensor> parameters = layer.parameters();
  return RecomputedLayerFunction::apply(input, torch::TensorList(parameters), slot, &layer);
}

void recompute_layer(models::Layer& layer, RecomputedLayer& slot) {
  PIPEPLAN_ASSERT(slot.input.defined(), "recompute of layer ", slot.position,
                  " before its forward");
  slot.leaf = slot.input.detach();
  if (slot.input_needs_gradient) slot.leaf.requires_grad_(true);
  slot.output = layer.forward(slot.leaf);
}

}  // namespace pipeplan::executor
