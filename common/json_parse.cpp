// Reading JSON text: one SAX builder for every document pipeplan reads, which refuses what
// Json::parse would accept but no pipeplan file holds (a key twice in one object, nesting deeper
// than kMaxJsonDepth, a NUL byte) and names where.
#include <cstring>

#include "common/json.h"

namespace pipeplan {
namespace {

// How much of a larger JSON file is parsed before the rest is read (read_json_text): a file that
// is no JSON from its first bytes fails without being read whole.
constexpr size_t kCheckedStartBytes = size_t{1} << 20;

// A SAX handler for Json::sax_parse that builds the document as Json::parse does, except that it
// stops at a repeated key or at nesting deeper than kMaxJsonDepth (error() says why), and that
// the elements of the root object's array `array_key`, when `on_element` is given, are handed to
// it once parsed and then dropped.
class DomBuilder {
 public:
  DomBuilder(Json* root, std::string_view array_key,
             const std::function<void(Json&&)>* on_element)
      : root_(root), array_key_(array_key), on_element_(on_element) {}

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(Json::number_integer_t value) { return add(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return add(value); }
  bool number_float(Json::number_float_t value, const std::string& /*text*/) { return add(value); }
  bool string(std::string& value) { return add(std::move(value)); }
  bool binary(Json::binary_t& value) { return add(Json::binary(std::move(value))); }
  bool start_object(size_t /*size*/) { return open(Json::object()); }
  bool key(std::string& key) {
    auto [member, added] =
        open_.back().json->get_ref<Json::object_t&>().emplace(std::move(key), nullptr);
    if (!added)
      return refuse(detail::concat(where(), "key ", quote(member->first),
                                   " given twice; expected each key once in an object"));
    member_ = &member->second;
    member_key_ = &member->first;
    streamed_key_next_ = on_element_ && open_.size() == 1 && member->first == array_key_;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t /*size*/) {
    const bool streamed = streamed_key_next_;
    if (!open(Json::array())) return false;
    if (streamed) streamed_array_ = open_.back().json;
    return true;
  }
  bool end_array() {
    if (open_.back().json == streamed_array_) streamed_array_ = nullptr;
    return close();
  }
  bool parse_error(size_t position, const std::string& /*token*/, const Json::exception& error) {
    error_byte_ = position;
    if (dynamic_cast<const Json::out_of_range*>(&error) == nullptr) {
      stop_ = Stop::kSyntax;
      error_ = detail::concat("not valid JSON (error at byte ", position, ")");
      return false;
    }
    // A number beyond a double, such as 1e999: "[json.exception.out_of_range.406] number ...".
    stop_ = Stop::kNumber;
    const std::string_view what = error.what();
    const size_t text = what.find("] ");
    error_ = detail::concat("not valid JSON (",
                            shorten(text == std::string_view::npos ? what : what.substr(text + 2)),
                            ": expected a number within a double's range)");
    return false;
  }
  /// Why the parse stopped ("" while it has not).
  const std::string& error() const { return error_; }
  /// Whether the parse of a text of `text_bytes` stopped where any longer text that starts with
  /// it stops too: at a refusal, at a syntax error within the text (at its end the parser read
  /// past it), at a number beyond a double that ended before the end (one cut there may grow
  /// beyond it, or back within it with an exponent).
  bool stopped_before(size_t text_bytes) const {
    return stop_ == Stop::kRefusal || (stop_ == Stop::kSyntax && error_byte_ <= text_bytes) ||
           (stop_ == Stop::kNumber && error_byte_ < text_bytes);
  }

 private:
  // An open array or object and where it sits, for the messages.
  struct Open {
    Json* json;
    const std::string* key;  ///< its key in the enclosing object, or null
    size_t index;            ///< its index in the enclosing array
    size_t elements = 0;     ///< values placed in it (an array), those handed on included
  };

  bool refuse(std::string message) {
    stop_ = Stop::kRefusal;
    error_ = std::move(message);
    return false;
  }
  // "layers[3].points[0]: ", or "" at the root.
  std::string where() const {
    std::string path;
    for (size_t idx = 1; idx < open_.size(); ++idx) {
      if (open_[idx].key == nullptr) {
        path += "[" + std::to_string(open_[idx].index) + "]";
        continue;
      }
      if (!path.empty()) path += '.';
      path += *open_[idx].key;
    }
    return path.empty() ? "" : shorten(path) + ": ";
  }
  // A value in its place: the root, the next element of the open array, or the member of the
  // open object whose key came last.
  Json* place(Json&& value, const std::string** key, size_t* index) {
    streamed_key_next_ = false;  // this is the value after the key (start_array read it first)
    *key = nullptr;
    *index = 0;
    if (open_.empty()) {
      *root_ = std::move(value);
      return root_;
    }
    Open& parent = open_.back();
    if (parent.json->is_array()) {
      auto& array = parent.json->get_ref<Json::array_t&>();
      array.push_back(std::move(value));
      *index = parent.elements++;
      return &array.back();
    }
    *member_ = std::move(value);
    *key = member_key_;
    return member_;
  }
  bool open(Json&& container) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth))
      return refuse(detail::concat(where(), "nested deeper than ", kMaxJsonDepth,
                                   " levels; expected at most ", kMaxJsonDepth,
                                   " arrays and objects one inside another"));
    Open opened{nullptr, nullptr, 0};
    opened.json = place(std::move(container), &opened.key, &opened.index);
    open_.push_back(opened);
    return true;
  }
  bool add(Json&& value) {
    const std::string* key = nullptr;
    size_t index = 0;
    place(std::move(value), &key, &index);
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
    if (open_.empty() || open_.back().json != streamed_array_) return;
    (*on_element_)(std::move(streamed_array_->back()));
    streamed_array_->get_ref<Json::array_t&>().pop_back();
  }

