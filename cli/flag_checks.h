// Checks of integer flags on the text the user typed: CLI11 alone reads an int64 that overflows
// as its largest value and "010" as octal 8.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

namespace pipeplan::cli {

/// Accepts a decimal integer from `min_value` to `max_value` (no sign but '-', no base prefix,
/// no overflow); otherwise CLI11 reports "<flag>: '<text>' is not an integer from MIN to MAX"
/// (exit 2). Use on int64 flags; the option then converts the accepted text.
CLI::Validator integer_in(int64_t min_value, int64_t max_value);

}  // namespace pipeplan::cli
