// Partial checkpointing in the executor: a layer whose forward keeps only its input, and whose
// backward runs the graph that the stage's recompute rebuilt from that input.
#pragma once

#include <torch/torch.h>

#include "models/model.h"

namespace pipeplan::executor {

/// One recomputed layer of one micro-batch in flight.
struct RecomputedLayer : torch::CustomClassHolder {
  size_t position = 0;                ///< the layer's index among the stage's layers
  torch::Tensor input;                ///< what the forward read, without its graph
  bool input_needs_gradient = false;  ///< the forward's input required a gradient
  torch::Tensor leaf;    ///< after recompute(): the recompute's input, `input` as a graph leaf
  torch::Tensor output;  ///< after recompute(): the recompute's output, its backward's root
};

/// Runs `layer` on `input` without recording its graph, keeping only `input` in `slot`, and
/// returns its output attached to the autograd graph through one node. That node's backward
/// needs the graph recompute_layer(...) rebuilds: it runs it from the output's gradient (the
/// layer's parameters' gradients accumulate into their .grad as in any backward), returns the
/// input's gradient and frees the slot's tensors. A parameter the layer shares with another
/// layer of the stage would be accumulated twice in one backward, and under autocast its
/// low-precision copy, cached here without a graph, would reach that layer without one
/// (pytorch #112583): StageRuntime refuses such plans. The
/// random numbers are the caller's: it seeds the generators before this and before recompute_layer
/// alike.
torch::Tensor forward_keeping_input(models::Layer& layer, const torch::Tensor& input,
                                    const c10::intrusive_ptr<RecomputedLayer>& slot);

/// The recompute before the backward: runs `layer` again from `slot`'s kept input, recording its
/// graph (autocast and the random numbers as the forward had them: the caller's).
void recompute_layer(models::Layer& layer, RecomputedLayer& slot);

}  // namespace pipeplan::executor
