// Per-layer profile quantities at one micro-batch size, with prefix sums so that any stage's
// sums, retained activations and transient peak cost O(1).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plans/plan.h"
#include "plans/profile.h"

namespace pipeplan {

/// The planner counts time in whole nanoseconds internally, so that sums of stage times are
/// exact and two partitions with the same stage times tie exactly. This quantum (1 ns) is the
/// only tolerance the partitioner's comparisons have.
inline constexpr double kNanosecondsPerMs = 1e6;

/// The longest time the planner converts to nanoseconds: 9e12 ms, just inside 64 bits.
inline constexpr double kMaxNanosecondsMs = 9e12;

/// ms -> ns, rounded to the nearest nanosecond. Throws Error(kBadInput) beyond
/// kMaxNanosecondsMs (or for a time that is not finite): a safety net behind the limits of
/// common/limits.h and unplannable_reason, which keep the planner's inputs far inside it.
int64_t to_ns(double ms);
/// ns -> ms.
double to_ms(int64_t ns);

/// One layer at one micro-batch size b. Between two profiled batch sizes every quantity is
/// interpolated linearly; beyond the profiled range times and retained and transient bytes
/// follow the profile's linear fits, and the saved input/output parts keep their share of
/// retained_bytes at the nearest profiled size. Nothing is negative.
struct LayerAt {
  double fwd_ms = 0;
  double bwd_ms = 0;
  int64_t retained_bytes = 0;
  int64_t saved_input_bytes = 0;
  int64_t saved_output_bytes = 0;
  int64_t fwd_transient_bytes = 0;
  int64_t bwd_transient_bytes = 0;
  /// p90 − median of the forward (backward) time: its relative size at the profiled batch size
  /// nearest to b, times fwd_ms (bwd_ms). How much one micro-batch's time varies.
  double fwd_spread_ms = 0;
  double bwd_spread_ms = 0;
  /// zb-h1's halves of the backward (B: input gradient, W: weight gradients), interpolated like
  /// bwd_ms; 0 when the profile has no B/W split.
  double bwd_input_ms = 0;
  double bwd_weight_ms = 0;
  /// The inference forward (LayerPoint::inference_fwd_ms and inference_fwd_peak_bytes),
  /// interpolated like fwd_ms, and its spread as fwd_spread_ms is fwd_ms's; 0 when the profile
  /// has no inference forward.
  double inference_fwd_ms = 0;
  double inference_fwd_spread_ms = 0;
  int64_t inference_fwd_peak_bytes = 0;
};

/// `layer` at micro-batch size `micro_batch_size` (>= 1), as documented on LayerAt.
LayerAt layer_at(const LayerProfile& layer, int64_t micro_batch_size);

/// What may make `layer`'s values mislead (planning_warnings), one line each naming the layer
/// and the fit: a time or memory fit that falls as the batch grows (negative slope), and a
/// forward or backward time clamped to 0 at `micro_batch_size`, when given (outside the profiled
/// sizes, where the fit is negative).
std::vector<std::string> fit_warnings(const LayerProfile& layer,
                                      std::optional<int64_t> micro_batch_size);

/// The note a plan carries when `micro_batch_size` lies outside `profiled` (ascending):
/// "micro-batch 64 is beyond the profiled 1..32: extrapolated", or "" inside the range.
std::string extrapolation_note(const std::vector<int64_t>& profiled, int64_t micro_batch_size);

/// Why `profile` cannot be planned at micro-batch size `micro_batch_size`, or "" when it can:
/// its layers' forward and backward times there are all 0 (a plan would predict no compute);
/// their forward, backward, spread and optimizer times sum to more than kMaxTimeMs; or their
/// retained bytes, buffers, parameters, one layer's transient or activation, or the model
/// input exceed kMaxBytes (common/limits.h). Outside the profiled batch sizes the values come
/// from the fits, so a large micro-batch can pass the limits that the profile itself keeps.
/// Upper bounds, O(L · points).
std::string unplannable_reason(const Profile& profile, int64_t micro_batch_size,
                               OptimizerKind optimizer);

/// Every layer of a profile at one micro-batch size, for one optimizer. Stage queries take
/// layer ranges [first, last) with 0 <= first < last <= num_layers().
class LayerTable {
 public:
  /// Throws Error(kBadInput) when a layer has no optimizer_step_ms for `optimizer`, or when
  /// unplannable_reason gives a reason. With `split_backward` (zb-h1), every layer's backward is
  /// its B + W, as zb-h1 runs it, and the profile must have the B/W split. With `forward_only`
  /// (inference plans) every layer's backward time and spread, retained bytes and backward
  /// transient are 0 and its optimizer step is not looked up (0): forward passes keep no graph,
  /// so compute is the forward alone; the forward time and spread are the inference forward's
  /// when the profile has it (Profile::has_inference_forward), else the training forward's; and
  /// transient_bytes is the forward's working set (see there).
  LayerTable(const Profile& profile, int64_t micro_batch_size, OptimizerKind optimizer,
             bool split_backward = false, bool forward_only = false);

