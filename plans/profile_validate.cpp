// The Profile's validation: what every reader of a profile relies on, for meaning as well as
// syntax (the fields agree with each other and with the model).
#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/limits.h"
#include "common/units.h"
#include "plans/plan.h"
#include "plans/profile.h"

namespace pipeplan {
namespace {

/// How far a stored fit may be from the fit of its points, relative to the fitted value at the
/// largest profiled batch size: the writer stores fit_points of the same numbers, and a file
/// written by hand rounds them (to 4 significant digits in tests/data), so only that differs.
constexpr double kFitTolerance = 1e-3;

// Where a point's errors point: "<document>: layers[i].points[j].", written out only when a
// check fails (PIPEPLAN_CHECK formats its message then): a 10,000-layer profile of 8 batch sizes
// has 80,000 points, and building a string for each took half the time of validating them.
struct PointAt {
  std::string_view layer_where;  ///< "<document>: layers[i]"
  size_t point_idx;
};

std::ostream& operator<<(std::ostream& out, const PointAt& at) {
  return out << at.layer_where << ".points[" << at.point_idx << "].";
}

void validate_settings(const Profile& profile, std::string_view document) {
  const std::vector<int64_t>& sizes = profile.settings.batch_sizes;
  PIPEPLAN_CHECK(!sizes.empty(), document,
                 ": settings.batch_sizes: []: expected the profiled batch sizes");
  for (size_t idx = 1; idx < sizes.size(); ++idx)
    PIPEPLAN_CHECK(sizes[idx] > sizes[idx - 1], document, ": settings.batch_sizes[", idx, "]: ",
                   sizes[idx], ": expected batch sizes in strictly ascending order");
  parse_precision(profile.settings.precision, detail::concat(document, ": settings.precision"));
  const std::vector<int>& tp_sizes = profile.settings.tp_sizes;
  for (size_t idx = 0; idx < tp_sizes.size(); ++idx)
    PIPEPLAN_CHECK(tp_sizes[idx] >= 2 && (idx == 0 || tp_sizes[idx] > tp_sizes[idx - 1]), document,
                   ": settings.tp_sizes[", idx, "]: ", tp_sizes[idx],
                   ": expected group sizes of at least 2 in strictly ascending order");
  const std::string& kind = profile.device.kind;
  PIPEPLAN_CHECK(kind == "cpu" || kind == "cuda", document, ": device.kind: ", quote(kind),
                 ": expected 'cpu' or 'cuda'");
  const std::string& device = profile.settings.device;
  PIPEPLAN_CHECK(device == kind || device.rfind(kind + ":", 0) == 0, document,
                 ": settings.device: ", quote(device), ": expected device kind ", quote(kind),
                 " (device.kind), as 'cpu', 'cuda' or 'cuda:N'");
}

// The B/W split of one point: both times or neither, each a time in ms (the JSON reader checks
// the same; a profile built in memory, e.g. by the profiler, is checked here).
void validate_split(const LayerPoint& point, const PointAt& at) {
  PIPEPLAN_CHECK(point.bwd_input_ms.has_value() == point.bwd_weight_ms.has_value(), at,
                 point.bwd_input_ms ? "bwd_weight_ms" : "bwd_input_ms",
                 ": missing: expected beside ",
                 point.bwd_input_ms ? "bwd_input_ms " : "bwd_weight_ms ",
                 point.bwd_input_ms ? *point.bwd_input_ms : point.bwd_weight_ms.value_or(0),
                 " (the B/W split has both times or neither)");
  const std::pair<const char*, const std::optional<double>*> times[] = {
      {"bwd_input_ms", &point.bwd_input_ms}, {"bwd_weight_ms", &point.bwd_weight_ms}};
  for (const auto& [key, time_ms] : times)
    PIPEPLAN_CHECK(!*time_ms || (**time_ms >= 0 && **time_ms <= kMaxTimeMs), at, key, ": ",
                   time_ms->value_or(0), ": expected a time in ms in [0, ", kMaxTimeMs, "]");
}

// The inference forward of one point: its three fields or none, times in ms with the p90 at
// least the median, bytes within kMaxBytes (the JSON reader checks the ranges; a profile built in
// memory is checked here).
void validate_inference(const LayerPoint& point, const PointAt& at) {
  const bool has[] = {point.inference_fwd_ms.has_value(), point.inference_fwd_ms_p90.has_value(),
                      point.inference_fwd_peak_bytes.has_value()};
  const char* keys[] = {"inference_fwd_ms", "inference_fwd_ms_p90", "inference_fwd_peak_bytes"};
  const int present = has[0] + has[1] + has[2];
  if (present == 0) return;
  for (int key_idx = 0; key_idx < 3; ++key_idx)
    PIPEPLAN_CHECK(has[key_idx], at, keys[key_idx], ": missing: expected beside ",
                   keys[has[0] ? 0 : 1],
                   " (the inference forward has inference_fwd_ms, inference_fwd_ms_p90 and "
                   "inference_fwd_peak_bytes, or none)");
  const std::pair<const char*, double> times[] = {{keys[0], *point.inference_fwd_ms},
                                                  {keys[1], *point.inference_fwd_ms_p90}};
  for (const auto& [key, time_ms] : times)
    PIPEPLAN_CHECK(time_ms >= 0 && time_ms <= kMaxTimeMs, at, key, ": ", time_ms,
                   ": expected a time in ms in [0, ", kMaxTimeMs, "]");
  PIPEPLAN_CHECK(*point.inference_fwd_ms_p90 >= *point.inference_fwd_ms, at,
                 "inference_fwd_ms_p90: ", *point.inference_fwd_ms_p90,
                 ": expected at least the median inference_fwd_ms ", *point.inference_fwd_ms);
  PIPEPLAN_CHECK(
      *point.inference_fwd_peak_bytes >= 0 && *point.inference_fwd_peak_bytes <= kMaxBytes, at,
      "inference_fwd_peak_bytes: ", *point.inference_fwd_peak_bytes,
      ": expected a byte count in [0, ", kMaxBytes, "]");
}

// One point: p90s at least the medians, the saved parts within what is retained, an output
// shape of `batch_size` samples whose bytes are output_bytes, its B/W split and its inference
// forward. `dtype_field` names the layer's output_dtype for dtype_bytes's error.
void validate_point(const LayerProfile& layer, size_t point_idx, const std::string& where,
                    const std::string& dtype_field) {
  const LayerPoint& point = layer.points[point_idx];
  const PointAt at{where, point_idx};
  PIPEPLAN_CHECK(point.fwd_ms_p90 >= point.fwd_ms, at, "fwd_ms_p90: ", point.fwd_ms_p90,
                 ": expected at least the median fwd_ms ", point.fwd_ms);
  PIPEPLAN_CHECK(point.bwd_ms_p90 >= point.bwd_ms, at, "bwd_ms_p90: ", point.bwd_ms_p90,
                 ": expected at least the median bwd_ms ", point.bwd_ms);
  PIPEPLAN_CHECK(point.saved_input_bytes + point.saved_output_bytes <= point.retained_bytes, at,
                 "saved_input_bytes: ", point.saved_input_bytes, ": expected, with ",
                 point.saved_output_bytes, " saved_output_bytes, at most retained_bytes ",
                 point.retained_bytes);
  const std::vector<int64_t>& shape = point.output_shape;
  PIPEPLAN_CHECK(!shape.empty() && shape.front() == point.batch_size, at, "output_shape: ",
                 format_shape(shape), ": expected the batch dimension ", point.batch_size, " first");
  const std::vector<int64_t>& first = layer.points.front().output_shape;
  PIPEPLAN_CHECK(std::equal(shape.begin() + 1, shape.end(), first.begin() + 1, first.end()), at,
                 "output_shape: ", format_shape(shape), ": expected the sample shape of points[0] ",
                 format_shape(first));
  double bytes = static_cast<double>(dtype_bytes(layer.output_dtype, dtype_field));
  for (int64_t dim : shape) bytes *= static_cast<double>(dim);
  PIPEPLAN_CHECK(bytes == static_cast<double>(point.output_bytes), at, "output_bytes: ",
                 point.output_bytes, ": expected ", bytes, " (output_shape ", format_shape(shape),
                 " of ", layer.output_dtype, ")");
  validate_split(point, at);
  validate_inference(point, at);
}

bool close(double stored, double expected, double scale) {
  return std::abs(stored - expected) <= kFitTolerance * (scale + std::abs(expected));
}

// A stored fit against the least-squares fit of the layer's points.
void validate_fit(const LinearFit& stored, const LinearFit& fitted, const LayerProfile& layer,
                  const std::string& where, const char* key) {
  const double scale = std::abs(fitted.at(static_cast<double>(layer.points.back().batch_size)));
  PIPEPLAN_CHECK(close(stored.intercept, fitted.intercept, scale) &&
                     close(stored.slope, fitted.slope, scale) &&
                     close(stored.rms_residual, fitted.rms_residual, scale),
                 where, ".fits.", key, ": intercept ", stored.intercept, ", slope ", stored.slope,
                 ", rms_residual ", stored.rms_residual, ": expected the fit of the points (",
                 fitted.intercept, ", ", fitted.slope, ", ", fitted.rms_residual, ")");
}

// Each stored fit against the least-squares fit of the layer's points; the B/W split's and the
// inference forward's fits exactly when the points have them.
void validate_fits(const LayerProfile& layer, const std::string& where) {
  const LayerFits expected = fit_points(layer.points);
  for (const auto& [key, field] : kLayerFitFields)
    validate_fit(layer.fits.*field, expected.*field, layer, where, key);
  for (const auto& [key, field] : kLayerOptionalFitFields) {
    const std::optional<LinearFit>& stored = layer.fits.*field;
    const std::optional<LinearFit>& fitted = expected.*field;
    PIPEPLAN_CHECK(stored.has_value() == fitted.has_value(), where, ".fits.", key, ": ",
                   stored ? "present" : "missing", ": expected ",
                   fitted ? "the fit of the points' " : "none, as the points have no ", key);
    if (stored) validate_fit(*stored, *fitted, layer, where, key);
  }
}

// An optional measurement (`what`, its fields `keys`, `has` telling whether a point has any of
// them) at every point of every layer or at none: a planner that uses it needs it of every layer.
void validate_everywhere(const Profile& profile, std::string_view document, const char* what,
                         const char* keys, bool (*has)(const LayerPoint&)) {
  std::optional<std::pair<size_t, size_t>> with;
  std::optional<std::pair<size_t, size_t>> without;
  for (size_t layer_idx = 0; layer_idx < profile.layers.size(); ++layer_idx) {
    const std::vector<LayerPoint>& points = profile.layers[layer_idx].points;
    for (size_t point_idx = 0; point_idx < points.size(); ++point_idx) {
      std::optional<std::pair<size_t, size_t>>& first = has(points[point_idx]) ? with : without;
      if (!first) first = std::make_pair(layer_idx, point_idx);
    }
  }
  const std::string first_key(keys, std::string_view(keys).find(','));
  PIPEPLAN_CHECK(!with || !without, document, ": layers[", without->first, "].points[",
                 without->second, "].", first_key, ": missing: expected ", what, " (", keys,
                 ") at every point, as layers[", with->first, "].points[", with->second,
                 "] has it, or at none");
}

// The B/W split (a planner that schedules B and W apart needs both times of every layer) and the
// inference forward, each at every point of every layer or at none.
void validate_optional_measurements(const Profile& profile, std::string_view document) {
  validate_everywhere(profile, document, "the B/W split", "bwd_input_ms, bwd_weight_ms",
                      [](const LayerPoint& p) { return p.bwd_input_ms || p.bwd_weight_ms; });
  validate_everywhere(
      profile, document, "the inference forward",
      "inference_fwd_ms, inference_fwd_ms_p90, inference_fwd_peak_bytes", [](const LayerPoint& p) {
        return p.inference_fwd_ms || p.inference_fwd_ms_p90 || p.inference_fwd_peak_bytes;
      });
}

void validate_layer(const Profile& profile, size_t layer_idx, std::string_view document) {
  const LayerProfile& layer = profile.layers[layer_idx];
  // Appends rather than detail::concat, whose string stream costs more than the checks of a
  // small layer; the point checks format their own paths only when they fail.
  std::string where(document);
  where += ": layers[" + std::to_string(layer_idx) + "]";
  const std::string dtype_field = where + ".output_dtype";
  PIPEPLAN_CHECK(layer.index == static_cast<int>(layer_idx), where, ".index: ", layer.index,
                 ": expected ", layer_idx, " (layers in order)");
  const std::vector<int64_t>& sizes = profile.settings.batch_sizes;
  PIPEPLAN_CHECK(layer.points.size() == sizes.size(), where, ".points: ", layer.points.size(),
                 " points: expected one per batch size (", sizes.size(), ")");
  for (size_t point_idx = 0; point_idx < layer.points.size(); ++point_idx)
    PIPEPLAN_CHECK(layer.points[point_idx].batch_size == sizes[point_idx], where, ".points[",
                   point_idx, "].batch_size: ", layer.points[point_idx].batch_size,
                   ": expected settings.batch_sizes[", point_idx, "] = ", sizes[point_idx]);
  PIPEPLAN_CHECK((layer.param_count == 0) == (layer.param_bytes == 0), where, ".param_bytes: ",
                 layer.param_bytes, ": expected 0 exactly when param_count is 0 (it is ",
                 layer.param_count, ")");
  for (size_t point_idx = 0; point_idx < layer.points.size(); ++point_idx)
    validate_point(layer, point_idx, where, dtype_field);
  validate_fits(layer, where);
}

// A splitting layer's shards: one per size of settings.tp_sizes, in order, each a valid record
// of the same layer measured as the whole one was (the same optional measurements).
void validate_shards(const Profile& profile, size_t layer_idx, std::string_view document) {
  const LayerProfile& layer = profile.layers[layer_idx];
  const std::string where = detail::concat(document, ": layers[", layer_idx, "]");
  PIPEPLAN_CHECK(layer.tp == 1, where, ".tp: ", layer.tp,
                 ": expected 1 (a whole layer; shards are in tp_shards)");
  if (layer.tp_shards.empty()) return;
  const std::vector<int>& sizes = profile.settings.tp_sizes;
  PIPEPLAN_CHECK(layer.tp_shards.size() == sizes.size(), where,
                 ".tp_shards: ", layer.tp_shards.size(),
                 " shards: expected one per settings.tp_sizes (", sizes.size(), ")");
  for (size_t shard_idx = 0; shard_idx < sizes.size(); ++shard_idx) {
    const LayerProfile& shard = layer.tp_shards[shard_idx];
    const std::string at = detail::concat(where, ".tp_shards[", shard_idx, "]");
    PIPEPLAN_CHECK(shard.tp == sizes[shard_idx], at, ".tp: ", shard.tp,
                   ": expected settings.tp_sizes[", shard_idx, "] = ", sizes[shard_idx]);
    PIPEPLAN_CHECK(shard.index == layer.index && shard.name == layer.name &&
                       shard.kind == layer.kind && shard.tp_shards.empty(),
                   at, ": ", quote(shard.name), ": expected a shard of layer ", quote(layer.name),
                   " (same index, name and kind, no shards of its own)");
    PIPEPLAN_CHECK(shard.points.size() == layer.points.size(), at, ".points: ", shard.points.size(),
                   " points: expected one per batch size (", layer.points.size(), ")");
    for (size_t point_idx = 0; point_idx < shard.points.size(); ++point_idx) {
      const LayerPoint& point = shard.points[point_idx];
      const LayerPoint& whole = layer.points[point_idx];
      PIPEPLAN_CHECK(point.batch_size == whole.batch_size &&
                         point.bwd_input_ms.has_value() == whole.bwd_input_ms.has_value() &&
                         point.inference_fwd_ms.has_value() == whole.inference_fwd_ms.has_value(),
                     at, ".points[", point_idx, "]: batch size ", point.batch_size,
                     ": expected the whole layer's batch size ", whole.batch_size,
                     " and its optional measurements");
      validate_point(shard, point_idx, at, at + ".output_dtype");
    }
    validate_fits(shard, at);
  }
}

}  // namespace

void Profile::validate(std::string_view document) const {
  model.validate(document);
  validate_settings(*this, document);
  PIPEPLAN_CHECK(static_cast<int>(layers.size()) == model.num_layers, document, ": layers: ",
                 layers.size(), " records: expected one per layer of the model (",
                 model.num_layers, ", model.num_layers)");
  validate_optional_measurements(*this, document);
  for (size_t layer_idx = 0; layer_idx < layers.size(); ++layer_idx) {
    validate_layer(*this, layer_idx, document);
    validate_shards(*this, layer_idx, document);
  }
  for (size_t tie_idx = 0; tie_idx < ties.size(); ++tie_idx) {
    const TiedProfile& tie = ties[tie_idx];
    const std::string where = detail::concat(document, ": ties[", tie_idx, "]");
    PIPEPLAN_CHECK(tie.layers.size() >= 2, where, ".layers: ", tie.layers.size(),
                   " layers: expected the two or more layers that use the parameter");
    for (size_t idx = 0; idx < tie.layers.size(); ++idx) {
      const int layer = tie.layers[idx];
      PIPEPLAN_CHECK(layer < static_cast<int>(layers.size()) &&
                         (idx == 0 || layer > tie.layers[idx - 1]),
                     where, ".layers[", idx, "]: ", layer,
                     ": expected layers of the model in strictly ascending order");
      PIPEPLAN_CHECK(tie.param_count <= layers[layer].param_count, where, ".param_count: ",
                     tie.param_count, ": expected at most layers[", layer, "].param_count ",
                     layers[layer].param_count);
    }
  }
}

}  // namespace pipeplan
