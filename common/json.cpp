// JSON helpers: file I/O with clear errors and field access that names the path.
#include "common/json.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace pipeplan {
namespace {

std::string type_name(const Json& value) { return value.type_name(); }

}  // namespace

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  PIPEPLAN_CHECK(in.good(), "cannot read ", quote(path), ": ", std::strerror(errno));
  PIPEPLAN_CHECK(std::filesystem::is_regular_file(path), "cannot read ", quote(path),
                 ": not a regular file");
  // One read into a buffer of the file's size: a stringstream copies the bytes twice, which a
  // profile of tens of megabytes feels.
  const std::streamoff size = in.tellg();
  PIPEPLAN_CHECK(size >= 0, "cannot read ", quote(path), ": ", std::strerror(errno));
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  PIPEPLAN_CHECK(in.good() || in.eof(), "cannot read ", quote(path), ": ", std::strerror(errno));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

Json read_json_file(const std::string& path) {
  Json json = Json::parse(read_file_bytes(path), /*cb=*/nullptr, /*allow_exceptions=*/false);
  PIPEPLAN_CHECK(!json.is_discarded(), quote(path), " is not valid JSON");
  return json;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  PIPEPLAN_CHECK(file != nullptr, "cannot write ", quote(path), ": ", std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool flushed = std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  const bool closed = std::fclose(file) == 0;
  if (!(written && flushed && closed)) {
    const int err = errno;
    std::remove(tmp.c_str());
    PIPEPLAN_CHECK(false, "cannot write ", quote(path), ": ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    PIPEPLAN_CHECK(false, "cannot write ", quote(path), ": ", std::strerror(err));
  }
}

void write_json_file(const std::string& path, const Json& json) {
  write_file_atomic(path, json.dump(2) + "\n");
}

void check_writable(const std::string& path, std::string_view field) {
  PIPEPLAN_CHECK(!path.empty(), field, ": empty output path");
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  const fs::path folder = parent.empty() ? fs::path(".") : parent;
  std::error_code ec;
  PIPEPLAN_CHECK(fs::is_directory(folder, ec), field, ": cannot write ", quote(path),
                 ": folder ", quote(folder.string()), " does not exist");
  PIPEPLAN_CHECK(!fs::is_directory(path, ec), field, ": cannot write ", quote(path),
                 ": it is a folder");
  PIPEPLAN_CHECK(::access(folder.c_str(), W_OK) == 0, field, ": cannot write ", quote(path),
                 ": ", std::strerror(errno));
}

JsonReader::JsonReader(const Json& json, std::string document, std::string prefix)
    : json_(&json), document_(std::move(document)), prefix_(std::move(prefix)) {
  PIPEPLAN_CHECK(json.is_object(), document_, prefix_.empty() ? "" : ": ", prefix_,
                 ": expected a JSON object, got ", type_name(json));
}

std::string JsonReader::path(std::string_view key) const {
  return detail::concat(prefix_, prefix_.empty() ? "" : ".", key);
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
  if (!value.is_string()) fail(key, "expected a string, got " + type_name(value));
  return value.get<std::string>();
}

bool JsonReader::boolean(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_boolean()) fail(key, "expected true or false, got " + type_name(value));
  return value.get<bool>();
}

double JsonReader::number(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_number()) fail(key, "expected a number, got " + type_name(value));
  const double number = value.get<double>();
  if (!std::isfinite(number)) fail(key, "expected a finite number");
  return number;
}

double JsonReader::non_negative(std::string_view key) const {
  const double value = number(key);
  if (value < 0) fail(key, detail::concat(value, " is negative; expected a value >= 0"));
  return value;
}

int64_t JsonReader::integer(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_number_integer()) fail(key, "expected an integer, got " + value.dump());
  return value.get<int64_t>();
}

int64_t JsonReader::integer_at_least(std::string_view key, int64_t min_value) const {
  const int64_t value = integer(key);
  if (value < min_value)
    fail(key, detail::concat(value, " is out of range; expected an integer >= ", min_value));
  return value;
}

std::vector<int64_t> JsonReader::integers(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_array()) fail(key, "expected an array of integers, got " + type_name(value));
  std::vector<int64_t> out;
  for (const Json& item : value) {
    if (!item.is_number_integer()) fail(key, "expected integers, found " + item.dump());
    out.push_back(item.get<int64_t>());
  }
  return out;
}

std::vector<double> JsonReader::non_negatives(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_array()) fail(key, "expected an array of numbers, got " + type_name(value));
  std::vector<double> out;
  for (const Json& item : value) {
    if (!item.is_number()) fail(key, "expected numbers, found " + item.dump());
    const double number = item.get<double>();
    if (!std::isfinite(number) || number < 0)
      fail(key, detail::concat(number, " is not a finite value >= 0"));
    out.push_back(number);
  }
  return out;
}

JsonReader JsonReader::object(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_object()) fail(key, "expected an object, got " + type_name(value));
  return JsonReader(value, document_, path(key));
}

std::vector<JsonReader> JsonReader::objects(std::string_view key) const {
  const Json& value = at(key);
  if (!value.is_array()) fail(key, "expected an array, got " + type_name(value));
  std::vector<JsonReader> out;
  for (size_t idx = 0; idx < value.size(); ++idx) {
    const std::string item_path = detail::concat(path(key), "[", idx, "]");
    PIPEPLAN_CHECK(value[idx].is_object(), document_, ": ", item_path,
                   ": expected an object, got ", type_name(value[idx]));
    out.emplace_back(value[idx], document_, item_path);
  }
  return out;
}

void check_schema(const Json& json, std::string_view expected, std::string_view document) {
  PIPEPLAN_CHECK(json.is_object(), document, ": expected a JSON object");
  auto it = json.find("schema");
  PIPEPLAN_CHECK(it != json.end(), document, ": field 'schema' missing (expected ",
                 quote(expected), ")");
  PIPEPLAN_CHECK(it->is_string() && it->get<std::string>() == expected, document,
                 ": unsupported schema ", it->dump(), " (expected ", quote(expected), ")");
}

}  // namespace pipeplan
