// Errors: message helpers behind the check macros.
#include "common/error.h"

namespace pipeplan {

namespace {

// Characters kept from the end of a shortened value: the end of a path names the file.
constexpr size_t kTailChars = 24;

void append_escaped(std::string* out, std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      *out += "\\n";
    } else if (byte < 0x20 || byte == 0x7f) {
      *out += "\\x";
      *out += kHex[byte >> 4];
      *out += kHex[byte & 0xf];
    } else {
      *out += c;
    }
  }
}

// A file path: a '/' and no whitespace or control character. It is quoted whole up to
// kQuotedPathChars, since a shortened path names no file the user can find.
bool looks_like_path(std::string_view value) {
  if (value.size() > kQuotedPathChars || value.find('/') == std::string_view::npos) return false;
  for (const char c : value)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return false;
  return true;
}

// `value` escaped, and cut to its start and end around "..." when longer than kQuotedChars (and
// no path), between `open` and `close`, with the full length after them when cut.
std::string clip(std::string_view value, std::string_view open, std::string_view close) {
  std::string out(open);
  if (value.size() <= kQuotedChars || looks_like_path(value)) {
    append_escaped(&out, value);
    out += close;
    return out;
  }
  append_escaped(&out, value.substr(0, kQuotedChars - kTailChars - 3));
  out += "...";
  append_escaped(&out, value.substr(value.size() - kTailChars));
  out += close;
  out += detail::concat(" (", value.size(), " characters)");
  return out;
}

}  // namespace

std::string shorten(std::string_view value) { return clip(value, "", ""); }

std::string quote(std::string_view value) { return clip(value, "'", "'"); }

namespace detail {
void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(ErrorKind::kInternal, concat("internal error at ", file, ":", line, ": ", cond,
                                          msg.empty() ? "" : " (", msg, msg.empty() ? "" : ")"));
}
}  // namespace detail

}  // namespace pipeplan
