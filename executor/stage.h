// One rank's stage: its layers (every chunk's under interleaved-1f1b) on its device, flat
// parameter and gradient buffers, and the forward, backward (whole, or zb-h1's B and W) and
// recompute of its micro-batches in flight.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "executor/layer_recompute.h"
#include "models/model.h"
#include "plans/plan.h"

namespace pipeplan::executor {

/// The torch dtype of a plan's boundary dtype word ("float32", "int64", "bfloat16", "float16").
/// Throws Error(kBadInput) naming `field` for another word.
torch::Dtype boundary_dtype(const std::string& word, const std::string& field);

/// The seed of the random numbers (dropout) of the forward of global micro-batch
/// `global_micro_batch` at `step`. Layer i reseeds the generators with mix_seed(this, i) before
/// its forward, so its random numbers are the same whatever the split, when the forward is
/// recomputed (checkpointing) and when the run is resumed: no generator state to save.
uint64_t micro_batch_seed(uint64_t seed, int64_t step, int64_t global_micro_batch);

/// For each of the model's tied parameters (Model::ties), the pipeline stages (positions in
/// [0, pp)) holding one of its users, ascending and each once (under interleaved-1f1b a stage
/// holding it in two chunks is listed once): the stages that sum its gradient.
std::vector<std::vector<int>> tie_stages(const models::Model& model, const Plan& plan);

/// The layers of one pipeline stage: [first, last) of its plan.stages entry, or under
/// interleaved-1f1b its V chunks (plan.stages[chunk_index(pp, stage, v)] for local chunk v), each
/// run on its own. Parameters of all chunks are views into one flat float32 buffer (a parameter
/// tied across its layers, or across two of its chunks, once) and their gradients views into
/// another, so that the optimizer, the all-reduce and checkpoints work on two tensors per rank;
/// autograd accumulates micro-batch gradients into the flat gradient in place.
///
/// Methods taking `chunk` take the rank's local chunk v (0 under the other schedules); overloads
/// without it act on chunk 0. First and last are per chunk: the model's first chunk gets the data,
/// its last computes the loss.
///
/// Under zb-h1 the backward is split in two (plans/schedule.h). The forward then runs each layer
/// on its input detached from the previous layer's graph, so that every layer has a graph of its
/// own: B walks them from the last layer to the first computing only input gradients, keeping
/// each layer output's gradient; W runs every layer's graph once more from those gradients into
/// the weights alone. The micro-batch's activations live until its W.
class StageRuntime {
 public:
  /// Builds only this stage's layers (build_layers with `seed`, chunk by chunk) on `device`; with
  /// a tensor-parallel `tp_group` of more than one rank, the shards of the layers that split.
  StageRuntime(const models::Model& model, const Plan& plan, int stage_idx,
               const torch::Device& device, uint64_t seed,
               const models::TensorParallelGroupPtr& tp_group = {});

  /// This pipeline stage's position in [0, pp) and its number of chunks (V; 1 unless
  /// interleaved-1f1b).
  int stage() const { return stage_idx_; }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  /// Whether local chunk `chunk` is the model's first (gets the data) or last (computes the
  /// loss); is_last() asks whether this stage holds the model's last chunk.
  bool is_first(int chunk = 0) const { return chunks_.at(chunk).first_of_model; }
  bool is_last(int chunk) const { return chunks_.at(chunk).last_of_model; }
  bool is_last() const { return chunks_.back().last_of_model; }
  /// Whether local chunk `chunk` recomputes before each backward: the plan checkpoints it, or
  /// some of its layers (recompute_layers).
  bool recomputes(int chunk = 0) const {
    return chunks_.at(chunk).checkpoint || !chunks_.at(chunk).recomputed.empty();
  }
  /// Whether the plan splits each backward into B and W (zb-h1): backward_input and
  /// backward_weight then replace backward.
  bool split_backward() const { return split_backward_; }
  /// The device the layers live on.
  const torch::Device& device() const { return device_; }
  /// Flat parameters and gradients (float32, on the device).
  torch::Tensor& parameters() { return flat_parameters_; }
  torch::Tensor& gradients() { return flat_gradients_; }
  /// For each of the model's tied parameters, its gradient in this stage (a view into the flat
  /// gradients); undefined where the stage holds none of its users.
  const std::vector<torch::Tensor>& tied_gradients() const { return tied_gradients_; }
  /// The built layers of every chunk, chunk 0's first, each chunk's in model order.
  const std::vector<models::LayerPtr>& layers() const { return layers_; }
  /// The model index of layers()[position].
  int layer_index(size_t position) const { return layer_indices_.at(position); }

