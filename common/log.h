// Logging: one-line messages on stderr and a progress line that only a terminal sees.
#pragma once

#include <string>

#include "common/error.h"

namespace pipeplan {

/// True when stderr is a terminal (progress lines are shown only then).
bool stderr_is_terminal();

/// Prints "pipeplan: <message>" on stderr.
void log_line(const std::string& message);

/// Prints "pipeplan: warning: <message>" on stderr.
void log_warning(const std::string& message);

/// A progress line rewritten in place (`\r`) on a terminal; silent when stderr is not one.
class ProgressLine {
 public:
  ProgressLine();
  ~ProgressLine();  ///< ends the line if anything was shown
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  void update(const std::string& text);

 private:
  bool enabled_;
  bool shown_ = false;
};

template <typename... Args>
void log_info(const Args&... args) {
  log_line(detail::concat(args...));
}

}  // namespace pipeplan
