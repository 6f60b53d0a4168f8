// Checks of integer flags on the text the user typed: CLI11 alone reads "010" as octal 8, "0x10"
// as 16, "-1" for an unsigned flag as 2^64 - 1, and an int64 that overflows as its largest value.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

namespace pipeplan::cli {

/// Accepts a decimal integer from `min_value` to `max_value` (no sign but '-', no base prefix,
/// no overflow); otherwise CLI11 reports "<flag>: '<text>' is not an integer from MIN to MAX"
/// (exit 2). Use on int64 flags; the option then converts the accepted text.
CLI::Validator integer_in(int64_t min_value, int64_t max_value);

/// Gives every integer flag of `app`'s subcommands (CLI11 type INT or UINT) a check that its text
/// is a decimal integer: digits with no leading zero (0 itself aside), a '-' before them only
/// where the flag is signed, within 64 bits. Otherwise CLI11 reports "<flag>: '<text>' is not a
/// decimal integer ..." (exit 2). Call once every subcommand has its options.
void check_integer_flags_are_decimal(CLI::App& app);

}  // namespace pipeplan::cli
