// Sizes and units: parse and print byte sizes (24GiB, 512MiB, 1.5GB, plain bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipeplan {

inline constexpr int64_t kKiB = 1024;
inline constexpr int64_t kMiB = 1024 * kKiB;
inline constexpr int64_t kGiB = 1024 * kMiB;
inline constexpr double kMsPerSecond = 1000.0;

/// Throughput of `samples` per iteration of `iteration_ms`; 0 when no iteration time is known.
inline double samples_per_s(int64_t samples, double iteration_ms) {
  return iteration_ms > 0 ? static_cast<double>(samples) / iteration_ms * kMsPerSecond : 0;
}

/// A tensor shape as "[a, b, c]" ("[]" for a scalar).
std::string format_shape(const std::vector<int64_t>& shape);

/// A tensor shape as its dimensions joined by 'x': "3x32x32" ("" for a scalar).
std::string format_dims(const std::vector<int64_t>& shape);

/// `value` with `decimals` digits after the point ("%.*f").
std::string format_fixed(double value, int decimals);

/// Parses a byte size: an optional decimal number with a unit B, KB, MB, GB, TB (powers of
/// 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive, or plain bytes. Fractions
/// round to the nearest byte. `field` names the flag or key in the error.
/// Throws Error(kBadInput) on empty, negative, non-numeric or unknown-unit input.
int64_t parse_size(std::string_view text, std::string_view field);

/// Prints bytes with a binary unit and one decimal: "22.6 GiB", "512.0 MiB", "17 B".
std::string format_size(int64_t bytes);

/// Parses a positive integer list "1,2,4,8". Throws naming `field` on an empty list, an empty
/// item, a non-integer or a value < 1.
std::vector<int64_t> parse_positive_list(std::string_view text, std::string_view field);

}  // namespace pipeplan
