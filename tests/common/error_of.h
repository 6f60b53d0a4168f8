// The message of the input error a call throws, for tests of the one-line error contract.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error.h"

namespace pipeplan::testing {

/// The message of the pipeplan::Error that `fn` throws ("" when it throws none); records a test
/// failure when the error is not bad input (ErrorKind::kBadInput, exit 2).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace pipeplan::testing
