// Per-layer quantities at one micro-batch size: interpolation, prefix sums, range maxima.
#include "planner/layer_table.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/error.h"
#include "common/limits.h"
#include "planner/memory_model.h"

namespace pipeplan {
namespace {

// Rounded to whole bytes, within [0, kMaxBytes]: unplannable_reason() refuses a micro-batch
// size at which a layer's bytes pass kMaxBytes before any table is built; the clamp only keeps
// the rounding defined.
int64_t non_negative_bytes(double bytes) {
  return std::llround(std::clamp(bytes, 0.0, static_cast<double>(kMaxBytes)));
}

// Linear interpolation of `value(point)` between points[lo] and points[lo + 1] at b.
template <typename Get>
double between(const std::vector<LayerPoint>& points, size_t lo, double b, Get value) {
  const LayerPoint& a = points[lo];
  const LayerPoint& c = points[lo + 1];
  const double weight =
      (b - static_cast<double>(a.batch_size)) / static_cast<double>(c.batch_size - a.batch_size);
  return value(a) + weight * (value(c) - value(a));
}

// The share of retained bytes that `part` is at a profiled point (0 when nothing is retained).
double share(int64_t part, int64_t retained) {
  return retained > 0 ? static_cast<double>(part) / static_cast<double>(retained) : 0.0;
}

LayerAt extrapolate(const LayerProfile& layer, int64_t micro_batch_size) {
  const double b = static_cast<double>(micro_batch_size);
  const LayerPoint& edge = micro_batch_size < layer.points.front().batch_size ? layer.points.front()
                                                                              : layer.points.back();
  LayerAt at;
  at.fwd_ms = std::max(0.0, layer.fits.fwd_ms.at(b));
  at.bwd_ms = std::max(0.0, layer.fits.bwd_ms.at(b));
  at.retained_bytes = non_negative_bytes(layer.fits.retained_bytes.at(b));
  const double retained = static_cast<double>(at.retained_bytes);
  at.saved_input_bytes =
      non_negative_bytes(retained * share(edge.saved_input_bytes, edge.retained_bytes));
  at.saved_output_bytes =
      non_negative_bytes(retained * share(edge.saved_output_bytes, edge.retained_bytes));
  at.fwd_transient_bytes = non_negative_bytes(layer.fits.fwd_transient_bytes.at(b));
  at.bwd_transient_bytes = non_negative_bytes(layer.fits.bwd_transient_bytes.at(b));
  return at;
}

LayerAt point_values(const LayerPoint& p) {
  return {p.fwd_ms,
          p.bwd_ms,
          p.retained_bytes,
          p.saved_input_bytes,
          p.saved_output_bytes,
          p.fwd_transient_bytes,
          p.bwd_transient_bytes};
}

LayerAt interpolate(const std::vector<LayerPoint>& points, int64_t micro_batch_size) {
  if (points.size() == 1) return point_values(points.front());
  size_t lo = 0;  // points[lo].batch_size <= b <= points[lo + 1].batch_size
  while (lo + 2 < points.size() && points[lo + 1].batch_size <= micro_batch_size) ++lo;
  const double b = static_cast<double>(micro_batch_size);
  LayerAt at;
  at.fwd_ms = between(points, lo, b, [](const LayerPoint& p) { return p.fwd_ms; });
  at.bwd_ms = between(points, lo, b, [](const LayerPoint& p) { return p.bwd_ms; });
  auto bytes = [&](int64_t LayerPoint::*field) {
    return non_negative_bytes(between(
        points, lo, b, [field](const LayerPoint& p) { return static_cast<double>(p.*field); }));
  };
  at.retained_bytes = bytes(&LayerPoint::retained_bytes);
  at.saved_input_bytes = bytes(&LayerPoint::saved_input_bytes);
  at.saved_output_bytes = bytes(&LayerPoint::saved_output_bytes);
  at.fwd_transient_bytes = bytes(&LayerPoint::fwd_transient_bytes);
  at.bwd_transient_bytes = bytes(&LayerPoint::bwd_transient_bytes);
  return at;
}

// An optional quantity at b (a B or W time, the inference forward's time or peak bytes): the fit
// outside the profiled sizes, else interpolated between points; at least 0.
template <typename T>
double optional_at(const LayerProfile& layer, const LinearFit& fit, int64_t micro_batch_size,
                   bool outside, std::optional<T> LayerPoint::*field) {
  const double b = static_cast<double>(micro_batch_size);
  if (outside) return std::max(0.0, fit.at(b));
  const std::vector<LayerPoint>& points = layer.points;
  const auto value = [field](const LayerPoint& p) {
    return static_cast<double>((p.*field).value_or(0));
  };
  if (points.size() == 1) return value(points.front());
  size_t lo = 0;
  while (lo + 2 < points.size() && points[lo + 1].batch_size <= micro_batch_size) ++lo;
  return std::max(0.0, between(points, lo, b, value));
}

}  // namespace

int64_t to_ns(double ms) {
  PIPEPLAN_CHECK(std::isfinite(ms) && std::abs(ms) <= kMaxNanosecondsMs, "a time of ", ms,
                 " ms: expected at most ", kMaxNanosecondsMs,
                 " ms, the planner's range of 64-bit nanoseconds (a profile's time, the batch or "
                 "a link's bandwidth is out of proportion)");
  return std::llround(ms * kNanosecondsPerMs);
}
double to_ms(int64_t ns) { return static_cast<double>(ns) / kNanosecondsPerMs; }

LayerAt layer_at(const LayerProfile& layer, int64_t micro_batch_size) {
  PIPEPLAN_ASSERT(!layer.points.empty() && micro_batch_size >= 1);
  const bool outside = micro_batch_size < layer.points.front().batch_size ||
                       micro_batch_size > layer.points.back().batch_size;
  LayerAt at =
      outside ? extrapolate(layer, micro_batch_size) : interpolate(layer.points, micro_batch_size);
  // Rounding must not let the saved parts exceed what is retained.
  at.saved_input_bytes = std::min(at.saved_input_bytes, at.retained_bytes);
  at.saved_output_bytes = std::min(at.saved_output_bytes, at.retained_bytes);
  const LayerPoint& nearest = *std::min_element(
      layer.points.begin(), layer.points.end(), [&](const LayerPoint& a, const LayerPoint& b) {
        return std::llabs(a.batch_size - micro_batch_size) <
               std::llabs(b.batch_size - micro_batch_size);
      });
  auto relative_spread = [](double median, double p90) {
    return median > 0 ? std::max(0.0, p90 - median) / median : 0.0;
  };
  at.fwd_spread_ms = relative_spread(nearest.fwd_ms, nearest.fwd_ms_p90) * at.fwd_ms;
  at.bwd_spread_ms = relative_spread(nearest.bwd_ms, nearest.bwd_ms_p90) * at.bwd_ms;
  if (layer.fits.bwd_input_ms && layer.fits.bwd_weight_ms) {
    at.bwd_input_ms = optional_at(layer, *layer.fits.bwd_input_ms, micro_batch_size, outside,
                                  &LayerPoint::bwd_input_ms);
    at.bwd_weight_ms = optional_at(layer, *layer.fits.bwd_weight_ms, micro_batch_size, outside,
                                   &LayerPoint::bwd_weight_ms);
  }
  if (layer.fits.inference_fwd_ms && layer.fits.inference_fwd_peak_bytes) {
    at.inference_fwd_ms = optional_at(layer, *layer.fits.inference_fwd_ms, micro_batch_size,
                                      outside, &LayerPoint::inference_fwd_ms);
    at.inference_fwd_spread_ms = relative_spread(nearest.inference_fwd_ms.value_or(0),
                                                 nearest.inference_fwd_ms_p90.value_or(0)) *
                                 at.inference_fwd_ms;
    at.inference_fwd_peak_bytes = non_negative_bytes(
        optional_at(layer, *layer.fits.inference_fwd_peak_bytes, micro_batch_size, outside,
                    &LayerPoint::inference_fwd_peak_bytes));
  }
  return at;
}

std::vector<std::string> fit_warnings(const LayerProfile& layer,
                                      std::optional<int64_t> micro_batch_size) {
  const std::string name = detail::concat("layers[", layer.index, "] (", quote(layer.name), ")");
  const std::pair<const char*, const LinearFit*> fits[] = {
      {"fwd_ms", &layer.fits.fwd_ms},
      {"bwd_ms", &layer.fits.bwd_ms},
      {"retained_bytes", &layer.fits.retained_bytes},
      {"fwd_transient_bytes", &layer.fits.fwd_transient_bytes},
      {"bwd_transient_bytes", &layer.fits.bwd_transient_bytes}};
  std::vector<std::string> warnings;
  for (const auto& [key, fit] : fits)
    if (fit->slope < 0)
      warnings.push_back(detail::concat(name, ": the ", key, " fit falls as the batch grows (",
                                        fit->intercept, " + ", fit->slope,
                                        " per sample): its values between and beyond the "
                                        "profiled batch sizes are guesses"));
  if (!micro_batch_size) return warnings;
  const bool outside = *micro_batch_size < layer.points.front().batch_size ||
                       *micro_batch_size > layer.points.back().batch_size;
  const double b = static_cast<double>(*micro_batch_size);
  for (const auto& [key, fit] : {fits[0], fits[1]})
    if (outside && fit->at(b) < 0)
      warnings.push_back(detail::concat(name, ": its ", key, " at micro-batch ", *micro_batch_size,
                                        " is clamped to 0 (the fit gives ", fit->at(b),
                                        " ms outside the profiled batch sizes)"));
  return warnings;
}

std::string extrapolation_note(const std::vector<int64_t>& profiled, int64_t micro_batch_size) {
  if (profiled.empty()) return "";
  const bool beyond = micro_batch_size > profiled.back();
  if (!beyond && micro_batch_size >= profiled.front()) return "";
  return detail::concat("micro-batch ", micro_batch_size, beyond ? " is beyond" : " is below",
                        " the profiled ", profiled.front(), "..", profiled.back(),
                        ": extrapolated");
}

namespace {

// An upper bound of one of a layer's quantities at b: the largest profiled value inside the
// profiled range, the fit's value (at least 0) outside it.
template <typename Get>
double bound_at(const LayerProfile& layer, const LinearFit& fit, int64_t b, Get value) {
  if (b < layer.points.front().batch_size || b > layer.points.back().batch_size)
    return std::max(0.0, fit.at(static_cast<double>(b)));
  double largest = 0;
  for (const LayerPoint& point : layer.points) largest = std::max(largest, value(point));
  return largest;
}

// The largest p90 / median − 1 of a layer's forward and backward times (0 when a median is 0).
double largest_spread(const LayerProfile& layer) {
  double spread = 0;
  for (const LayerPoint& p : layer.points) {
    if (p.fwd_ms > 0) spread = std::max(spread, (p.fwd_ms_p90 - p.fwd_ms) / p.fwd_ms);
    if (p.bwd_ms > 0) spread = std::max(spread, (p.bwd_ms_p90 - p.bwd_ms) / p.bwd_ms);
  }
  return spread;
}

struct ModelTotals {
  double time_ms = 0;  // forward, backward, their spreads and the optimizer step, all layers
  double retained_bytes = 0;
  double params = 0;
  double buffers_bytes = 0;
  double largest_layer_bytes = 0;  // transient or output of one layer
};

ModelTotals model_totals(const Profile& profile, int64_t b, OptimizerKind optimizer) {
  ModelTotals totals;
  const std::string optimizer_name = to_string(optimizer);
  for (const LayerProfile& layer : profile.layers) {
    const LayerFits& f = layer.fits;
    const double fwd = bound_at(layer, f.fwd_ms, b, [](const LayerPoint& p) { return p.fwd_ms; });
    const double bwd = bound_at(layer, f.bwd_ms, b, [](const LayerPoint& p) { return p.bwd_ms; });
    const auto step = layer.optimizer_step_ms.find(optimizer_name);
    totals.time_ms += (fwd + bwd) * (1 + largest_spread(layer)) +
                      (step == layer.optimizer_step_ms.end() ? 0 : step->second);
    auto bytes = [&](const LinearFit& fit, int64_t LayerPoint::*field) {
      return bound_at(layer, fit, b,
                      [field](const LayerPoint& p) { return static_cast<double>(p.*field); });
    };
    totals.retained_bytes += bytes(f.retained_bytes, &LayerPoint::retained_bytes);
    totals.largest_layer_bytes = std::max(
        {totals.largest_layer_bytes, bytes(f.fwd_transient_bytes, &LayerPoint::fwd_transient_bytes),
         bytes(f.bwd_transient_bytes, &LayerPoint::bwd_transient_bytes),
         static_cast<double>(layer.points.front().output_bytes) /
             static_cast<double>(layer.points.front().batch_size) * static_cast<double>(b)});
    if (f.inference_fwd_peak_bytes)
      totals.largest_layer_bytes =
          std::max(totals.largest_layer_bytes,
                   bound_at(layer, *f.inference_fwd_peak_bytes, b, [](const LayerPoint& p) {
                     return static_cast<double>(p.inference_fwd_peak_bytes.value_or(0));
                   }));
    totals.params += static_cast<double>(layer.param_count);
    totals.buffers_bytes += static_cast<double>(layer.buffer_bytes);
  }
  return totals;
}

}  // namespace

std::string unplannable_reason(const Profile& profile, int64_t micro_batch_size,
                               OptimizerKind optimizer) {
  const ModelTotals t = model_totals(profile, micro_batch_size, optimizer);
  const std::string at = detail::concat("at micro-batch size ", micro_batch_size, " the profile");
  if (t.time_ms > kMaxTimeMs)
    return detail::concat(at, "'s layers take ", t.time_ms, " ms per micro-batch: expected at most ",
                          kMaxTimeMs, " ms, the planner's limit");
  const double max_bytes = static_cast<double>(kMaxBytes);
  double model_input = static_cast<double>(micro_batch_size);
  for (int64_t dim : profile.model.input_shape) model_input *= static_cast<double>(dim);
  const double largest =
      std::max({t.retained_bytes, t.largest_layer_bytes, t.buffers_bytes, t.params, model_input});
  if (largest > max_bytes)
    return detail::concat(at, "'s layers need ", largest,
                          " bytes (retained activations, a transient, an activation, buffers or "
                          "parameters): expected at most ", kMaxBytes,
                          " bytes, the planner's limit");
  // Within the limits, the values a table would hold: are they all 0?
  for (const LayerProfile& layer : profile.layers) {
    const LayerAt values = layer_at(layer, micro_batch_size);
    if (values.fwd_ms + values.bwd_ms > 0) return "";
  }
  return detail::concat(at, "'s layers take 0 ms (every forward and backward time is 0, or "
                            "clamped to 0 below the fits' intercepts): a plan would predict no "
                            "compute");
}

LayerTable::LayerTable(const Profile& profile, int64_t micro_batch_size, OptimizerKind optimizer,
                       bool split_backward, bool forward_only)
    : micro_batch_size_(micro_batch_size),
      forward_only_(forward_only),
      note_(extrapolation_note(profile.settings.batch_sizes, micro_batch_size)) {
  PIPEPLAN_ASSERT(micro_batch_size >= 1 && !profile.layers.empty());
  const std::string unplannable = unplannable_reason(profile, micro_batch_size, optimizer);
  PIPEPLAN_CHECK(unplannable.empty(), "profile: ", unplannable);
  for (const LayerProfile& layer : profile.layers)
    layers_.push_back(layer_at(layer, micro_batch_size));
  PIPEPLAN_CHECK(!split_backward || profile.has_backward_split(),
                 "profile: has no bwd_input_ms/bwd_weight_ms (the B/W split zb-h1 needs): profile "
                 "again with this version of pipeplan, or choose another --schedule");
  const bool inference_measured = forward_only && profile.has_inference_forward();
  if (forward_only) make_forward_only(inference_measured);
  build_prefix_sums(profile, optimizer, split_backward && !forward_only);
  build_boundaries(profile);
  build_transient_table(inference_measured);
}

int64_t LayerTable::tied_duplicates(int first, int last) const {
  int64_t duplicates = 0;
  for (const TiedProfile& tie : ties_) {
    const auto held = std::count_if(tie.layers.begin(), tie.layers.end(),
                                    [&](int layer) { return first <= layer && layer < last; });
    if (held > 1) duplicates += (held - 1) * tie.param_count;
  }
  return duplicates;
}

int64_t LayerTable::tie_sum_over(int first, int last) const {
  int64_t total = 0;
  for (size_t tie = 0; tie < ties_.size(); ++tie) {
    const std::vector<int>& layers = ties_[tie].layers;
    const auto held = std::count_if(layers.begin(), layers.end(),
                                    [&](int layer) { return first <= layer && layer < last; });
    if (held > 0 && held < static_cast<long>(layers.size())) total += tie_sum_ns_[tie];
  }
  return total;
}

void LayerTable::build_prefix_sums(const Profile& profile, OptimizerKind optimizer,
                                   bool split_backward) {
  ties_ = profile.ties;
  tie_sum_ns_.clear();
  for (const TiedProfile& tie : ties_) {
    double ms = 0;
    if (profile.interconnect && profile.interconnect->allreduce.bandwidth_bytes_per_s > 0)
      ms = profile.interconnect->allreduce.latency_ms +
           static_cast<double>(tie.param_count * kGradientBytesPerParameter) /
               profile.interconnect->allreduce.bandwidth_bytes_per_s * 1e3;
    tie_sum_ns_.push_back(to_ns(ms));
  }
  const size_t n = layers_.size();
  for (auto* prefix : {&fwd_ns_, &bwd_ns_, &opt_ns_, &params_, &buffers_, &retained_prefix_,
                       &fwd_spread_ns_, &bwd_spread_ns_})
    prefix->assign(n + 1, 0);
  overlap_prefix_.assign(n, 0);
  if (split_backward) bwd_input_ns_.assign(n + 1, 0);
  const std::string optimizer_name = to_string(optimizer);
  for (size_t idx = 0; idx < n; ++idx) {
    const LayerProfile& layer = profile.layers[idx];
    const auto step = layer.optimizer_step_ms.find(optimizer_name);
    PIPEPLAN_CHECK(forward_only_ || step != layer.optimizer_step_ms.end(), "profile: layers[", idx,
                   "].optimizer_step_ms has no ", quote(optimizer_name),
                   " entry (profile again, or choose another --optimizer)");
    const int64_t fwd = to_ns(layers_[idx].fwd_ms);
    int64_t bwd = to_ns(layers_[idx].bwd_ms);
    if (split_backward) {
      // zb-h1 runs a backward as its B and its W: their sum is the layer's backward here, and
      // the spread scales with it.
      const int64_t input = to_ns(layers_[idx].bwd_input_ms);
      const int64_t whole = input + to_ns(layers_[idx].bwd_weight_ms);
      if (bwd > 0) layers_[idx].bwd_spread_ms *= static_cast<double>(whole) / static_cast<double>(bwd);
      layers_[idx].bwd_ms = to_ms(whole);
      bwd = whole;
      bwd_input_ns_[idx + 1] = bwd_input_ns_[idx] + input;
    }
    fwd_ns_[idx + 1] = fwd_ns_[idx] + fwd;
    bwd_ns_[idx + 1] = bwd_ns_[idx] + bwd;
    fwd_spread_ns_[idx + 1] = fwd_spread_ns_[idx] + to_ns(layers_[idx].fwd_spread_ms);
    bwd_spread_ns_[idx + 1] = bwd_spread_ns_[idx] + to_ns(layers_[idx].bwd_spread_ms);
    opt_ns_[idx + 1] = opt_ns_[idx] + (forward_only_ ? 0 : to_ns(step->second));
    params_[idx + 1] = params_[idx] + layer.param_count;
    buffers_[idx + 1] = buffers_[idx] + layer.buffer_bytes;
    retained_prefix_[idx + 1] = retained_prefix_[idx] + layers_[idx].retained_bytes;
    max_layer_compute_ns_ = std::max(max_layer_compute_ns_, fwd + bwd);
    if (idx + 1 < n) {
      const int64_t overlap =
          std::min(layers_[idx].saved_output_bytes, layers_[idx + 1].saved_input_bytes);
      overlap_prefix_[idx + 1] = overlap_prefix_[idx] + overlap;
    }
  }
  compute_prefix_ns_.resize(n + 1);
  recompute_prefix_ns_.resize(n + 1);
  for (size_t pos = 0; pos <= n; ++pos) {
    compute_prefix_ns_[pos] = fwd_ns_[pos] + bwd_ns_[pos];
    recompute_prefix_ns_[pos] = compute_prefix_ns_[pos] + fwd_ns_[pos];
  }
}

void LayerTable::make_forward_only(bool inference_measured) {
  for (LayerAt& layer : layers_) {
    layer.bwd_ms = layer.bwd_spread_ms = layer.bwd_input_ms = layer.bwd_weight_ms = 0;
    layer.retained_bytes = layer.saved_input_bytes = layer.saved_output_bytes = 0;
    layer.bwd_transient_bytes = 0;
    // An inference run's forward records no graph and runs batch norm from its statistics: the
    // profile's inference forward is that one, fwd_ms the training forward (slower).
    if (inference_measured) {
      layer.fwd_ms = layer.inference_fwd_ms;
      layer.fwd_spread_ms = layer.inference_fwd_spread_ms;
    }
  }
}

void LayerTable::build_boundaries(const Profile& profile) {
  const size_t n = layers_.size();
  shapes_.assign(n + 1, {});
  dtypes_.assign(n + 1, "float32");
  boundary_bytes_.assign(n + 1, 0);
  shapes_[0] = profile.model.input_shape;
  dtypes_[0] = profile.model.input_dtype;
  for (size_t idx = 0; idx < n; ++idx) {
    const LayerProfile& layer = profile.layers[idx];
    const std::vector<int64_t>& shape = layer.points.front().output_shape;
    PIPEPLAN_CHECK(!shape.empty(), "profile: layers[", idx,
                   "].points[0].output_shape: empty (expected the batch dimension first)");
    shapes_[idx + 1].assign(shape.begin() + 1, shape.end());
    dtypes_[idx + 1] = layer.output_dtype;
  }
  for (size_t pos = 0; pos <= n; ++pos)
    boundary_bytes_[pos] = activation_bytes(shapes_[pos], dtypes_[pos], micro_batch_size_);
  boundary_prefix_.assign(n + 2, 0);
  for (size_t pos = 0; pos <= n; ++pos)
    boundary_prefix_[pos + 1] = boundary_prefix_[pos] + boundary_bytes_[pos];
  if (n > 1)
    min_inner_boundary_bytes_ =
        *std::min_element(boundary_bytes_.begin() + 1, boundary_bytes_.begin() + n);
}

void LayerTable::build_transient_table(bool inference_measured) {
  std::vector<int64_t> base;
  for (size_t idx = 0; idx < layers_.size(); ++idx) {
    const LayerAt& layer = layers_[idx];
    if (!forward_only_) {
      base.push_back(std::max(layer.fwd_transient_bytes, layer.bwd_transient_bytes));
      continue;
    }
    // P_i, and X_i + P_i for a layer that is not its stage's first (transient_bytes).
    forward_peak_bytes_.push_back(inference_measured
                                      ? layer.inference_fwd_peak_bytes
                                      : boundary_bytes_[idx + 1] + layer.fwd_transient_bytes);
    base.push_back(boundary_bytes_[idx] + forward_peak_bytes_.back());
  }
  if (forward_only_) {
    const std::vector<int64_t>& output = shapes_.back();
    const std::vector<int64_t> target(output.begin(), output.end() - (output.empty() ? 0 : 1));
    target_bytes_ = activation_bytes(target, "int64", micro_batch_size_);
  }
  transient_levels_.push_back(std::move(base));
  for (size_t width = 2; width <= layers_.size(); width *= 2) {
    const std::vector<int64_t>& prev = transient_levels_.back();
    std::vector<int64_t> level(layers_.size() - width + 1);
    for (size_t idx = 0; idx < level.size(); ++idx)
      level[idx] = std::max(prev[idx], prev[idx + width / 2]);
    transient_levels_.push_back(std::move(level));
  }
}

}  // namespace pipeplan
