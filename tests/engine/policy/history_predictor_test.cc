// HistoryPredictor: decayed frequency ranking.
#include "engine/policy/history_predictor.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(HistoryPredictorTest, RanksByDecayedFrequency) {
  HistoryPredictor p(2, 4, 0.5);
  EXPECT_TRUE(p.Predict(1, 3).empty());
  const std::vector<int> a = {0, 1}, b = {1, 2}, c = {3};
  p.Observe(1, a);  // 0:1 1:1
  p.Observe(1, b);  // 0:.5 1:1.5 2:1
  p.Observe(1, c);  // 0:.25 1:.75 2:.5 3:1
  EXPECT_DOUBLE_EQ(p.Score(1, 1), 0.75);
  const auto top = p.Predict(1, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 3);
  EXPECT_EQ(top[1].first, 1);
  EXPECT_EQ(top[2].first, 2);
  EXPECT_TRUE(p.Predict(0, 3).empty());  // layers are independent
  p.Observe(5, a);                       // out of range: ignored
  EXPECT_EQ(p.Score(5, 0), 0);
}

}  // namespace
}  // namespace vismoe
