// Tests for planner/lognormal.h: the ziggurat's normals and both generators' multipliers have
// the moments and tails they should.
#include "planner/lognormal.h"

#include <gtest/gtest.h>

#include <cmath>

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
