// The Profile: JSON I/O, validation and linear fits.
#include "plans/profile.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/limits.h"

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

// LayerPoint's fields by type, each table in the order point_from reads them.
const std::pair<const char*, double LayerPoint::*> kPointTimeFields[] = {
    {"fwd_ms", &LayerPoint::fwd_ms}, {"fwd_ms_p90", &LayerPoint::fwd_ms_p90},
    {"bwd_ms", &LayerPoint::bwd_ms}, {"bwd_ms_p90", &LayerPoint::bwd_ms_p90}};
const std::pair<const char*, std::optional<double> LayerPoint::*> kPointOptionalTimeFields[] = {
    {"fwd_kernel_ms", &LayerPoint::fwd_kernel_ms},
    {"bwd_kernel_ms", &LayerPoint::bwd_kernel_ms},
    {"bwd_input_ms", &LayerPoint::bwd_input_ms},
    {"bwd_weight_ms", &LayerPoint::bwd_weight_ms},
    {"inference_fwd_ms", &LayerPoint::inference_fwd_ms},
    {"inference_fwd_ms_p90", &LayerPoint::inference_fwd_ms_p90}};
const std::pair<const char*, int64_t LayerPoint::*> kPointByteFields[] = {
    {"output_bytes", &LayerPoint::output_bytes},
    {"retained_bytes", &LayerPoint::retained_bytes},
    {"saved_input_bytes", &LayerPoint::saved_input_bytes},
    {"saved_output_bytes", &LayerPoint::saved_output_bytes},
    {"fwd_transient_bytes", &LayerPoint::fwd_transient_bytes},
    {"bwd_transient_bytes", &LayerPoint::bwd_transient_bytes}};

Json point_json(const LayerPoint& point) {
  Json json{{"batch_size", point.batch_size}, {"output_shape", point.output_shape}};
  for (const auto& [key, field] : kPointTimeFields) json[key] = point.*field;
  for (const auto& [key, field] : kPointOptionalTimeFields)
    if (point.*field) json[key] = *(point.*field);
  if (point.inference_fwd_peak_bytes)
    json["inference_fwd_peak_bytes"] = *point.inference_fwd_peak_bytes;
  for (const auto& [key, field] : kPointByteFields) json[key] = point.*field;
  return json;
}

LayerPoint point_from(const JsonReader& reader) {
  LayerPoint point;
  point.batch_size = reader.integer_in("batch_size", 1, kMaxBatchSize);
  for (const auto& [key, field] : kPointTimeFields) point.*field = reader.time_ms(key);
  for (const auto& [key, field] : kPointOptionalTimeFields)
    if (reader.has(key)) point.*field = reader.time_ms(key);
  if (reader.has("inference_fwd_peak_bytes"))
    point.inference_fwd_peak_bytes = reader.byte_count("inference_fwd_peak_bytes");
  point.output_shape = reader.integers_in("output_shape", 1, kMaxBytes);
  for (const auto& [key, field] : kPointByteFields) point.*field = reader.byte_count(key);
  return point;
}

Json fits_json(const LayerFits& fits) {
  Json json = Json::object();
  for (const auto& [key, field] : kLayerFitFields) json[key] = fit_json(fits.*field);
  for (const auto& [key, field] : kLayerOptionalFitFields)
    if (fits.*field) json[key] = fit_json(*(fits.*field));
  return json;
}

LayerFits fits_from(const JsonReader& reader) {
  LayerFits fits;
  for (const auto& [key, field] : kLayerFitFields) fits.*field = fit_from(reader.object(key));
  for (const auto& [key, field] : kLayerOptionalFitFields)
    if (reader.has(key)) fits.*field = fit_from(reader.object(key));
  return fits;
}

Json layer_json(const LayerProfile& layer) {
  Json json{{"index", layer.index},
            {"name", layer.name},
            {"kind", layer.kind},
            {"param_count", layer.param_count},
            {"param_bytes", layer.param_bytes},
            {"buffer_bytes", layer.buffer_bytes},
            {"output_dtype", layer.output_dtype},
            {"optimizer_step_ms", layer.optimizer_step_ms},
            {"points", json_array(layer.points, point_json)},
            {"fits", fits_json(layer.fits)}};
  if (layer.tp > 1) json["tp"] = layer.tp;  // shards only
  if (!layer.tp_divides.empty()) {
    json["tp_divides"] = layer.tp_divides;
    json["tp_all_reduces"] = layer.tp_all_reduces;
  }
  if (!layer.tp_shards.empty()) json["tp_shards"] = json_array(layer.tp_shards, layer_json);
  return json;
}