  Json* root_;
  std::string_view array_key_;
  const std::function<void(Json&&)>* on_element_;
  std::vector<Open> open_;  ///< the arrays and objects being filled, innermost last
  Json* member_ = nullptr;
  const std::string* member_key_ = nullptr;
  Json* streamed_array_ = nullptr;
  bool streamed_key_next_ = false;  ///< the root's next value is under `array_key`
  // Why the parse stopped: not (yet), a refusal of the builder, the parser's syntax error, a
  // number beyond a double.
  enum class Stop { kNone, kRefusal, kSyntax, kNumber };
  Stop stop_ = Stop::kNone;
  std::string error_;
  size_t error_byte_ = 0;  ///< where the parser stopped (kSyntax, kNumber)
};

// Parses `text` into `builder`; false where it stops, with builder.error() set or, for a NUL
// byte, `nul_error`. The parser takes a NUL byte for the end of the text, so that what follows
// one would go unread: the text is parsed up to the first, and an error before it is reported,
// else the NUL byte.
bool parse_into(std::string_view text, DomBuilder* builder, std::string* nul_error) {
  const void* nul = std::memchr(text.data(), '\0', text.size());
  if (nul == nullptr) return Json::sax_parse(text, builder);
  const size_t offset = static_cast<size_t>(static_cast<const char*>(nul) - text.data());
  if (!Json::sax_parse(text.substr(0, offset), builder) && builder->stopped_before(offset))
    return false;
  *nul_error = detail::concat("not valid JSON (error at byte ", offset + 1, ": a NUL byte)");
  return false;
}

[[noreturn]] void refuse_text(const std::string& path, const DomBuilder& builder,
                              const std::string& nul_error) {
  throw Error(ErrorKind::kBadInput,
              detail::concat(path, ": ", nul_error.empty() ? builder.error() : nul_error));
}

}  // namespace

Json parse_json(std::string_view text, const std::string& path) {
  Json root;
  DomBuilder builder(&root, "", nullptr);
  std::string nul_error;
  if (!parse_into(text, &builder, &nul_error)) refuse_text(path, builder, nul_error);
  return root;
}

std::optional<Json> parse_json_streaming(std::string_view text, std::string_view array_key,
                                         const std::function<void(Json&& element)>& on_element) {
  Json root;
  DomBuilder builder(&root, array_key, &on_element);
  std::string nul_error;
  if (!parse_into(text, &builder, &nul_error)) return std::nullopt;
  return root;
}

std::string read_json_text(const std::string& path) {
  return read_file_bytes(path, kMaxJsonFileBytes, kCheckedStartBytes, [&](std::string_view start) {
    Json root;
    DomBuilder builder(&root, "", nullptr);
    std::string nul_error;
    if (parse_into(start, &builder, &nul_error)) return;
    if (!nul_error.empty() || builder.stopped_before(start.size()))
      refuse_text(path, builder, nul_error);
  });
}

Json read_json_file(const std::string& path) { return parse_json(read_json_text(path), path); }

}  // namespace pipeplan
