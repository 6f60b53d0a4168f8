// The Profile: JSON I/O, validation and linear fits.
#include "plans/profile.h"

#include <cmath>

#include "common/error.h"
#include "plans/plan.h"

namespace pipeplan {
namespace {

Json fit_json(const LinearFit& fit) {
  return Json{{"intercept", fit.intercept}, {"slope", fit.slope}, {"rms_residual", fit.rms_residual}};
}

LinearFit fit_from(const JsonReader& reader) {
  LinearFit fit;
  fit.intercept = reader.number("intercept");
  fit.slope = reader.number("slope");
  fit.rms_residual = reader.non_negative("rms_residual");
  return fit;
}

Json point_json(const LayerPoint& point) {
  Json json{{"batch_size", point.batch_size},
            {"fwd_ms", point.fwd_ms},
            {"fwd_ms_p90", point.fwd_ms_p90},
            {"bwd_ms", point.bwd_ms},
            {"bwd_ms_p90", point.bwd_ms_p90},
            {"output_shape", point.output_shape},
            {"output_bytes", point.output_bytes},
            {"retained_bytes", point.retained_bytes},
            {"saved_input_bytes", point.saved_input_bytes},
            {"saved_output_bytes", point.saved_output_bytes},
            {"fwd_transient_bytes", point.fwd_transient_bytes},
            {"bwd_transient_bytes", point.bwd_transient_bytes}};
  if (point.fwd_kernel_ms) json["fwd_kernel_ms"] = *point.fwd_kernel_ms;
  if (point.bwd_kernel_ms) json["bwd_kernel_ms"] = *point.bwd_kernel_ms;
  return json;
}

LayerPoint point_from(const JsonReader& reader) {
  LayerPoint point;
  point.batch_size = reader.integer_at_least("batch_size", 1);
  point.fwd_ms = reader.non_negative("fwd_ms");
  point.fwd_ms_p90 = reader.non_negative("fwd_ms_p90");
  point.bwd_ms = reader.non_negative("bwd_ms");
  point.bwd_ms_p90 = reader.non_negative("bwd_ms_p90");
  if (reader.has("fwd_kernel_ms")) point.fwd_kernel_ms = reader.non_negative("fwd_kernel_ms");
  if (reader.has("bwd_kernel_ms")) point.bwd_kernel_ms = reader.non_negative("bwd_kernel_ms");
  point.output_shape = reader.integers("output_shape");
  point.output_bytes = reader.integer_at_least("output_bytes", 0);
  point.retained_bytes = reader.integer_at_least("retained_bytes", 0);
  point.saved_input_bytes = reader.integer_at_least("saved_input_bytes", 0);
  point.saved_output_bytes = reader.integer_at_least("saved_output_bytes", 0);
  if (point.saved_input_bytes + point.saved_output_bytes > point.retained_bytes)
    reader.fail("saved_input_bytes", "saved input and output bytes exceed retained_bytes");
  point.fwd_transient_bytes = reader.integer_at_least("fwd_transient_bytes", 0);
  point.bwd_transient_bytes = reader.integer_at_least("bwd_transient_bytes", 0);
  return point;
}

Json layer_json(const LayerProfile& layer) {
  Json points = Json::array();
  for (const LayerPoint& point : layer.points) points.push_back(point_json(point));
  return Json{{"index", layer.index},
              {"name", layer.name},
              {"kind", layer.kind},
              {"param_count", layer.param_count},
              {"param_bytes", layer.param_bytes},
              {"buffer_bytes", layer.buffer_bytes},
              {"output_dtype", layer.output_dtype},
              {"optimizer_step_ms", layer.optimizer_step_ms},
              {"points", points},
              {"fits",
               {{"fwd_ms", fit_json(layer.fits.fwd_ms)},
                {"bwd_ms", fit_json(layer.fits.bwd_ms)},
                {"output_bytes", fit_json(layer.fits.output_bytes)},
                {"retained_bytes", fit_json(layer.fits.retained_bytes)},
                {"fwd_transient_bytes", fit_json(layer.fits.fwd_transient_bytes)},
                {"bwd_transient_bytes", fit_json(layer.fits.bwd_transient_bytes)}}}};
}

LayerProfile layer_from(const JsonReader& reader) {
  LayerProfile layer;
  layer.index = static_cast<int>(reader.integer_at_least("index", 0));
  layer.name = reader.string("name");
  layer.kind = reader.string("kind");
  layer.param_count = reader.integer_at_least("param_count", 0);
  layer.param_bytes = reader.integer_at_least("param_bytes", 0);
  layer.buffer_bytes = reader.integer_at_least("buffer_bytes", 0);
  layer.output_dtype = reader.string("output_dtype");
  const JsonReader steps = reader.object("optimizer_step_ms");
  for (auto it = steps.json().begin(); it != steps.json().end(); ++it)
    layer.optimizer_step_ms[it.key()] = steps.non_negative(it.key());
  for (const JsonReader& point : reader.objects("points")) layer.points.push_back(point_from(point));
  const JsonReader fits = reader.object("fits");
  layer.fits.fwd_ms = fit_from(fits.object("fwd_ms"));
  layer.fits.bwd_ms = fit_from(fits.object("bwd_ms"));
  layer.fits.output_bytes = fit_from(fits.object("output_bytes"));
  layer.fits.retained_bytes = fit_from(fits.object("retained_bytes"));
  layer.fits.fwd_transient_bytes = fit_from(fits.object("fwd_transient_bytes"));
  layer.fits.bwd_transient_bytes = fit_from(fits.object("bwd_transient_bytes"));
  return layer;
}

Json comm_json(const CommProfile& comm) {
  Json points = Json::array();
  for (const CommProfile::Point& point : comm.points)
    points.push_back(Json{{"bytes", point.bytes}, {"time_ms", point.time_ms}});
  return Json{{"latency_ms", comm.latency_ms},
              {"bandwidth_bytes_per_s", comm.bandwidth_bytes_per_s},
              {"rms_residual_ms", comm.rms_residual_ms},
              {"points", points}};
}

CommProfile comm_from(const JsonReader& reader) {
  CommProfile comm;
  comm.latency_ms = reader.non_negative("latency_ms");
  comm.bandwidth_bytes_per_s = reader.number("bandwidth_bytes_per_s");
  if (comm.bandwidth_bytes_per_s <= 0)
    reader.fail("bandwidth_bytes_per_s", detail::concat(comm.bandwidth_bytes_per_s,
                                                        " is not positive"));
  comm.rms_residual_ms = reader.non_negative("rms_residual_ms");
  for (const JsonReader& point : reader.objects("points"))
    comm.points.push_back({point.integer_at_least("bytes", 0), point.non_negative("time_ms")});
  return comm;
}

InterconnectProfile interconnect_from(const JsonReader& link) {
  InterconnectProfile result{link.string("backend"),
                             static_cast<int>(link.integer_at_least("ranks", 2)),
                             comm_from(link.object("p2p")), comm_from(link.object("allreduce"))};
  if (result.backend != "gloo" && result.backend != "nccl" && result.backend != "gloo-host-staging")
    link.fail("backend", detail::concat(quote(result.backend),
                                        " is not gloo, nccl or gloo-host-staging"));
  return result;
}

Json settings_json(const ProfileSettings& settings) {
  return Json{{"device", settings.device},       {"batch_sizes", settings.batch_sizes},
              {"precision", settings.precision}, {"warmup", settings.warmup},
              {"repeats", settings.repeats},     {"co_located", settings.co_located},
              {"seed", settings.seed}};
}

ProfileSettings settings_from(const JsonReader& reader) {
  ProfileSettings settings;
  settings.device = reader.string("device");
  settings.batch_sizes = reader.integers("batch_sizes");
  settings.precision = reader.string("precision");
  settings.warmup = static_cast<int>(reader.integer_at_least("warmup", 0));
  settings.repeats = static_cast<int>(reader.integer_at_least("repeats", 1));
  settings.co_located = static_cast<int>(reader.integer_at_least("co_located", 1));
  settings.seed = static_cast<uint64_t>(reader.integer_at_least("seed", 0));
  return settings;
}

Json device_json(const DeviceProfile& device) {
  return Json{{"kind", device.kind},
              {"name", device.name},
              {"cores", device.cores},
              {"threads", device.threads},
              {"memory_bytes", device.memory_bytes},
              {"runtime_overhead_bytes", device.runtime_overhead_bytes}};
}

DeviceProfile device_from(const JsonReader& reader) {
  DeviceProfile device;
  device.kind = reader.string("kind");
  device.name = reader.string("name");
  device.cores = static_cast<int>(reader.integer_at_least("cores", 1));
  device.threads = static_cast<int>(reader.integer_at_least("threads", 1));
  device.memory_bytes = reader.integer_at_least("memory_bytes", 0);
  device.runtime_overhead_bytes = reader.integer_at_least("runtime_overhead_bytes", 0);
  return device;
}

}  // namespace

LinearFit fit_linear(const std::vector<double>& xs, const std::vector<double>& ys) {
  PIPEPLAN_ASSERT(xs.size() == ys.size() && !xs.empty());
  const double n = static_cast<double>(xs.size());
  double sum_x = 0, sum_y = 0, sum_xx = 0, sum_xy = 0;
  for (size_t idx = 0; idx < xs.size(); ++idx) {
    sum_x += xs[idx];
    sum_y += ys[idx];
    sum_xx += xs[idx] * xs[idx];
    sum_xy += xs[idx] * ys[idx];
  }
  LinearFit fit;
  const double denominator = n * sum_xx - sum_x * sum_x;
  if (xs.size() == 1 || std::abs(denominator) < 1e-12 * std::max(1.0, n * sum_xx)) {
    fit.slope = sum_x != 0 ? sum_y / sum_x : 0;  // a line through the origin
  } else {
    fit.slope = (n * sum_xy - sum_x * sum_y) / denominator;
    fit.intercept = (sum_y - fit.slope * sum_x) / n;
  }
  double squares = 0;
  for (size_t idx = 0; idx < xs.size(); ++idx) {
    const double residual = ys[idx] - fit.at(xs[idx]);
    squares += residual * residual;
  }
  fit.rms_residual = std::sqrt(squares / n);
  return fit;
}

CommProfile fit_comm(std::vector<CommProfile::Point> points) {
  PIPEPLAN_ASSERT(points.size() >= 2, "a communication fit needs two message sizes");
  // Weighted least squares of t = a + s·bytes with weights 1/t², i.e. relative residuals.
  double sw = 0, swx = 0, swy = 0, swxx = 0, swxy = 0;
  for (const CommProfile::Point& point : points) {
    PIPEPLAN_ASSERT(point.time_ms > 0, "message of ", point.bytes, " bytes timed at ",
                    point.time_ms, " ms");
    const double w = 1.0 / (point.time_ms * point.time_ms);
    const double x = static_cast<double>(point.bytes);
    sw += w;
    swx += w * x;
    swy += w * point.time_ms;
    swxx += w * x * x;
    swxy += w * x * point.time_ms;
  }
  const double denominator = sw * swxx - swx * swx;
  PIPEPLAN_ASSERT(denominator > 0, "a communication fit needs two different message sizes");
  double slope = (sw * swxy - swx * swy) / denominator;
  double intercept = (swy - slope * swx) / sw;
  if (intercept < 0) {  // refit through the origin: time = bytes / bandwidth
    intercept = 0;
    slope = swxy / swxx;
  }
  PIPEPLAN_RUNTIME_CHECK(slope > 0, "communication times do not grow with the message size (",
                         points.front().time_ms, " ms for ", points.front().bytes, " bytes, ",
                         points.back().time_ms, " ms for ", points.back().bytes,
                         " bytes); the measurement was disturbed, run it again");
  CommProfile comm;
  comm.latency_ms = intercept;
  comm.bandwidth_bytes_per_s = 1e3 / slope;
  double squares = 0;
  for (const CommProfile::Point& point : points) {
    const double residual = point.time_ms - (intercept + slope * static_cast<double>(point.bytes));
    squares += residual * residual;
  }
  comm.rms_residual_ms = std::sqrt(squares / static_cast<double>(points.size()));
  comm.points = std::move(points);
  return comm;
}

Json to_json(const InterconnectProfile& link) {
  return Json{{"backend", link.backend},
              {"ranks", link.ranks},
              {"p2p", comm_json(link.p2p)},
              {"allreduce", comm_json(link.allreduce)}};
}

InterconnectProfile interconnect_from_json(const Json& json, const std::string& document) {
  return interconnect_from(JsonReader(json, document));
}

namespace {

template <typename Field>
LinearFit fit_field(const std::vector<LayerPoint>& points, Field field) {
  std::vector<double> xs;
  std::vector<double> ys;
  for (const LayerPoint& point : points) {
    xs.push_back(static_cast<double>(point.batch_size));
    ys.push_back(static_cast<double>(point.*field));
  }
  return fit_linear(xs, ys);
}

}  // namespace

LayerFits fit_points(const std::vector<LayerPoint>& points) {
  LayerFits fits;
  fits.fwd_ms = fit_field(points, &LayerPoint::fwd_ms);
  fits.bwd_ms = fit_field(points, &LayerPoint::bwd_ms);
  fits.output_bytes = fit_field(points, &LayerPoint::output_bytes);
  fits.retained_bytes = fit_field(points, &LayerPoint::retained_bytes);
  fits.fwd_transient_bytes = fit_field(points, &LayerPoint::fwd_transient_bytes);
  fits.bwd_transient_bytes = fit_field(points, &LayerPoint::bwd_transient_bytes);
  return fits;
}

void Profile::validate(std::string_view document) const {
  model.validate(document);
  PIPEPLAN_CHECK(!settings.batch_sizes.empty(), document, ": settings.batch_sizes: empty");
  for (size_t idx = 1; idx < settings.batch_sizes.size(); ++idx)
    PIPEPLAN_CHECK(settings.batch_sizes[idx] > settings.batch_sizes[idx - 1], document,
                   ": settings.batch_sizes: must be strictly ascending");
  parse_precision(settings.precision, detail::concat(document, ": settings.precision"));
  PIPEPLAN_CHECK(device.kind == "cpu" || device.kind == "cuda", document, ": device.kind: ",
                 quote(device.kind), " is not 'cpu' or 'cuda'");
  PIPEPLAN_CHECK(static_cast<int>(layers.size()) == model.num_layers, document, ": layers: ",
                 layers.size(), " records for a model of ", model.num_layers, " layers");
  for (size_t layer_idx = 0; layer_idx < layers.size(); ++layer_idx) {
    const LayerProfile& layer = layers[layer_idx];
    const std::string where = detail::concat(document, ": layers[", layer_idx, "]");
    PIPEPLAN_CHECK(layer.index == static_cast<int>(layer_idx), where, ".index: ", layer.index,
                   " (expected ", layer_idx, ")");
    PIPEPLAN_CHECK(layer.points.size() == settings.batch_sizes.size(), where, ".points: ",
                   layer.points.size(), " points for ", settings.batch_sizes.size(),
                   " batch sizes");
    for (size_t point_idx = 0; point_idx < layer.points.size(); ++point_idx)
      PIPEPLAN_CHECK(layer.points[point_idx].batch_size == settings.batch_sizes[point_idx], where,
                     ".points[", point_idx, "].batch_size: ", layer.points[point_idx].batch_size,
                     " (expected ", settings.batch_sizes[point_idx], ")");
  }
}

Json to_json(const Profile& profile) {
  Json layers = Json::array();
  for (const LayerProfile& layer : profile.layers) layers.push_back(layer_json(layer));
  Json json{{"schema", kProfileSchema},
            {"tool_version", profile.tool_version},
            {"created_at", profile.created_at},
            {"model", to_json(profile.model)},
            {"settings", settings_json(profile.settings)},
            {"device", device_json(profile.device)},
            {"layers", layers}};
  if (profile.interconnect) json["interconnect"] = to_json(*profile.interconnect);
  return json;
}

Profile profile_from_json(const Json& json, const std::string& document) {
  check_schema(json, kProfileSchema, document);
  const JsonReader reader(json, document);
  Profile profile;
  profile.tool_version = reader.string("tool_version");
  profile.created_at = reader.string("created_at");
  profile.model = model_ref_from_json(reader.object("model"));
  profile.settings = settings_from(reader.object("settings"));
  profile.device = device_from(reader.object("device"));
  if (reader.has("interconnect")) profile.interconnect = interconnect_from(reader.object("interconnect"));
  for (const JsonReader& layer : reader.objects("layers")) profile.layers.push_back(layer_from(layer));
  profile.validate(document);
  return profile;
}

Profile read_profile(const std::string& path) { return profile_from_json(read_json_file(path), path); }

void write_profile(const std::string& path, const Profile& profile) {
  write_json_file(path, to_json(profile));
}

}  // namespace pipeplan