LayerProfile layer_from(const JsonReader& reader) {
  LayerProfile layer;
  layer.index = reader.int_in("index", 0, kMaxLayers - 1);
  layer.name = reader.string("name");
  layer.kind = reader.string("kind");
  layer.param_count = reader.byte_count("param_count");
  layer.param_bytes = reader.byte_count("param_bytes");
  layer.buffer_bytes = reader.byte_count("buffer_bytes");
  layer.output_dtype = reader.string("output_dtype");
  const JsonReader steps = reader.object("optimizer_step_ms");
  for (auto it = steps.json().begin(); it != steps.json().end(); ++it)
    layer.optimizer_step_ms[it.key()] = steps.time_ms(it.key());
  const std::vector<JsonReader> points = reader.objects("points");
  layer.points.reserve(points.size());
  for (const JsonReader& point : points) layer.points.push_back(point_from(point));
  layer.fits = fits_from(reader.object("fits"));
  if (reader.has("tp")) layer.tp = reader.int_in("tp", 2, kMaxDevices);  // optional: 1
  if (reader.has("tp_divides")) {                                        // optional: does not split
    const JsonReader divides = reader.object("tp_divides");
    for (auto it = divides.json().begin(); it != divides.json().end(); ++it)
      layer.tp_divides[it.key()] = divides.integer_in(it.key(), 1, kMaxBytes);
  }
  if (reader.has("tp_all_reduces"))  // optional: a transformer block's
    layer.tp_all_reduces = reader.int_in("tp_all_reduces", 1, kMaxLayers);
  if (reader.has("tp_shards"))  // optional: none
    for (const JsonReader& shard : reader.objects("tp_shards"))
      layer.tp_shards.push_back(layer_from(shard));
  return layer;
}

Json comm_json(const CommProfile& comm) {
  return Json{{"latency_ms", comm.latency_ms},
              {"bandwidth_bytes_per_s", comm.bandwidth_bytes_per_s},
              {"rms_residual_ms", comm.rms_residual_ms},
              {"points", json_array(comm.points, [](const CommProfile::Point& point) {
                 return Json{{"bytes", point.bytes}, {"time_ms", point.time_ms}};
               })}};
}

CommProfile comm_from(const JsonReader& reader) {
  CommProfile comm;
  comm.latency_ms = reader.time_ms("latency_ms");
  comm.bandwidth_bytes_per_s =
      reader.number_in("bandwidth_bytes_per_s", kMinBandwidthBytesPerS, kMaxBandwidthBytesPerS);
  comm.rms_residual_ms = reader.time_ms("rms_residual_ms");
  for (const JsonReader& point : reader.objects("points"))
    comm.points.push_back({point.byte_count("bytes"), point.time_ms("time_ms")});
  return comm;
}

GroupAllReduce group_allreduce_from(const JsonReader& reader) {
  return {reader.int_in("ranks", 3, kMaxDevices), comm_from(reader.object("allreduce"))};
}

InterconnectProfile interconnect_from(const JsonReader& link) {
  InterconnectProfile result{link.string("backend"), link.int_in("ranks", 2, kMaxDevices),
                             comm_from(link.object("p2p")), comm_from(link.object("allreduce"))};
  if (link.has("reduce_scatter")) result.reduce_scatter = comm_from(link.object("reduce_scatter"));
  if (link.has("all_gather")) result.all_gather = comm_from(link.object("all_gather"));
  if (link.has("group_allreduce"))  // optional: none
    for (const JsonReader& group : link.objects("group_allreduce")) {
      result.group_allreduce.push_back(group_allreduce_from(group));
      const int ranks = result.group_allreduce.back().ranks;
      const int above = result.group_allreduce.size() == 1 ? result.ranks
                                                           : result.group_allreduce.end()[-2].ranks;
      if (ranks <= above)
        group.fail("ranks", detail::concat(ranks, ": expected more than ", above,
                                           " (strictly ascending, above the link's ranks)"));
    }
  if (result.backend != "gloo" && result.backend != "nccl" && result.backend != "gloo-host-staging")
    link.fail("backend", detail::concat(quote(result.backend),
                                        ": expected gloo, nccl or gloo-host-staging"));
  return result;
}

