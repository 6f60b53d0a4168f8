// Tests for common/stats.h: quantiles and the spread of timing samples.
#include "common/stats.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace pipeplan {
namespace {

TEST(QuantileTest, InterpolatesBetweenOrderStatistics) {
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.9), 3.7);
  EXPECT_DOUBLE_EQ(quantile({7}, 0.9), 7.0);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3}, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3}, 1.0), 3.0);
}

TEST(CoefficientOfVariationTest, IsThePopulationDeviationOverTheMean) {
  EXPECT_DOUBLE_EQ(coefficient_of_variation({1, 3}), 0.5);  // mean 2, deviation 1
  EXPECT_DOUBLE_EQ(coefficient_of_variation({2, 2, 2}), 0.0);
  EXPECT_DOUBLE_EQ(coefficient_of_variation({5}), 0.0);
  EXPECT_DOUBLE_EQ(coefficient_of_variation({}), 0.0);
  EXPECT_DOUBLE_EQ(coefficient_of_variation({0, 0}), 0.0);
}

TEST(QuantileTest, MedianIsTheMiddleOrTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3.0);
  EXPECT_DOUBLE_EQ(median({8, 1, 3, 4}), 3.5);
  EXPECT_THROW(median({}), Error);
}

}  // namespace
}  // namespace pipeplan
