// SplitStats: a step's offload counters shared among its sequences.
#include "engine/runtime/model_runner.h"

#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(SplitStatsTest, SharesFollowRowsAndSumToTheTotal) {
  OffloadStats total;
  total.cache_queries = 10;
  total.cache_hits = 7;
  total.bytes_h2d = 1000;
  total.stall_seconds = 0.5;
  total.experts_host_computed = 8;
  total.bytes_not_copied = 800;
  const std::vector<OffloadStats> s = SplitStats(total, {1, 1, 2});
  ASSERT_EQ(s.size(), 3u);
  // 10 * (1/4, 1/4, 2/4) = 2.5, 2.5, 5: the remainders go to the earliest.
  EXPECT_EQ(s[0].cache_queries, 3u);
  EXPECT_EQ(s[1].cache_queries, 2u);
  EXPECT_EQ(s[2].cache_queries, 5u);
  EXPECT_EQ(s[0].cache_hits + s[1].cache_hits + s[2].cache_hits, 7u);
  EXPECT_EQ(s[2].bytes_h2d, 500u);
  EXPECT_DOUBLE_EQ(s[2].stall_seconds, 0.25);
  EXPECT_EQ(s[0].experts_host_computed, 2u);
  EXPECT_EQ(s[2].experts_host_computed, 4u);
  EXPECT_EQ(s[0].bytes_not_copied + s[1].bytes_not_copied + s[2].bytes_not_copied, 800u);
  EXPECT_EQ(s[0].prefetch_issued + s[1].prefetch_issued + s[2].prefetch_issued, 0u);
}

TEST(SplitStatsTest, ASequenceAloneGetsEverything) {
  OffloadStats total;
  total.cache_queries = 12345;
  total.prefetch_needed = 9;
  total.prefetch_recalled = 4;
  const std::vector<OffloadStats> s = SplitStats(total, {17});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].cache_queries, 12345u);
  EXPECT_EQ(s[0].prefetch_needed, 9u);
  EXPECT_EQ(s[0].prefetch_recalled, 4u);
}

TEST(SplitStatsTest, HugeCountersDoNotOverflow) {
  OffloadStats total;
  total.bytes_h2d = uint64_t{1} << 62;
  const std::vector<OffloadStats> s = SplitStats(total, {1 << 20, 1 << 20});
  EXPECT_EQ(s[0].bytes_h2d, uint64_t{1} << 61);
  EXPECT_EQ(s[1].bytes_h2d, uint64_t{1} << 61);
}

}  // namespace
}  // namespace vismoe
