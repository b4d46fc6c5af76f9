// HostComputeCost: the estimate of the host's time for an expert over m rows,
// from measured samples, and the cpu miss policy's decision against a copy.
#include "engine/offload/host_compute_cost.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(HostComputeCostTest, NoEstimateBeforeTheFirstSample) {
  HostComputeCost c;
  EXPECT_FALSE(c.EstimateSeconds(1).has_value());
  EXPECT_EQ(c.samples(), 0);
  // Without a sample only a one-row expert goes to the host (to learn from);
  // without a known bandwidth none does.
  EXPECT_TRUE(c.PreferHost(1, 1e-3));
  EXPECT_FALSE(c.PreferHost(2, 1e-3));
  EXPECT_FALSE(c.PreferHost(1, 0));
}

TEST(HostComputeCostTest, InterpolatesBetweenBandsAndExtrapolatesConservatively) {
  HostComputeCost c;
  c.Record(1, 1e-4);
  c.Record(16, 4e-4);
  EXPECT_DOUBLE_EQ(*c.EstimateSeconds(1), 1e-4);
  EXPECT_DOUBLE_EQ(*c.EstimateSeconds(16), 4e-4);
  // Linear between (1, 1e-4) and (16, 4e-4).
  EXPECT_NEAR(*c.EstimateSeconds(6), 1e-4 + 5.0 / 15.0 * 3e-4, 1e-12);
  // Above every band: proportional to the rows (an over-estimate).
  EXPECT_NEAR(*c.EstimateSeconds(64), 4e-4 * 4, 1e-12);

  HostComputeCost only_large;
  only_large.Record(32, 2e-3);
  // Below every band: the lowest band's time (fewer rows take no longer).
  EXPECT_DOUBLE_EQ(*only_large.EstimateSeconds(3), 2e-3);
}

TEST(HostComputeCostTest, ABandFollowsItsRecentSamples) {
  HostComputeCost c;
  c.Record(1, 1e-3);
  for (int i = 0; i < 40; ++i) c.Record(1, 1e-5);
  EXPECT_NEAR(*c.EstimateSeconds(1), 1e-5, 1e-8);
  EXPECT_EQ(c.samples(), 41);
}

TEST(HostComputeCostTest, DecidesAgainstTheCopyTime) {
  HostComputeCost c;
  c.Record(1, 1e-4);
  c.Record(64, 6.4e-3);
  EXPECT_TRUE(c.PreferHost(1, 2e-4));    // 0.1 ms of host time against a 0.2 ms copy
  EXPECT_FALSE(c.PreferHost(64, 2e-4));  // 6.4 ms against 0.2 ms
  EXPECT_FALSE(c.PreferHost(1, 1e-4));   // a tie copies (the copy also warms the cache)
  EXPECT_FALSE(c.PreferHost(0, 1.0));
}

TEST(HostComputeCostTest, BadSamplesAreIgnored) {
  HostComputeCost c;
  c.Record(0, 1e-3);
  c.Record(4, -1);
  c.Record(4, std::numeric_limits<double>::quiet_NaN());
  c.Record(4, std::numeric_limits<double>::infinity());
  EXPECT_EQ(c.samples(), 0);
  c.Record(int64_t{1} << 40, 1.0);  // beyond the last band: kept in it
  EXPECT_EQ(c.samples(), 1);
  EXPECT_DOUBLE_EQ(*c.EstimateSeconds(int64_t{1} << 40), 1.0);
}

}  // namespace
}  // namespace vismoe
