// Tests for common/hash.h: FNV-1a reference values and seed mixing.
#include "common/hash.h"

#include <gtest/gtest.h>

namespace pipeplan {
namespace {

TEST(HashTest, MatchesFnv1aReferenceValues) {
  // Reference values of 64-bit FNV-1a.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(content_hash("a"), "fnv1a64:af63dc4c8601ec8c");
}

TEST(HashTest, MixSeedSeparatesLayers) {
  EXPECT_NE(mix_seed(1, 0), mix_seed(1, 1));
  EXPECT_NE(mix_seed(1, 0), mix_seed(2, 0));
  // SplitMix64's finalizer over seed + golden ratio · (salt + 1): its first output from seed 0 is
  // the published 0xe220a8397b1dcdaf; the second value is from a Python transcription.
  EXPECT_EQ(mix_seed(0, 0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(mix_seed(42, 7), 0xccf635ee9e9e2fa4ULL);
}

}  // namespace
}  // namespace pipeplan