Json settings_json(const ProfileSettings& settings) {
  Json json{{"device", settings.device},
            {"batch_sizes", settings.batch_sizes},
            {"precision", settings.precision},
            {"warmup", settings.warmup},
            {"repeats", settings.repeats},
            {"co_located", settings.co_located},
            {"seed", settings.seed}};
  if (!settings.tp_sizes.empty()) json["tp_sizes"] = settings.tp_sizes;
  return json;
}

ProfileSettings settings_from(const JsonReader& reader) {
  ProfileSettings settings;
  settings.device = reader.string("device");
  settings.batch_sizes = reader.integers_in("batch_sizes", 1, kMaxBatchSize);
  settings.precision = reader.string("precision");
  settings.warmup = reader.int_in("warmup", 0, std::numeric_limits<int>::max());
  settings.repeats = reader.int_in("repeats", 1, std::numeric_limits<int>::max());
  settings.co_located = reader.int_in("co_located", 1, kMaxDevices);
  settings.seed = static_cast<uint64_t>(reader.integer_at_least("seed", 0));
  if (reader.has("tp_sizes"))  // optional: none
    for (int64_t tp : reader.integers_in("tp_sizes", 2, kMaxDevices))
      settings.tp_sizes.push_back(static_cast<int>(tp));
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
  device.cores = reader.int_in("cores", 1, std::numeric_limits<int>::max());
  device.threads = reader.int_in("threads", 1, std::numeric_limits<int>::max());
  device.memory_bytes = reader.byte_count("memory_bytes");
  device.runtime_overhead_bytes = reader.byte_count("runtime_overhead_bytes");
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
  Json json{{"backend", link.backend},
            {"ranks", link.ranks},
            {"p2p", comm_json(link.p2p)},
            {"allreduce", comm_json(link.allreduce)}};
  if (!link.reduce_scatter.points.empty()) json["reduce_scatter"] = comm_json(link.reduce_scatter);
  if (!link.all_gather.points.empty()) json["all_gather"] = comm_json(link.all_gather);
  if (!link.group_allreduce.empty())
    json["group_allreduce"] = json_array(
        link.group_allreduce, [](const GroupAllReduce& group) { return to_json(group); });
  return json;
}

InterconnectProfile interconnect_from_json(const Json& json, const std::string& document) {
  return interconnect_from(JsonReader(json, document));
}

Json to_json(const GroupAllReduce& group) {
  return Json{{"ranks", group.ranks}, {"allreduce", comm_json(group.allreduce)}};
}