  /// L, the profile's layer count.
  int num_layers() const { return static_cast<int>(layers_.size()); }
  /// b, the micro-batch size the table is at.
  /// The extrapolation note for this micro-batch size, or "".
  const std::string& note() const { return note_; }
  /// One layer's interpolated values.
  const LayerAt& layer(int layer_idx) const { return layers_[layer_idx]; }

  /// Forward time of the stage's layers per micro-batch (each layer rounded to 1 ns).
  int64_t fwd_ns(int first, int last) const { return fwd_ns_[last] - fwd_ns_[first]; }
  /// Backward time of the stage's layers per micro-batch (split_backward: B + W).
  int64_t bwd_ns(int first, int last) const { return bwd_ns_[last] - bwd_ns_[first]; }
  /// split_backward only: the B part (input gradient) and the W part (weight gradients) of
  /// bwd_ns; 0 otherwise.
  int64_t bwd_input_ns(int first, int last) const {
    return bwd_input_ns_.empty() ? 0 : bwd_input_ns_[last] - bwd_input_ns_[first];
  }
  int64_t bwd_weight_ns(int first, int last) const {
    return bwd_ns(first, last) - bwd_input_ns(first, last);
  }
  /// What a micro-batch's path back to stage 0 runs of the stage per micro-batch: forward and
  /// backward, or with split_backward forward and B alone (W sends nothing upstream).
  int64_t path_compute_ns(int first, int last) const {
    return fwd_ns(first, last) + (split_backward() ? bwd_input_ns(first, last) : bwd_ns(first, last));
  }
  /// Whether the table splits backwards into B and W (zb-h1).
  bool split_backward() const { return !bwd_input_ns_.empty(); }
  /// Whether the table is forward-only (inference): no backward, retained bytes or optimizer.
  bool forward_only() const { return forward_only_; }
  /// Σ fwd_spread_ms (bwd_spread_ms) of the stage's layers, in ns: the spread of the stage's
  /// forward (backward) when its layers vary together.
  int64_t fwd_spread_ns(int first, int last) const {
    return fwd_spread_ns_[last] - fwd_spread_ns_[first];
  }
  int64_t bwd_spread_ns(int first, int last) const {
    return bwd_spread_ns_[last] - bwd_spread_ns_[first];
  }
  /// Forward plus backward: the stage's compute per micro-batch without recompute.
  int64_t compute_ns(int first, int last) const {
    return fwd_ns(first, last) + bwd_ns(first, last);
  }
  /// By position 0..L: compute_ns(0, position), with `recompute` plus fwd_ns(0, position) (the
  /// forward again). Shared by the StageEvaluators of the table.
  const std::vector<int64_t>& compute_prefix_ns(bool recompute) const {
    return recompute ? recompute_prefix_ns_ : compute_prefix_ns_;
  }
  /// One optimizer step over the stage's parameters (the table's optimizer).
  int64_t optimizer_ns(int first, int last) const { return opt_ns_[last] - opt_ns_[first]; }
  /// The all-reduces that sum the gradients of tied parameters the stage holds but other stages
  /// hold too (a user layer inside [first, last), another outside): the profile's two-rank
  /// all-reduce at each one's float32 gradient bytes; 0 without ties or interconnect profile.
  int64_t tie_sum_ns(int first, int last) const {
    return ties_.empty() ? 0 : tie_sum_over(first, last);
  }
  /// Parameters of the stage's layers, a tied parameter held by several of them counted once.
  int64_t param_count(int first, int last) const {
    const int64_t count = params_[last] - params_[first];
    return ties_.empty() ? count : count - tied_duplicates(first, last);
  }
  /// Buffer bytes (e.g. batch-norm statistics) of the stage's layers.
  int64_t buffer_bytes(int first, int last) const { return buffers_[last] - buffers_[first]; }
  /// The profile's tied parameters (TiedProfile: the layers sharing each).
  const std::vector<TiedProfile>& ties() const { return ties_; }
  /// A_s(b): Σ retained_bytes − Σ over internal boundaries i of
  /// min(saved_output_bytes[i], saved_input_bytes[i+1]) (storage counted by both layers).
  int64_t retained_bytes(int first, int last) const {
    // Internal boundaries are between layers k and k+1 for k in [first, last − 1).
    return retained_prefix_[last] - retained_prefix_[first] -
           (overlap_prefix_[last - 1] - overlap_prefix_[first]);
  }
  /// The largest forward or backward transient of the stage's layers (a sparse-table query).
  ///
  /// Forward-only tables: the peak bytes of the stage's forward beside its input X_first (which
  /// the caller holds throughout: the received buffer, or stage 0's model input), one micro-batch
  /// at a time, as StageRuntime::infer runs the layers, layer i reading X_i (boundary_bytes(i))
  /// and replacing it by its output, X_i freed when layer i returns:
  ///
  ///   transient = max( P_first, max over first < i < last of (X_i + P_i) )
  ///             + target_bytes() · [last = L]
  ///
  /// P_i = layer i's inference_fwd_peak_bytes (its output and temporaries above its input),
  /// or, for a profile without the inference forward, X_{i+1} + fwd_transient_bytes (the output
  /// and the training forward's transient). Layer first's input is X_first itself; a later
  /// layer's input X_i is alive beside X_first. The last stage also holds the target the data
  /// loader delivered with the micro-batch until the output is scored (executor/inferencer.cpp).
  /// O(1): P_first, and a sparse-table maximum of X_i + P_i over the rest.
  int64_t transient_bytes(int first, int last) const {
    if (!forward_only_) return range_max(first, last);
    const int64_t later = last - first > 1 ? range_max(first + 1, last) : 0;
    return std::max(forward_peak_bytes_[first], later) + (last == num_layers() ? target_bytes_ : 0);
  }
  /// Forward-only: the target of one micro-batch, int64 class indices of the model output's shape
  /// without its last (class) dimension — [b] for a classifier's [b, C], [b, T] for a language
  /// model's [b, T, V] (models::TargetSpec: both losses are cross-entropy). 0 otherwise.
  int64_t target_bytes() const { return target_bytes_; }
  /// Bytes crossing boundary `position` per micro-batch: the model input for 0, else the
  /// output of layer position − 1 (shape from the profile × dtype × b).
  int64_t boundary_bytes(int position) const { return boundary_bytes_[position]; }
  /// The gradients of the outputs of layers [first, last) that zb-h1's B keeps for W, per
  /// micro-batch: Σ boundary_bytes over positions first + 1 .. last, without the last layer's
  /// on the last stage (the loss is its root there).
  int64_t output_gradient_bytes(int first, int last, bool last_stage) const {
    return boundary_prefix_[last + 1] - boundary_prefix_[first + 1] -
           (last_stage ? boundary_bytes_[last] : 0);
  }
  /// The smallest boundary_bytes over the positions a stage boundary can take, 1..L−1 (0 for
  /// a single layer).
  int64_t min_inner_boundary_bytes() const { return min_inner_boundary_bytes_; }
  /// Per-sample shape of that boundary tensor (no batch dimension).
  const std::vector<int64_t>& boundary_shape(int position) const { return shapes_[position]; }
  /// Its dtype.
  const std::string& boundary_dtype(int position) const { return dtypes_[position]; }
  /// The slowest single layer's forward plus backward.
  int64_t max_layer_compute_ns() const { return max_layer_compute_ns_; }

