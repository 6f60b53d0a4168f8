// JSON helpers: files read and written with clear errors, schema checks, and typed field access
// whose errors name the full field path ("plan.json: stages[1].first: ...").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "common/limits.h"

namespace pipeplan {

using Json = nlohmann::json;

/// The bytes of the JSON file `path` (read_file_bytes, at most kMaxJsonFileBytes); the start of a
/// larger file is parsed first, so that one that is no JSON from its first bytes is refused
/// without being read whole. Throws Error(kBadInput) "<path>: ..." as read_file_bytes does, or
/// as parse_json would for an error in that start.
std::string read_json_text(const std::string& path);

/// parse_json(read_json_text(path), path).
Json read_json_file(const std::string& path);

/// Parses `text`, the content of the file `path`, refusing besides what is no JSON what no
/// pipeplan file holds: a key given twice in one object (Json::parse keeps the last), arrays and
/// objects nested deeper than kMaxJsonDepth, and a NUL byte (Json::parse stops reading there).
/// Throws Error(kBadInput) "<path>: not valid JSON (error at byte N)" (a NUL byte, a number beyond
/// a double: said so), "<path>: layers[2].points[0]: key 'fwd_ms' given twice; ..." or
/// "<path>: <where>: nested deeper than ...".
Json parse_json(std::string_view text, const std::string& path);

/// Parses `text` as parse_json does, except that each element of the array under `array_key` in
/// the root object is handed to `on_element` as soon as it is parsed and left out of the result
/// (the array stays, empty): a document whose bulk is that array is never held whole. Returns
/// nullopt, throwing nothing, where parse_json would throw (the caller then calls it for the
/// error). What `on_element` throws passes through.
std::optional<Json> parse_json_streaming(std::string_view text, std::string_view array_key,
                                         const std::function<void(Json&& element)>& on_element);

/// `write_file_atomic(path, json.dump(2) + "\n")` (common/files.h).
void write_json_file(const std::string& path, const Json& json);

/// A JSON array of `convert(item)` for each of `items`, in order; empty items give `[]`.
template <typename Items, typename Convert>
Json json_array(const Items& items, Convert convert) {
  Json array = Json::array();
  for (const auto& item : items) array.push_back(convert(item));
  return array;
}

/// Reads the fields of one JSON object; every error names the document and the field path, e.g.
/// "profile.json: layers[3].fwd_ms_median: missing". Copyable; holds a pointer to `json`.
class JsonReader {
 public:
  /// `document` names the file for errors, e.g. "plan.json"; `prefix` is the path of this
  /// object inside it ("" for the root). Throws if `json` is no object.
  JsonReader(const Json& json, std::string document, std::string prefix = "");

  bool has(std::string_view key) const;
  /// The raw value; throws when missing.
  const Json& at(std::string_view key) const;
  std::string string(std::string_view key) const;
  bool boolean(std::string_view key) const;
  /// A finite number.
  double number(std::string_view key) const;
  /// A finite number in [min_value, max_value].
  double number_in(std::string_view key, double min_value, double max_value) const;
  /// A number that must be finite and >= 0.
  double non_negative(std::string_view key) const;
  /// A time in milliseconds: finite, in [0, kMaxTimeMs].
  double time_ms(std::string_view key) const;
  /// An integer of the JSON text: a number with a fraction or beyond 64 bits is refused, never
  /// rounded or cut.
  int64_t integer(std::string_view key) const;
  /// An integer in [min_value, max_value].
  int64_t integer_in(std::string_view key, int64_t min_value, int64_t max_value) const;
  /// integer_in for an `int` field (max_value fits an int).
  int int_in(std::string_view key, int min_value, int max_value) const;
  /// An integer that must be >= `min_value`.
  int64_t integer_at_least(std::string_view key, int64_t min_value) const;
  /// A byte count: an integer in [0, kMaxBytes].
  int64_t byte_count(std::string_view key) const;
  /// An array of integers.
  std::vector<int64_t> integers(std::string_view key) const;
  /// An array of integers, each in [min_value, max_value].
  std::vector<int64_t> integers_in(std::string_view key, int64_t min_value,
                                   int64_t max_value) const;
  /// An array of times in milliseconds, each as time_ms.
  std::vector<double> times_ms(std::string_view key) const;
  JsonReader object(std::string_view key) const;
  /// Each element of an array of objects, with "key[i]" in its path.
  std::vector<JsonReader> objects(std::string_view key) const;
  /// Throws Error(kBadInput) with "<document>: <prefix>.<key>: <message>".
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
  /// Throws Error(kBadInput) with "<document>: <prefix>.<key>: <value>: <expected>", the value
  /// shortened (shorten).
  [[noreturn]] void reject(std::string_view key, const Json& value,
                           const std::string& expected) const;
  const std::string& document() const { return document_; }
  const Json& json() const { return *json_; }

 private:
  std::string path(std::string_view key) const;
  const Json* json_;
  std::string document_;
  std::string prefix_;
};

/// Checks `json["schema"] == expected`; names the document and both versions otherwise.
void check_schema(const Json& json, std::string_view expected, std::string_view document);

}  // namespace pipeplan
