#include <vector>

#include "client/percentile.h"
#include "gtest/gtest.h"

namespace vismoe::client {
namespace {

TEST(PercentileTest, ExactOnKnownData) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 0), 1);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 100), 4);
  // numpy.percentile([1,2,3,4], 90) == 3.7
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 90), 3.7);
}

TEST(PercentileTest, OneToHundred) {
  std::vector<double> v;
  for (int i = 1; i <= 101; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 50), 51);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 90), 91);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(v, 99), 100);
}

TEST(PercentileTest, EmptyAndSingle) {
  EXPECT_EQ(PercentileOfSorted({}, 50), 0);
  EXPECT_EQ(PercentileOfSorted({7}, 99), 7);
  const Distribution d = Summarize({});
  EXPECT_EQ(d.count, 0u);
  EXPECT_EQ(d.p99, 0);
}

TEST(PercentileTest, SummarizeSortsAndIsOrdered) {
  const Distribution d = Summarize({9, 1, 5, 3, 7, 2, 8, 4, 6, 10});
  EXPECT_EQ(d.count, 10u);
  EXPECT_DOUBLE_EQ(d.min, 1);
  EXPECT_DOUBLE_EQ(d.max, 10);
  EXPECT_DOUBLE_EQ(d.mean, 5.5);
  EXPECT_DOUBLE_EQ(d.p50, 5.5);
  EXPECT_DOUBLE_EQ(d.p90, 9.1);
  EXPECT_DOUBLE_EQ(d.p99, 9.91);
  EXPECT_LE(d.min, d.p50);
  EXPECT_LE(d.p50, d.p90);
  EXPECT_LE(d.p90, d.p99);
  EXPECT_LE(d.p99, d.max);
}

TEST(PercentileTest, JsonHasAllFields) {
  const nlohmann::json j = DistributionToJson(Summarize({1, 2}));
  for (const char* key : {"count", "mean", "min", "max", "p50", "p90", "p99"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["count"], 2);
  EXPECT_DOUBLE_EQ(j["p50"].get<double>(), 1.5);
}

}  // namespace
}  // namespace vismoe::client
