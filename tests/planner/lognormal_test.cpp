// Tests for planner/lognormal.h: the ziggurat's normals and both generators' multipliers have
// the moments and tails they should.
#include "planner/lognormal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace pipeplan {
namespace {

TEST(LogNormalTest, ZigguratDrawsStandardNormals) {
  FastMultipliers generator;
  constexpr int kDraws = 2'000'000;
  double sum = 0, squares = 0;
  int below_minus_one = 0, beyond_tail = 0;
  for (int idx = 0; idx < kDraws; ++idx) {
    const double z = generator.standard_normal();
    sum += z;
    squares += z * z;
    below_minus_one += z < -1;
    beyond_tail += std::abs(z) > Ziggurat::kR;
  }
  EXPECT_NEAR(sum / kDraws, 0, 0.004);
  EXPECT_NEAR(squares / kDraws, 1, 0.005);
  EXPECT_NEAR(static_cast<double>(below_minus_one) / kDraws, 0.158655, 0.002);
  // P(|z| > 3.6542) = 2.58e-4: about 516 draws, so the tail sampler is exercised.
  EXPECT_NEAR(beyond_tail, 516, 110);
}

// fast_exp agrees with std::exp to a few ulp over the range the draws use and beyond, and
// hands the extremes to it.
TEST(LogNormalTest, FastExpMatchesTheLibrary) {
  const ExpTable& table = ExpTable::instance();
  std::mt19937_64 rng(7);
  double worst = 0;
  for (double span : {1.0, 40.0, 699.0}) {
    std::uniform_real_distribution<double> uniform(-span, span);
    for (int idx = 0; idx < 200'000; ++idx) {
      const double x = uniform(rng);
      worst = std::max(worst, std::abs(fast_exp(x, table) / std::exp(x) - 1));
    }
  }
  EXPECT_LT(worst, 1e-15);
  EXPECT_EQ(fast_exp(0, table), 1.0);
  EXPECT_EQ(fast_exp(-800, table), std::exp(-800.0));
  EXPECT_EQ(fast_exp(800, table), std::exp(800.0));
  // Exactly at multiples of ln2/64 the table entry stands alone.
  EXPECT_NEAR(fast_exp(std::log(2.0) * 3 / 64, table), std::exp2(3 / 64.0), 4e-16);
}

// Both generators' multipliers have mean 1 and the coefficient of variation asked for.
template <typename Generator>
void expect_moments(double cv) {
  Generator generator;
  const LogNormal shape = log_normal(cv);
  constexpr int kDraws = 1'000'000;
  double sum = 0, squares = 0;
  for (int idx = 0; idx < kDraws; ++idx) {
    const double x = generator.draw(shape);
    sum += x;
    squares += x * x;
  }
  const double mean = sum / kDraws;
  const double stddev = std::sqrt(squares / kDraws - mean * mean);
  EXPECT_NEAR(mean, 1, 4 * cv / std::sqrt(kDraws)) << cv;
  EXPECT_NEAR(stddev / mean, cv, 0.02 * cv) << cv;
}

TEST(LogNormalTest, MultipliersHaveMeanOneAndTheirCoefficientOfVariation) {
  for (double cv : {0.04, 0.3}) {
    expect_moments<Multipliers>(cv);
    expect_moments<FastMultipliers>(cv);
  }
  Multipliers steady;
  EXPECT_EQ(steady.draw(log_normal(0)), 1.0);
}

}  // namespace
}  // namespace pipeplan
