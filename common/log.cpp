// Logging: stderr lines and terminal-only progress.
#include "common/log.h"

#include <unistd.h>

#include <cstdio>

namespace pipeplan {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void log_line(const std::string& message) { std::fprintf(stderr, "pipeplan: %s\n", message.c_str()); }

void log_warning(const std::string& message) {
  std::fprintf(stderr, "pipeplan: warning: %s\n", message.c_str());
}

ProgressLine::ProgressLine() : enabled_(stderr_is_terminal()) {}

ProgressLine::~ProgressLine() {
  if (shown_) std::fputc('\n', stderr);
}

void ProgressLine::update(const std::string& text) {
  if (!enabled_) return;
  // \x1b[K clears what a longer previous line left behind.
  std::fprintf(stderr, "\r%s\x1b[K", text.c_str());
  std::fflush(stderr);
  shown_ = true;
}

}  // namespace pipeplan
