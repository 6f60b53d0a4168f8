// The one line of a LibTorch error that reaches the user.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace pipeplan::models {

/// `error`'s message on one line: without c10's backtrace, and for an error the TorchScript
/// interpreter raised (a traceback) its last line ("RuntimeError: mat1 and mat2 shapes ...").
inline std::string error_line(const std::exception& error) {
  static constexpr const char* kInterpreterError =
      "The following operation failed in the TorchScript interpreter";
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.rfind(kInterpreterError, 0) == 0) return text.substr(text.rfind('\n') + 1);
  return text.substr(0, text.find('\n'));
}

}  // namespace pipeplan::models
