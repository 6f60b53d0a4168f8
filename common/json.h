// JSON helpers: files read and written with clear errors, schema checks, and typed field access
// whose errors name the full field path ("plan.json: stages[1].first: ...").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pipeplan {

using Json = nlohmann::json;

/// A file's bytes, read in one piece. Throws Error(kBadInput) naming the path when it is
/// missing or unreadable.
std::string read_file_bytes(const std::string& path);

/// Reads and parses a JSON file. Throws Error(kBadInput) naming the path when it is missing,
/// unreadable or not JSON.
Json read_json_file(const std::string& path);

/// Writes text to `path` through a temporary file in the same folder and a rename, so a crash
/// never leaves a half-written file. Throws Error(kBadInput) naming the path when it cannot.
void write_file_atomic(const std::string& path, const std::string& text);

/// `write_file_atomic(path, json.dump(2) + "\n")`.
void write_json_file(const std::string& path, const Json& json);

/// Checks that the parent folder of `path` exists and that a file can be created there;
/// `field` names the flag in the error. Call before long work so that it fails fast.
void check_writable(const std::string& path, std::string_view field);

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
  double number(std::string_view key) const;
  /// A number that must be finite and >= 0.
  double non_negative(std::string_view key) const;
  int64_t integer(std::string_view key) const;
  /// An integer that must be >= `min_value`.
  int64_t integer_at_least(std::string_view key, int64_t min_value) const;
  std::vector<int64_t> integers(std::string_view key) const;
  /// An array of numbers that must each be finite and >= 0.
  std::vector<double> non_negatives(std::string_view key) const;
  JsonReader object(std::string_view key) const;
  /// Each element of an array of objects, with "key[i]" in its path.
  std::vector<JsonReader> objects(std::string_view key) const;
  /// Throws Error(kBadInput) with "<document>: <prefix>.<key>: <message>".
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
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