 private:
  void build_prefix_sums(const Profile& profile, OptimizerKind optimizer, bool split_backward);
  // forward_only: drops every layer's backward and retained quantities, and takes the inference
  // forward's time when `inference_measured`.
  void make_forward_only(bool inference_measured);
  void build_boundaries(const Profile& profile);
  void build_transient_table(bool inference_measured);
  // The maximum of transient_levels_' base over [first, last) (not empty).
  int64_t range_max(int first, int last) const {
    const int level = 31 - __builtin_clz(static_cast<unsigned>(last - first));  // floor(log2)
    const std::vector<int64_t>& row = transient_levels_[level];
    return std::max(row[first], row[last - (1 << level)]);
  }

  int64_t micro_batch_size_;
  bool forward_only_ = false;
  std::string note_;
  std::vector<LayerAt> layers_;
  // The tied parameters' copies counted more than once by params_ over [first, last).
  int64_t tied_duplicates(int first, int last) const;
  int64_t tie_sum_over(int first, int last) const;

  std::vector<int64_t> fwd_ns_, bwd_ns_, opt_ns_, params_, buffers_;  // prefix sums, size L+1
  std::vector<int64_t> compute_prefix_ns_, recompute_prefix_ns_;  // compute_prefix_ns, size L+1
  std::vector<TiedProfile> ties_;
  std::vector<int64_t> tie_sum_ns_;  // by tie: one all-reduce of its gradient
  std::vector<int64_t> fwd_spread_ns_, bwd_spread_ns_;                // prefix sums, size L+1
  std::vector<int64_t> retained_prefix_;                              // Σ retained_bytes, size L+1
  std::vector<int64_t> overlap_prefix_;  // Σ overlap between layers i and i+1, size L
  // Sparse table for range maxima of each layer's transient (forward-only: X_i + P_i).
  std::vector<std::vector<int64_t>> transient_levels_;
  std::vector<int64_t> forward_peak_bytes_;             // forward-only: P_i by layer
  int64_t target_bytes_ = 0;                            // forward-only: target_bytes()
  std::vector<int64_t> boundary_bytes_;                 // size L+1
  std::vector<int64_t> boundary_prefix_;                // Σ boundary_bytes_, size L+2
  std::vector<int64_t> bwd_input_ns_;                   // split_backward: prefix sums, size L+1
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::string> dtypes_;
  int64_t max_layer_compute_ns_ = 0;
  int64_t min_inner_boundary_bytes_ = 0;
};

}  // namespace pipeplan
