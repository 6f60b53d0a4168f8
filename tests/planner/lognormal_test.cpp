// Tests for planner/lognormal.h: the multipliers have mean 1 and the coefficient of variation
// asked for.
#include "planner/lognormal.h"

#include <gtest/gtest.h>

#include <cmath>

namespace pipeplan {
namespace {

TEST(LogNormalTest, MultipliersHaveMeanOneAndTheirCoefficientOfVariation) {
  for (double cv : {0.04, 0.3}) {
    Multipliers generator;
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
  Multipliers steady;
  EXPECT_EQ(steady.draw(log_normal(0)), 1.0);
}

}  // namespace
}  // namespace pipeplan
