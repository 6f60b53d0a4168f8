// Errors: the one exception type for bad input and runtime failures, and the check macros.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pipeplan {

/// Why a command failed; decides the exit code (docs/usage.md: 1 runtime failure, 2 bad input).
enum class ErrorKind {
  kBadInput,  ///< a flag, file, plan or data set the user gave is wrong; exit 2
  kRuntime,   ///< something failed while running (a peer died, a NaN loss); exit 1
  kInternal,  ///< a pipeplan bug (PIPEPLAN_ASSERT); exit 1
};

/// The only exception pipeplan throws on purpose. Only `main` catches it and prints
/// `pipeplan: error: <what()>` on one line.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  /// 2 for bad input, 1 otherwise.
  int exit_code() const { return kind_ == ErrorKind::kBadInput ? 2 : 1; }

 private:
  ErrorKind kind_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

/// The most characters of a value an error message quotes: a file's 100 MB string is shown by
/// its first and last characters and its length, so that the error stays one short line.
inline constexpr size_t kQuotedChars = 80;

/// The most characters of a file path quoted whole (PATH_MAX): a value with a '/' and no
/// whitespace or control character is shown whole up to this length.
inline constexpr size_t kQuotedPathChars = 4096;

/// `value` as an error message shows it: control characters escaped (\n, \xNN), and when longer
/// than kQuotedChars and no path (kQuotedPathChars), its start and end around "..." followed by
/// its length, e.g. "zzzz...zzzz (100000 characters)". Every message that shows what the user
/// gave uses it (or quote).
std::string shorten(std::string_view value);

/// `'value'` with single quotes, shortened as by shorten: "'zzzz...zzzz' (100000 characters)".
std::string quote(std::string_view value);

}  // namespace pipeplan

/// Bad user input: throws pipeplan::Error(kBadInput). The message starts lower-case, quotes the
/// value and says what is expected.
#define PIPEPLAN_CHECK(cond, ...)                                                       \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw ::pipeplan::Error(::pipeplan::ErrorKind::kBadInput,                         \
                              ::pipeplan::detail::concat(__VA_ARGS__));                 \
  } while (0)

/// A failure while running (not the user's input, not a bug): throws Error(kRuntime).
#define PIPEPLAN_RUNTIME_CHECK(cond, ...)                                               \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw ::pipeplan::Error(::pipeplan::ErrorKind::kRuntime,                          \
                              ::pipeplan::detail::concat(__VA_ARGS__));                 \
  } while (0)

/// A pipeplan bug; never fires on user input.
#define PIPEPLAN_ASSERT(cond, ...)                                                      \
  do {                                                                                  \
    if (!(cond))                                                                        \
      ::pipeplan::detail::throw_internal(__FILE__, __LINE__, #cond,                     \
                                         ::pipeplan::detail::concat("", ##__VA_ARGS__)); \
  } while (0)
