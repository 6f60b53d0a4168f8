// JSON helpers: file I/O with clear errors and field access that names the path.
#include "common/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
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

// A SAX handler for Json::sax_parse that builds the document as Json::parse does (a repeated key
// keeps its last value), except for the elements of the root object's array `array_key`: each is
// handed to `on_element` once parsed and then dropped.
class StreamingDomBuilder {
 public:
  StreamingDomBuilder(Json* root, std::string_view array_key,
                      const std::function<void(Json&&)>& on_element)
      : root_(root), array_key_(array_key), on_element_(on_element) {}

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(Json::number_integer_t value) { return add(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return add(value); }
  bool number_float(Json::number_float_t value, const std::string& /*text*/) { return add(value); }
  bool string(std::string& value) { return add(std::move(value)); }
  bool binary(Json::binary_t& value) { return add(Json::binary(std::move(value))); }
  bool start_object(size_t /*size*/) {
    open_.push_back(place(Json::object()));
    return true;
  }
  bool key(std::string& key) {
    if (open_.size() == 1 && key == array_key_) {
      key_repeated_ = key_repeated_ || key_seen_;
      key_seen_ = true;
      streamed_key_next_ = true;
    }
    member_ = &(*open_.back())[std::move(key)];
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t /*size*/) {
    const bool streamed = streamed_key_next_ && open_.size() == 1;
    open_.push_back(place(Json::array()));
    if (streamed) streamed_array_ = open_.back();
    return true;
  }
  bool end_array() {
    if (open_.back() == streamed_array_) streamed_array_ = nullptr;
    return close();
  }
  bool parse_error(size_t /*position*/, const std::string& /*token*/,
                   const Json::exception& /*error*/) {
    return false;
  }
  /// Whether the root object had `array_key` more than once.
  bool key_repeated() const { return key_repeated_; }

 private:
  // A value in its place: the root, the next element of the open array, or the member of the
  // open object whose key came last.
  Json* place(Json&& value) {
    streamed_key_next_ = false;  // this is the value after the key (start_array read it first)
    if (open_.empty()) {
      *root_ = std::move(value);
      return root_;
    }
    if (open_.back()->is_array()) {
      open_.back()->push_back(std::move(value));
      return &open_.back()->back();
    }
    *member_ = std::move(value);
    return member_;
  }
  bool add(Json&& value) {
    place(std::move(value));
    hand_on_if_element();
    return true;
  }
  bool close() {
    open_.pop_back();
    hand_on_if_element();
    return true;
  }
  // Hands on the value just completed when it is an element of the streamed array.
  void hand_on_if_element() {
    if (open_.empty() || open_.back() != streamed_array_) return;
    on_element_(std::move(streamed_array_->back()));
    streamed_array_->get_ref<Json::array_t&>().pop_back();
  }

  Json* root_;
  std::string_view array_key_;
  const std::function<void(Json&&)>& on_element_;
  std::vector<Json*> open_;  ///< the arrays and objects being filled, innermost last
  Json* member_ = nullptr;
  Json* streamed_array_ = nullptr;
  bool streamed_key_next_ = false;  ///< the root's next value is under `array_key`
  bool key_seen_ = false;
  bool key_repeated_ = false;
};

}  // namespace

std::string read_file_bytes(const std::string& path, int64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  PIPEPLAN_CHECK(fs::exists(status), path, ": cannot read: ",
                 std::strerror(ec ? ec.value() : ENOENT));
  PIPEPLAN_CHECK(fs::is_regular_file(status), path,
                 ": not a regular file (a folder, FIFO or device); expected a file");
  const auto size = fs::file_size(path, ec);
  PIPEPLAN_CHECK(!ec && size <= static_cast<uintmax_t>(max_bytes), path, ": ", ec ? 0 : size,
                 " bytes: expected a file of at most ", max_bytes, " bytes");
  // One read into a buffer of the file's size: a stringstream copies the bytes twice, which a
  // profile of tens of megabytes feels.
  std::ifstream in(path, std::ios::binary);
  PIPEPLAN_CHECK(in.good(), path, ": cannot read: ", std::strerror(errno));
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  PIPEPLAN_CHECK(in.good() || in.eof(), path, ": cannot read: ", std::strerror(errno));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

Json read_json_file(const std::string& path) {
  return parse_json(read_file_bytes(path, kMaxJsonFileBytes), path);
}

Json parse_json(std::string_view text, const std::string& path) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw Error(ErrorKind::kBadInput,
                detail::concat(path, ": not valid JSON (error at byte ", e.byte, ")"));
  } catch (const Json::out_of_range& e) {  // a number beyond a double, such as 1e999
    const std::string_view what = e.what();  // "[json.exception.out_of_range.406] number ..."
    const size_t text = what.find("] ");
    throw Error(ErrorKind::kBadInput,
                detail::concat(path, ": not valid JSON (",
                               text == std::string_view::npos ? what : what.substr(text + 2),
                               ": expected a number within a double's range)"));
  }
}

std::optional<Json> parse_json_streaming(std::string_view text, std::string_view array_key,
                                         const std::function<void(Json&& element)>& on_element) {
  Json root;
  StreamingDomBuilder builder(&root, array_key, on_element);
  if (!Json::sax_parse(text, &builder) || builder.key_repeated()) return std::nullopt;
  return root;
}

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
