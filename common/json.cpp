// JSON helpers: field access that names the path, schema checks and writes (reading the text:
// json_parse.cpp).
#include "common/json.h"

#include <cmath>
#include <limits>

namespace pipeplan {
namespace {

// An integer of the JSON text in [min_value, max_value]. nlohmann reads integers above 2^63 − 1
// as unsigned, which get<int64_t>() would wrap; those are out of any int64 range.
bool in_range(const Json& value, int64_t min_value, int64_t max_value) {
  if (value.is_number_unsigned())
    return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
           value.get<int64_t>() >= min_value && value.get<int64_t>() <= max_value;
  if (!value.is_number_integer()) return false;
  return value.get<int64_t>() >= min_value && value.get<int64_t>() <= max_value;
}

// "expected an integer in [1, 65536]", or ">= 1" when the range is open above.
std::string range_text(int64_t min_value, int64_t max_value) {
  if (max_value == std::numeric_limits<int64_t>::max())
    return min_value == std::numeric_limits<int64_t>::min()
               ? "expected an integer"
               : detail::concat("expected an integer >= ", min_value);
  return detail::concat("expected an integer in [", min_value, ", ", max_value, "]");
}

}  // namespace

void write_json_file(const std::string& path, const Json& json) {
  write_file_atomic(path, json.dump(2) + "\n");
}

JsonReader::JsonReader(const Json& json, std::string document, std::string prefix)
    : json_(&json), document_(std::move(document)), prefix_(std::move(prefix)) {
  PIPEPLAN_CHECK(json.is_object(), document_, prefix_.empty() ? "" : ": ", prefix_, ": ",
                 shorten(json.dump()), ": expected a JSON object");
}

// Built with appends rather than detail::concat: every object and array element read makes one,
// and a string stream costs more than the rest of reading a small object (a 10,000-layer profile
// makes about 200,000).
std::string JsonReader::path(std::string_view key) const {
  if (prefix_.empty()) return shorten(key);
  std::string path = prefix_;
  path += '.';
  path += shorten(key);
  return path;
}

void JsonReader::fail(std::string_view key, const std::string& message) const {
  throw Error(ErrorKind::kBadInput, detail::concat(document_, ": ", path(key), ": ", message));
}

bool JsonReader::has(std::string_view key) const { return json_->contains(key); }

const Json& JsonReader::at(std::string_view key) const {
  auto it = json_->find(key);
  if (it == json_->end()) fail(key, "missing");
  return *it;
}

std::string JsonReader::string(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_string()) reject(key, value, "expected a string");
  return value.get<std::string>();
}

bool JsonReader::boolean(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_boolean()) reject(key, value, "expected true or false");
  return value.get<bool>();
}

void JsonReader::reject(std::string_view key, const Json& value,
                        const std::string& expected) const {
  fail(key, detail::concat(shorten(value.dump()), ": ", expected));
}

double JsonReader::number(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_number()) reject(key, value, "expected a number");
  const double number = value.get<double>();
  if (!std::isfinite(number)) reject(key, value, "expected a finite number");
  return number;
}

double JsonReader::number_in(std::string_view key, double min_value, double max_value) const {
  const double number = this->number(key);
  if (number < min_value || number > max_value)
    reject(key, at(key), detail::concat("expected a number in [", min_value, ", ", max_value, "]"));
  return number;
}

double JsonReader::non_negative(std::string_view key) const {
  const double value = number(key);
  if (value < 0) reject(key, at(key), "expected a value >= 0");
  return value;
}

double JsonReader::time_ms(std::string_view key) const {
  const double value = number(key);
  if (value < 0 || value > kMaxTimeMs)
    reject(key, at(key), detail::concat("expected a time in ms in [0, ", kMaxTimeMs, "]"));
  return value;
}

int64_t JsonReader::integer(std::string_view key) const {
  return integer_in(key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}

int64_t JsonReader::integer_in(std::string_view key, int64_t min_value, int64_t max_value) const {
  const Json& value = at(key);
  if (!in_range(value, min_value, max_value)) reject(key, value, range_text(min_value, max_value));
  return value.get<int64_t>();
}

int JsonReader::int_in(std::string_view key, int min_value, int max_value) const {
  return static_cast<int>(integer_in(key, min_value, max_value));
}

int64_t JsonReader::integer_at_least(std::string_view key, int64_t min_value) const {
  return integer_in(key, min_value, std::numeric_limits<int64_t>::max());
}

int64_t JsonReader::byte_count(std::string_view key) const {
  return integer_in(key, 0, kMaxBytes);
}

std::vector<int64_t> JsonReader::integers(std::string_view key) const {
  return integers_in(key, std::numeric_limits<int64_t>::min(),
                     std::numeric_limits<int64_t>::max());
}

std::vector<int64_t> JsonReader::integers_in(std::string_view key, int64_t min_value,
                                             int64_t max_value) const {
  const Json& value = at(key);
  if (!value.is_array()) reject(key, value, "expected an array of integers");
  std::vector<int64_t> out;
  for (const Json& item : value) {
    if (!in_range(item, min_value, max_value))
      reject(key, item, range_text(min_value, max_value) + " in the array");
    out.push_back(item.get<int64_t>());
  }
  return out;
}

std::vector<double> JsonReader::times_ms(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_array()) reject(key, value, "expected an array of times in ms");
  std::vector<double> out;
  for (const Json& item : value) {
    if (!item.is_number() || !std::isfinite(item.get<double>()) || item.get<double>() < 0 ||
        item.get<double>() > kMaxTimeMs)
      reject(key, item, detail::concat("expected times in ms in [0, ", kMaxTimeMs, "]"));
    out.push_back(item.get<double>());
  }
  return out;
}

JsonReader JsonReader::object(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_object()) reject(key, value, "expected an object");
  return JsonReader(value, document_, path(key));
}

std::vector<JsonReader> JsonReader::objects(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_array()) reject(key, value, "expected an array of objects");
  const std::string array_path = path(key);
  std::vector<JsonReader> out;
  out.reserve(value.size());
  for (size_t idx = 0; idx < value.size(); ++idx) {
    const std::string item_path = array_path + "[" + std::to_string(idx) + "]";
    PIPEPLAN_CHECK(value[idx].is_object(), document_, ": ", item_path, ": ",
                   shorten(value[idx].dump()), ": expected an object");
    out.emplace_back(value[idx], document_, item_path);
  }
  return out;
}

void check_schema(const Json& json, std::string_view expected, std::string_view document) {
  PIPEPLAN_CHECK(json.is_object(), document, ": expected a JSON object");
  auto it = json.find("schema");
  PIPEPLAN_CHECK(it != json.end(), document, ": schema: missing; expected ", quote(expected));
  PIPEPLAN_CHECK(it->is_string() && it->get<std::string>() == expected, document, ": schema: ",
                 shorten(it->dump()), ": unsupported; expected ", quote(expected));
}

}  // namespace pipeplan