  /// Starts a training iteration of `num_micro_batches`: clears the in-flight table.
  void begin_iteration(int num_micro_batches);
  /// Forward of micro-batch `micro_batch` through local chunk `chunk` from `input` (the model's
  /// first chunk: the data; else the received activation). Keeps what the backward needs: the
  /// graph, or with checkpointing only the input. On the model's last chunk computes the loss
  /// against `target` and returns it (detached); elsewhere returns the activation to send,
  /// checked against the plan's boundary shape.
  torch::Tensor forward(int chunk, int micro_batch, const torch::Tensor& input,
                        const torch::Tensor& target, uint64_t rng_seed);
  torch::Tensor forward(int micro_batch, const torch::Tensor& input, const torch::Tensor& target,
                        uint64_t rng_seed) {
    return forward(/*chunk=*/0, micro_batch, input, target, rng_seed);
  }
  /// Checkpointed chunks only: recomputes micro_batch's forward (same random numbers), building
  /// the graph the backward needs.
  void recompute(int chunk, int micro_batch);
  void recompute(int micro_batch) { recompute(/*chunk=*/0, micro_batch); }
  /// Backward of `micro_batch` through `chunk`: from `output_gradient` (received), or on the
  /// model's last chunk from the loss times `loss_factor` (1/m, times the fp16 loss scale).
  /// Gradients accumulate into the flat buffer. Returns the gradient of the input to send
  /// (undefined on the model's first chunk) and frees the micro-batch's activations. On a
  /// split_backward() stage: backward_input then backward_weight.
  torch::Tensor backward(int chunk, int micro_batch, const torch::Tensor& output_gradient,
                         double loss_factor);
  torch::Tensor backward(int micro_batch, const torch::Tensor& output_gradient,
                         double loss_factor) {
    return backward(/*chunk=*/0, micro_batch, output_gradient, loss_factor);
  }
  /// zb-h1's B of `micro_batch` (split_backward() stages only), from `output_gradient` or the
  /// loss times `loss_factor` as in backward(): the gradient of each layer's output, last layer
  /// to first, kept for backward_weight; no weight gradient is touched. Returns the gradient of
  /// the stage input to send (undefined on stage 0, or when the input needs none). A checkpointed
  /// stage recomputes first, as before backward().
  torch::Tensor backward_input(int chunk, int micro_batch, const torch::Tensor& output_gradient,
                               double loss_factor);
  torch::Tensor backward_input(int micro_batch, const torch::Tensor& output_gradient,
                               double loss_factor) {
    return backward_input(/*chunk=*/0, micro_batch, output_gradient, loss_factor);
  }
  /// zb-h1's W of `micro_batch`, whose backward_input has run: one autograd pass over every
  /// layer's graph from the kept gradients into the parameters alone, accumulated into the flat
  /// gradients (a parameter used by two layers of the stage gets both uses' sum). Frees the
  /// micro-batch's activations.
  void backward_weight(int chunk, int micro_batch);
  void backward_weight(int micro_batch) { backward_weight(/*chunk=*/0, micro_batch); }

