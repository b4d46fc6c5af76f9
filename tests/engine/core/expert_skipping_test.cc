// The MoDES skip rule (paper 001, GMLG + DMT): s = alpha(l) * weight < tau,
// tau_text for text rows and tau_visual for visual rows; strict, so a score
// exactly at the threshold is kept and tau = 0 skips nothing; the counts per
// modality; validation names the field at fault.
#include "engine/core/expert_skipping.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

// Two tokens, top-2: weights {0.7, 0.3} and {0.6, 0.4}.
RouterResult TwoTokens() {
  RouterResult r;
  r.n = 2;
  r.num_experts = 4;
  r.top_k = 2;
  r.experts = {0, 1, 2, 3};
  r.weights = {0.7f, 0.3f, 0.6f, 0.4f};
  return r;
}

std::vector<uint8_t> Mark(const ExpertSkipping& rule, int layer, std::vector<char> visual,
                          ExpertSkipCounts* counts = nullptr) {
  RouterResult r = TwoTokens();
  MarkSkippedExperts(rule, layer, 0, visual, &r, counts);
  return r.skipped;
}

TEST(ExpertSkippingTest, TextAndVisualRowsUseTheirOwnThreshold) {
  ExpertSkipping rule;
  rule.tau_text = 0.35f;
  rule.tau_visual = 0.65f;
  // Row 0 text: 0.3 < 0.35 skipped; row 1 visual: 0.6 and 0.4 < 0.65 skipped.
  EXPECT_EQ(Mark(rule, 0, {0, 1}), (std::vector<uint8_t>{0, 1, 1, 1}));
  // Swapped modalities: row 0 visual loses 0.3 only (0.7 >= 0.65); row 1 text keeps both.
  EXPECT_EQ(Mark(rule, 0, {1, 0}), (std::vector<uint8_t>{0, 1, 0, 0}));
}

TEST(ExpertSkippingTest, AlphaScalesTheScorePerLayer) {
  ExpertSkipping rule;
  rule.alpha = {1.0f, 0.5f, 4.0f};
  rule.tau_text = rule.tau_visual = 0.32f;
  EXPECT_EQ(Mark(rule, 0, {0, 0}), (std::vector<uint8_t>{0, 1, 0, 0}));  // 0.3 < 0.32
  EXPECT_EQ(Mark(rule, 1, {0, 0}), (std::vector<uint8_t>{0, 1, 1, 1}));  // 0.35, 0.3, 0.2, < 0.32
  EXPECT_EQ(Mark(rule, 2, {0, 0}), (std::vector<uint8_t>{0, 0, 0, 0}));  // 1.2 >= 0.32
}

TEST(ExpertSkippingTest, ZeroThresholdsSkipNothingAndScoreAtThresholdIsKept) {
  ExpertSkipping zero;
  EXPECT_EQ(Mark(zero, 0, {0, 1}), (std::vector<uint8_t>{0, 0, 0, 0}));
  ExpertSkipping at;
  at.tau_text = 0.3f;  // exactly the 0.3 weight: not below, kept
  at.tau_visual = 0.4f;
  EXPECT_EQ(Mark(at, 0, {0, 1}), (std::vector<uint8_t>{0, 0, 0, 0}));
}

TEST(ExpertSkippingTest, EveryExpertOfATokenCanBeSkipped) {
  ExpertSkipping rule;
  rule.tau_text = rule.tau_visual = 1.0f;  // above every weight
  EXPECT_EQ(Mark(rule, 0, {0, 1}), (std::vector<uint8_t>{1, 1, 1, 1}));
}

TEST(ExpertSkippingTest, CountsRoutedAndSkippedPerModality) {
  ExpertSkipping rule;
  rule.tau_text = 0.35f;
  rule.tau_visual = 0.65f;
  ExpertSkipCounts c;
  Mark(rule, 0, {0, 1}, &c);
  EXPECT_EQ(c.routed[0], 2u);
  EXPECT_EQ(c.routed[1], 2u);
  EXPECT_EQ(c.skipped[0], 1u);
  EXPECT_EQ(c.skipped[1], 2u);
  ExpertSkipCounts sum;
  sum.Add(c);
  sum.Add(c);
  EXPECT_EQ(sum.total_routed(), 8u);
  EXPECT_EQ(sum.total_skipped(), 6u);
}

TEST(ExpertSkippingTest, RowsOfOneSequenceInABatchAreTheOnlyOnesMarked) {
  ExpertSkipping rule;
  rule.tau_text = rule.tau_visual = 1.0f;
  RouterResult r = TwoTokens();
  const std::vector<char> one_text_row = {0};
  MarkSkippedExperts(rule, 0, /*first=*/1, one_text_row, &r, nullptr);
  EXPECT_EQ(r.skipped, (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_FALSE(r.IsSkipped(0, 0));
  EXPECT_TRUE(r.IsSkipped(1, 1));
}

TEST(ExpertSkippingTest, ValidationNamesTheField) {
  ExpertSkipping ok;
  ok.tau_text = 0.1f;
  EXPECT_TRUE(ValidateExpertSkipping(ok, 3).ok());
  ExpertSkipping neg = ok;
  neg.tau_visual = -0.1f;
  absl::Status st = ValidateExpertSkipping(neg, 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tau_visual"), std::string::npos) << st;
  ExpertSkipping nan = ok;
  nan.tau_text = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(ValidateExpertSkipping(nan, 3).message().find("tau_text"), std::string::npos);
  ExpertSkipping short_alpha = ok;
  short_alpha.alpha = {1.0f, 1.0f};
  EXPECT_NE(ValidateExpertSkipping(short_alpha, 3).message().find("alpha has 2 values"),
            std::string::npos);
  ExpertSkipping bad_alpha = ok;
  bad_alpha.alpha = {1.0f, -2.0f, 1.0f};
  EXPECT_NE(ValidateExpertSkipping(bad_alpha, 3).message().find("alpha[1]"), std::string::npos);
}

}  // namespace
}  // namespace vismoe
