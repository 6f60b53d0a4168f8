// gradient_buckets: DDP's rule at layer granularity, last layer first.
#include "plans/buckets.h"

#include <gtest/gtest.h>

namespace pipeplan {
namespace {

std::vector<std::vector<int64_t>> as_rows(const std::vector<GradientBucket>& buckets) {
  std::vector<std::vector<int64_t>> rows;
  for (const GradientBucket& b : buckets) rows.push_back({b.first, b.last, b.bytes});
  return rows;
}

TEST(GradientBucketsTest, ClosesABucketOnceItHoldsTheCapWalkingFromTheLastLayer) {
  // Layers 0..4 hold 10, 0, 30, 5, 20 bytes; cap 25: {4,3} = 25 closes, {2} = 30 closes, {1,0}.
  EXPECT_EQ(as_rows(gradient_buckets({10, 0, 30, 5, 20}, 25)),
            (std::vector<std::vector<int64_t>>{{3, 5, 25}, {2, 3, 30}, {0, 2, 10}}));
}

TEST(GradientBucketsTest, OneBucketWhenTheCapExceedsTheChunk) {
  EXPECT_EQ(as_rows(gradient_buckets({1, 2, 3}, 1000)),
            (std::vector<std::vector<int64_t>>{{0, 3, 6}}));
}

TEST(GradientBucketsTest, LeadingLayersWithoutGradientsJoinTheBucketBefore) {
  // {3} closes at 8; layers 0..2 hold nothing and join it rather than form an empty bucket.
  EXPECT_EQ(as_rows(gradient_buckets({0, 0, 0, 8}, 8)),
            (std::vector<std::vector<int64_t>>{{0, 4, 8}}));
  EXPECT_EQ(as_rows(gradient_buckets({0, 0}, 8)), (std::vector<std::vector<int64_t>>{{0, 2, 0}}));
  EXPECT_TRUE(gradient_buckets({}, 8).empty());
}

TEST(GradientBucketsTest, BucketsCoverEveryLayerOnceInDescendingOrder) {
  const std::vector<int64_t> bytes{7, 3, 9, 1, 4, 4, 12, 0, 6};
  for (int64_t cap : {1, 5, 10, 13, 100}) {
    const std::vector<GradientBucket> buckets = gradient_buckets(bytes, cap);
    int expected_last = static_cast<int>(bytes.size());
    int64_t total = 0;
    for (const GradientBucket& b : buckets) {
      EXPECT_EQ(b.last, expected_last) << "cap " << cap;
      EXPECT_LT(b.first, b.last);
      int64_t sum = 0;
      for (int layer = b.first; layer < b.last; ++layer) sum += bytes[layer];
      EXPECT_EQ(sum, b.bytes);
      total += sum;
      expected_last = b.first;
    }
    EXPECT_EQ(expected_last, 0);
    EXPECT_EQ(total, 46);
  }
}

}  // namespace
}  // namespace pipeplan