  /// Forward through `chunk` without a graph, the layers in the mode they are in (evaluation and
  /// serving put them in eval mode): returns the activation to send, or on the model's last
  /// chunk its output (the logits).
  torch::Tensor infer(int chunk, const torch::Tensor& input);
  /// Frees the flat gradient buffer (inference needs none): gradients() and tied_gradients()
  /// are then empty and no backward may run.
  void release_gradients();
  /// Switches the layers between training and evaluation mode (dropout, normalisation).
  void set_training(bool training);

 private:
  // One contiguous layer range of the stage: layers_[begin, end).
  struct Chunk {
    size_t begin = 0;
    size_t end = 0;
    int plan_index = 0;  // in plan.stages
    bool first_of_model = false;
    bool last_of_model = false;
    bool checkpoint = false;
    // Partial checkpointing: the positions (from the chunk's first) of the layers it recomputes.
    std::vector<size_t> recomputed;
    std::vector<int64_t> output_sample_shape;
    torch::Dtype output_dtype = torch::kFloat32;
    size_t size() const { return end - begin; }
  };
  struct InFlight {
    torch::Tensor input;   // kept for the input gradient (not the first chunk) or the recompute
    torch::Tensor target;  // model's last chunk, checkpointed: for the recomputed loss
    torch::Tensor output;  // the graph's end: activation, or the loss on the last chunk
    uint64_t rng_seed = 0;
    // zb-h1: each layer's input (a leaf detached from the previous layer's graph when it needs a
    // gradient) and output, and after B the gradient of each output (undefined where none flows).
    std::vector<torch::Tensor> layer_inputs;
    std::vector<torch::Tensor> layer_outputs;
    std::vector<torch::Tensor> output_gradients;
    // Partial checkpointing: each recomputed layer's kept input, and after the recompute its graph.
    std::vector<c10::intrusive_ptr<RecomputedLayer>> recomputed_layers;
  };
  InFlight& in_flight(int chunk, int micro_batch);
  // Runs the chunk's layers; with `layer_graphs`, one graph per layer, recorded there (zb-h1).
  // With `recomputed`, the chunk's recomputed layers keep only their input, recorded there.
  torch::Tensor run_layers(const Chunk& chunk, torch::Tensor input, uint64_t rng_seed,
                           InFlight* layer_graphs = nullptr,
                           std::vector<c10::intrusive_ptr<RecomputedLayer>>* recomputed = nullptr);
  // Where the chunk's layer `position` (from the chunk's first) ends its graph: its output, or
  // on the model's last layer the loss.
  const torch::Tensor& layer_root(const Chunk& chunk, const InFlight& entry, size_t position) const;
  // The gradient B starts from: the received one (checked against the output), or the loss's.
  torch::Tensor chunk_output_gradient(const Chunk& chunk, const InFlight& entry,
                                      const torch::Tensor& output_gradient,
                                      double loss_factor) const;
  torch::Tensor finish_forward(const Chunk& chunk, InFlight& entry, torch::Tensor output,
                               const torch::Tensor& target);
  void check_output(const Chunk& chunk, const torch::Tensor& output) const;
  // Later copies of a tied parameter built in two chunks, each with the first copy it aliases.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> tied_copies() const;
  void flatten_parameters();
  void find_tied_gradients();
  // Refuses a recomputed layer sharing a parameter with another layer of this rank.
  void check_recomputed_ties(const Plan& plan) const;

  const models::Model& model_;
  int stage_idx_;
  int num_micro_batches_ = 0;
  bool split_backward_;  // zb-h1: B and W instead of one backward
  Precision precision_;  // autocast around the forward when not fp32 (plans do so only on CUDA)
  torch::Device device_;
  std::vector<Chunk> chunks_;
  std::vector<models::LayerPtr> layers_;
  std::vector<int> layer_indices_;  // model index of each of layers_
  torch::Tensor flat_parameters_;
  torch::Tensor flat_gradients_;
  std::vector<torch::Tensor> trainable_parameters_;  // W's inputs: each one once
  std::vector<torch::Tensor> tied_gradients_;
  std::vector<InFlight> in_flight_;  // chunk · num_micro_batches_ + micro_batch
};

}  // namespace pipeplan::executor