GroupAllReduce group_allreduce_from_json(const Json& json, const std::string& document) {
  return group_allreduce_from(JsonReader(json, document));
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

// The fit of an optional time or byte count, or nullopt unless every point has it.
template <typename T>
std::optional<LinearFit> fit_optional(const std::vector<LayerPoint>& points,
                                      std::optional<T> LayerPoint::*field) {
  std::vector<double> xs;
  std::vector<double> ys;
  for (const LayerPoint& point : points) {
    if (!(point.*field)) return std::nullopt;
    xs.push_back(static_cast<double>(point.batch_size));
    ys.push_back(static_cast<double>(*(point.*field)));
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
  fits.bwd_input_ms = fit_optional(points, &LayerPoint::bwd_input_ms);
  fits.bwd_weight_ms = fit_optional(points, &LayerPoint::bwd_weight_ms);
  fits.inference_fwd_ms = fit_optional(points, &LayerPoint::inference_fwd_ms);
  fits.inference_fwd_peak_bytes = fit_optional(points, &LayerPoint::inference_fwd_peak_bytes);
  return fits;
}

bool Profile::has_backward_split() const {
  if (layers.empty()) return false;
  for (const LayerProfile& layer : layers)
    for (const LayerPoint& point : layer.points)
      if (!point.bwd_input_ms || !point.bwd_weight_ms) return false;
  return true;
}

bool Profile::has_inference_forward() const {
  if (layers.empty()) return false;
  for (const LayerProfile& layer : layers)
    for (const LayerPoint& point : layer.points)
      if (!point.inference_fwd_ms || !point.inference_fwd_ms_p90 || !point.inference_fwd_peak_bytes)
        return false;
  return true;
}

Json to_json(const Profile& profile) {
  Json json{{"schema", kProfileSchema},
            {"tool_version", profile.tool_version},
            {"created_at", profile.created_at},
            {"model", to_json(profile.model)},
            {"settings", settings_json(profile.settings)},
            {"device", device_json(profile.device)},
            {"layers", json_array(profile.layers, layer_json)}};
  if (profile.interconnect) json["interconnect"] = to_json(*profile.interconnect);
  if (!profile.ties.empty()) {
    json["ties"] = json_array(profile.ties, [](const TiedProfile& tie) {
      return Json{{"layers", tie.layers}, {"param_count", tie.param_count}};
    });
  }
  return json;
}

namespace {

// profile_from_json, with the layers already converted when `streamed_layers` is given (the
// document's "layers" then an empty array, parse_profile_streaming having taken its elements).
Profile profile_from(const Json& json, const std::string& document,
                     std::vector<LayerProfile>* streamed_layers) {
  check_schema(json, kProfileSchema, document);
  const JsonReader reader(json, document);
  Profile profile;
  profile.tool_version = reader.string("tool_version");
  profile.created_at = reader.string("created_at");
  profile.model = model_ref_from_json(reader.object("model"));
  profile.settings = settings_from(reader.object("settings"));
  profile.device = device_from(reader.object("device"));
  if (reader.has("interconnect")) profile.interconnect = interconnect_from(reader.object("interconnect"));
  const std::vector<JsonReader> layers = reader.objects("layers");
  if (streamed_layers) profile.layers = std::move(*streamed_layers);
  profile.layers.reserve(layers.size());
  for (const JsonReader& layer : layers) profile.layers.push_back(layer_from(layer));
  if (reader.has("ties"))
    for (const JsonReader& tie : reader.objects("ties")) {
      TiedProfile tied;
      for (int64_t layer : tie.integers_in("layers", 0, kMaxLayers - 1))
        tied.layers.push_back(static_cast<int>(layer));
      tied.param_count = tie.integer_at_least("param_count", 1);
      profile.ties.push_back(std::move(tied));
    }
  profile.validate(document);
  return profile;
}

// Where the elements of the root object's "layers" array lie in `text`: a scan of the
// structure (strings, brackets) that stops after the array. Empty when the text is not shaped
// as a profile is ("layers" a root key whose array holds objects, separated by commas), or
// nests deeper than the parse's limit allows: parse_profile then reads the text another way.
struct LayerTexts {
  size_t array_open = 0;   // the array's '['
  size_t array_close = 0;  // its ']'
  std::vector<std::string_view> elements;
};

std::optional<LayerTexts> find_layer_texts(std::string_view text) {
  const size_t n = text.size();
  size_t i = 0;
  // The end of the string opening at `at` (its closing quote), or n.
  const auto string_end = [&](size_t at) {
    for (size_t j = at + 1; j < n; ++j) {
      if (text[j] == '\\') {
        ++j;
      } else if (text[j] == '"') {
        return j;
      }
    }
    return n;
  };
  const auto skip_space = [&](size_t at) {
    while (at < n && (text[at] == ' ' || text[at] == '\n' || text[at] == '\r' || text[at] == '\t'))
      ++at;
    return at;
  };
  // To the root object's key "layers", written plainly.
  int depth = 0;
  constexpr std::string_view kKey = "\"layers\"";
  for (;; ++i) {
    if (i >= n) return std::nullopt;
    const char c = text[i];
    if (c == '"') {
      if (depth == 1 && text.substr(i, kKey.size()) == kKey) {
        const size_t colon = skip_space(i + kKey.size());
        if (colon < n && text[colon] == ':') {
          i = skip_space(colon + 1);
          break;
        }
      }
      i = string_end(i);
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  if (depth != 1 || i >= n || text[i] != '[') return std::nullopt;
  LayerTexts found;
  found.array_open = i;
  i = skip_space(i + 1);
  if (i < n && text[i] == ']') {
    found.array_close = i;
    return found;
  }
  // Elements: an object, then a comma or the array's end. The array sits at depth 2; keep the
  // elements' nesting where the whole document's parse accepts it.
  constexpr int kDeepest = kMaxJsonDepth - 4;
  for (;;) {
    if (i >= n || text[i] != '{') return std::nullopt;
    const size_t begin = i;
    int nested = 0;
    for (; i < n; ++i) {
      const char c = text[i];
      if (c == '"') {
        i = string_end(i);
      } else if (c == '{' || c == '[') {
        if (++nested > kDeepest) return std::nullopt;
      } else if ((c == '}' || c == ']') && --nested == 0) {
        break;
      }
    }
    if (i >= n) return std::nullopt;
    found.elements.push_back(text.substr(begin, i + 1 - begin));
    if (found.elements.size() > static_cast<size_t>(kMaxLayers)) return std::nullopt;
    i = skip_space(i + 1);
    if (i < n && text[i] == ']') {
      found.array_close = i;
      return found;
    }
    if (i >= n || text[i] != ',') return std::nullopt;
    i = skip_space(i + 1);
  }
}

// Converts elements [first, last) of `texts`, each parsed alone; false at the first that is
// no JSON object or fails to convert.
bool convert_layers(const LayerTexts& texts, size_t first, size_t last, const std::string& path,
                    std::vector<LayerProfile>* layers) {
  try {
    for (size_t idx = first; idx < last; ++idx) {
      const Json layer = parse_json(texts.elements[idx], path);
      if (!layer.is_object()) return false;
      layers->push_back(layer_from(JsonReader(layer, path, "layers[" + std::to_string(idx) + "]")));
    }
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// detail::parse_profile_in_halves, for a text shaped as profiles are (find_layer_texts): the
// layers parsed and converted in two halves on two threads (a 10,000-layer profile is 300 MB:
// reading it was most of planning's time), the rest of the document, its layers array left
// empty, after. nullopt where that could differ from profile_from_json of the whole document:
// the text is not shaped so, a piece is no JSON, an element no object or fails to convert.
std::optional<Profile> profile_in_halves(std::string_view text, const std::string& path) {
  const std::optional<LayerTexts> texts = find_layer_texts(text);
  if (!texts) return std::nullopt;
  const size_t count = texts->elements.size();
  const size_t half = count / 2;
  std::vector<LayerProfile> first;
  std::vector<LayerProfile> second;
  bool second_ok = false;
  try {
    std::thread other([&] { second_ok = convert_layers(*texts, half, count, path, &second); });
    const bool first_ok = convert_layers(*texts, 0, half, path, &first);
    other.join();
    if (!first_ok || !second_ok) return std::nullopt;
  } catch (const std::system_error&) {  // no thread to be had: read the text another way
    return std::nullopt;
  }
  std::string rest(text.substr(0, texts->array_open + 1));
  rest.append(text.substr(texts->array_close));
  std::optional<Json> document;
  try {
    document = parse_json(rest, path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  for (LayerProfile& layer : second) first.push_back(std::move(layer));
  return profile_from(*document, path, &first);
}

// parse_profile's quick way: each layer converted as soon as the parser has it and then dropped,
// so that the document of a 10,000-layer profile is never held whole (building and freeing it
// took half the time of reading the file). nullopt where that could differ from
// profile_from_json of the whole document: the text is no JSON, or an element of "layers" is no
// object or fails to convert. The caller then reads the file that way, whose checks run in their
// documented order, so that the first error is the same as ever.
std::optional<Profile> parse_profile_streaming(std::string_view text, const std::string& path) {
  std::vector<LayerProfile> layers;
  bool all_converted = true;
  std::optional<Json> rest;
  try {
    rest = parse_json_streaming(text, "layers", [&](Json&& layer) {
      all_converted = all_converted && layer.is_object();
      if (!all_converted) return;
      const std::string prefix = "layers[" + std::to_string(layers.size()) + "]";
      layers.push_back(layer_from(JsonReader(layer, path, prefix)));
    });
  } catch (const std::exception&) {
    // A layer's error, which profile_from_json raises only after the settings' and the like
    // (the one catch outside main: the error is raised again, in its place, by the caller).
    return std::nullopt;
  }
  if (!rest || !all_converted) return std::nullopt;
  return profile_from(*rest, path, &layers);
}

}  // namespace

Profile profile_from_json(const Json& json, const std::string& document) {
  return profile_from(json, document, /*streamed_layers=*/nullptr);
}

namespace detail {
std::optional<Profile> parse_profile_in_halves(std::string_view text, const std::string& path) {
  return profile_in_halves(text, path);
}
}  // namespace detail

Profile parse_profile(std::string_view text, const std::string& path) {
  std::optional<Profile> profile = detail::parse_profile_in_halves(text, path);
  if (!profile) profile = parse_profile_streaming(text, path);
  if (!profile) profile = profile_from_json(parse_json(text, path), path);
  return *std::move(profile);
}

Profile read_profile(const std::string& path) {
  return parse_profile(read_json_text(path), path);
}

void write_profile(const std::string& path, const Profile& profile) {
  write_json_file(path, to_json(profile));
}

}  // namespace pipeplan
