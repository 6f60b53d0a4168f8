// Log-normal multipliers of action times (mean 1, a given coefficient of variation) from a
// fixed-seed generator: the simulator's draws of varying action times.
#pragma once

#include <cmath>
#include <optional>
#include <random>

namespace pipeplan {

/// The shape of a log-normal multiplier with mean 1 and coefficient of variation cv.
struct LogNormal {
  bool varies = false;       ///< cv > 0
  double sigma = 0;          ///< of the underlying normal
  double half_variance = 0;  ///< sigma² / 2
};

/// The shape for coefficient of variation `cv` (no variation when cv <= 0).
inline LogNormal log_normal(double cv) {
  if (cv <= 0) return {};
  const double sigma = std::sqrt(std::log1p(cv * cv));
  return {true, sigma, sigma * sigma / 2};
}

/// Multipliers from a fixed-seed generator whose sequence the C++ standard fixes
/// (std::lognormal_distribution's is left to the library): Mersenne Twister and Box-Muller.
class Multipliers {
 public:
  static constexpr double kTwoPi = 6.283185307179586;

  /// One multiplier (1 without drawing when the time does not vary).
  double draw(const LogNormal& shape) {
    if (!shape.varies) return 1.0;
    return std::exp(shape.sigma * standard_normal() - shape.half_variance);
  }

 private:
  double uniform() {  // in (0, 1)
    return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53;
  }
  double standard_normal() {  // Box-Muller; the second value is kept for the next call
    if (spare_) {
      const double value = *spare_;
      spare_.reset();
      return value;
    }
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = kTwoPi * uniform();
    spare_ = radius * std::sin(angle);
    return radius * std::cos(angle);
  }

  std::mt19937_64 engine_{0x5eed};
  std::optional<double> spare_;
};

}  // namespace pipeplan
