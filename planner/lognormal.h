// Log-normal multipliers of action times (mean 1, a given coefficient of variation) from
// fixed-seed generators: the simulator's draws of varying action times.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
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
/// (std::lognormal_distribution's is left to the library): Mersenne Twister and Box-Muller,
/// the draws the simulator has always made when it plays every replica.
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

/// The layers of Marsaglia and Tsang's ziggurat for the standard normal: 256 of equal area
/// under exp(−x²/2), the base one holding the tail beyond kR.
struct Ziggurat {
  static constexpr int kLayers = 256;
  static constexpr double kR = 3.6541528853610088;   ///< where the tail begins
  static constexpr double kArea = 0.00492867323399;  ///< of each layer
  double x[kLayers + 1];  ///< right edges: x[0] = kArea / f(kR) (base), x[1] = kR, x[256] = 0
  double f[kLayers + 1];  ///< exp(−x²/2) at each edge
  Ziggurat() {
    x[0] = kArea / std::exp(-0.5 * kR * kR);
    x[1] = kR;
    for (int idx = 1; idx < kLayers; ++idx)
      x[idx + 1] =
          idx + 1 == kLayers
              ? 0.0
              : std::sqrt(-2.0 * std::log(std::exp(-0.5 * x[idx] * x[idx]) + kArea / x[idx]));
    for (int idx = 0; idx <= kLayers; ++idx) f[idx] = std::exp(-0.5 * x[idx] * x[idx]);
  }
  /// The one table, built on first use.
  static const Ziggurat& instance() {
    static const Ziggurat table;
    return table;
  }
};

/// 2^(j/64) for j = 0..63: fast_exp's table.
struct ExpTable {
  static constexpr int kSize = 64;
  double power[kSize];
  ExpTable() {
    for (int j = 0; j < kSize; ++j) power[j] = std::exp2(j / static_cast<double>(kSize));
  }
  /// The one table, built on first use.
  static const ExpTable& instance() {
    static const ExpTable table;
    return table;
  }
};

/// e^x to within a few ulp (std::exp where |x| >= 700): x = (64k + j)·ln2/64 + r with |r| <=
/// ln2/128, so e^x = 2^k · 2^(j/64) · e^r, with e^r from its Taylor series to r^5 (the next term
/// is below 4e-17 of it). Inlined into the simulator's draws, it costs a third of a libm call.
inline double fast_exp(double x, const ExpTable& table) {
  if (!(std::abs(x) < 700)) return std::exp(x);
  constexpr double kPerLn2 = 64 / 0.693147180559945309417;  // 64 / ln 2
  // ln2/64 in two parts (Cody and Waite): n times the first is exact for |n| < 2^21.
  constexpr double kLn2High = 6.93147180369123816490e-01 / 64;
  constexpr double kLn2Low = 1.90821492927058770002e-10 / 64;
  constexpr double kRound = 0x1.8p52;  // adding it rounds to an integer
  const double n = (x * kPerLn2 + kRound) - kRound;
  const double r = (x - n * kLn2High) - n * kLn2Low;
  const auto whole = static_cast<int64_t>(n);
  const double poly =
      1 + r * (1 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120)))));
  const double scaled = table.power[whole & (ExpTable::kSize - 1)] * poly;  // in [1, 2.02)
  uint64_t bits = 0;
  std::memcpy(&bits, &scaled, sizeof bits);
  bits += static_cast<uint64_t>(whole >> 6) << 52;  // times 2^k: k added to the exponent
  double result = 0;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

/// The same distribution from a cheaper generator, for the folded draws (which play many more
/// actions): xoshiro256++ (Blackman and Vigna) seeded by splitmix64, and standard normals from
/// the ziggurat, which needs a logarithm only for the rare draws outside its layers. Another
/// sequence than Multipliers'. The normals are made kBatch at a time (the generator's state
/// stays in registers), and handed out in the order made: the sequence is that of one at a time.
class FastMultipliers {
 public:
  /// The generator of stream `stream`: streams are independent sequences (each seeds
  /// xoshiro256++ from its own splitmix64 start).
  explicit FastMultipliers(uint64_t stream = 0)
      : zig_(Ziggurat::instance()), exp_(ExpTable::instance()) {
    reseed(stream);
  }

  /// Starts stream `stream` from its beginning.
  void reseed(uint64_t stream) {
    uint64_t seed = 0x5eed ^ (stream * 0xd1b54a32d192ed03ULL);
    for (uint64_t& word : state_) word = splitmix64(&seed);
    next_normal_ = kBatch;
  }

  /// One multiplier (1 without drawing when the time does not vary).
  double draw(const LogNormal& shape) {
    if (!shape.varies) return 1.0;
    return fast_exp(shape.sigma * standard_normal() - shape.half_variance, exp_);
  }

  /// A standard normal draw.
  double standard_normal() {
    if (next_normal_ == kBatch) refill();
    return normals_[next_normal_++];
  }

 private:
  static constexpr int kBatch = 64;  // normals made at a time

  void refill() {
    for (double& normal : normals_) normal = make_normal();
    next_normal_ = 0;
  }
  double make_normal() {
    while (true) {
      const uint64_t bits = next();
      const int layer = static_cast<int>(bits & 0xff);
      const double sign = (bits & 0x100) ? -1.0 : 1.0;
      const double x = static_cast<double>(bits >> 11) * 0x1.0p-53 * zig_.x[layer];
      if (x < zig_.x[layer + 1]) return sign * x;  // inside the layer's core: most draws
      if (layer == 0) return sign * tail();
      const double y = zig_.f[layer] + uniform() * (zig_.f[layer + 1] - zig_.f[layer]);
      if (y < std::exp(-0.5 * x * x)) return sign * x;  // in the wedge under the curve
    }
  }

  static uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t result = rotl(state_[0] + state_[3], 23) + state_[0];
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  double uniform() {  // in (0, 1)
    return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  }
  double tail() {  // beyond kR (Marsaglia 1964)
    double x = 0, y = 0;
    do {
      x = -std::log(uniform()) / Ziggurat::kR;
      y = -std::log(uniform());
    } while (2 * y < x * x);
    return Ziggurat::kR + x;
  }

  const Ziggurat& zig_;
  const ExpTable& exp_;
  uint64_t state_[4] = {};
  double normals_[kBatch] = {};  // made by refill(); the next to hand out at next_normal_
  int next_normal_ = kBatch;
};

}  // namespace pipeplan
