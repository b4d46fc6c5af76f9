// CalibrateExpertSkipping on a synthetic model with known answers: a model
// whose output moves by a fixed amount per layer when that layer's text
// slots are skipped (visual slots are free). GMLG's alpha(l) is then exactly
// the KL of skipping the whole layer (0 for a dense layer and for a layer
// whose skipping changes nothing); the frontier search reaches the target at
// zero KL, skipping text slots only where alpha(l) = 0 (their score is 0).
#include "engine/calibrate/skip_calibrator.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

constexpr int kLayers = 4;  // layer 1 is dense
constexpr int kTextRows = 3, kVisualRows = 5, kTopK = 2;

// Logit shift of request r's two-token vocabulary when every text slot of
// MoE layer l is skipped (partial skipping shifts proportionally).
constexpr double kTextCost[kLayers] = {2.0, 0.0, 0.5, 0.0};

struct FakeModel {
  int calls = 0;
  absl::StatusOr<PrefillOutcome> Run(size_t r, const ExpertSkipping* rule,
                                     RouterObserver* observer) {
    ++calls;
    PrefillOutcome out;
    out.logits = {0.3f * static_cast<float>(r), 0.0f, -1.0f};
    for (int l : {0, 2, 3}) {
      RouterResult rr;
      rr.n = kTextRows + kVisualRows;
      rr.top_k = kTopK;
      rr.num_experts = 8;
      std::vector<char> visual(static_cast<size_t>(rr.n), 0);
      for (int t = 0; t < rr.n; ++t) {
        visual[t] = t >= kTextRows ? 1 : 0;
        const float w = 0.55f + 0.04f * static_cast<float>((t + l + r) % 5);
        rr.experts.insert(rr.experts.end(), {t % 8, (t + 3) % 8});
        rr.weights.insert(rr.weights.end(), {w, 1.0f - w});
      }
      ExpertSkipCounts layer;
      if (rule != nullptr) MarkSkippedExperts(*rule, l, 0, visual, &rr, &layer);
      if (observer != nullptr) observer->OnRouting(Phase::kPrefill, l, nullptr, rr);
      const double text_share =
          layer.routed[0] == 0 ? 0.0 : static_cast<double>(layer.skipped[0]) / layer.routed[0];
      out.logits[0] += static_cast<float>(kTextCost[l] * text_share);  // visual: free
      out.counts.Add(layer);
    }
    return out;
  }
};

SkipCalibratorOptions Options(double rho) {
  SkipCalibratorOptions o;
  o.target_skip_rate = rho;
  o.grid = 8;
  o.num_layers = kLayers;
  o.moe_layers = {0, 2, 3};
  return o;
}

TEST(SkipCalibratorTest, SoftmaxKlMatchesAHandValue) {
  // p = (1/2, 1/2), q = (3/4, 1/4): KL = ln(4/3) / 2.
  const std::vector<float> p = {0.0f, 0.0f}, q = {std::log(3.0f), 0.0f};
  EXPECT_NEAR(SoftmaxKl(p, q), 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_EQ(SoftmaxKl(p, p), 0.0);
}

TEST(SkipCalibratorTest, AlphaIsTheKlOfSkippingTheWholeLayer) {
  FakeModel model;
  auto run = [&](size_t r, const ExpertSkipping* rule, RouterObserver* obs) {
    return model.Run(r, rule, obs);
  };
  auto report = CalibrateExpertSkipping(Options(0.5), 2, run);
  ASSERT_TRUE(report.ok()) << report.status();
  const std::vector<float>& alpha = report->calibration.alpha;
  ASSERT_EQ(alpha.size(), static_cast<size_t>(kLayers));
  for (int l = 0; l < kLayers; ++l) {
    double want = 0;
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> base = {0.3f * r, 0.0f, -1.0f};
      std::vector<float> skipped = base;
      skipped[0] += static_cast<float>(kTextCost[l]);
      want += SoftmaxKl(base, skipped) / 2;
    }
    EXPECT_NEAR(alpha[l], want, 1e-6) << "layer " << l;
  }
  EXPECT_EQ(alpha[1], 0.0f);  // dense
  EXPECT_EQ(alpha[3], 0.0f);  // skipping it changes nothing
  EXPECT_GT(alpha[0], alpha[2]);
}

TEST(SkipCalibratorTest, FrontierSkipsTheFreeModalityFirst) {
  FakeModel model;
  auto run = [&](size_t r, const ExpertSkipping* rule, RouterObserver* obs) {
    return model.Run(r, rule, obs);
  };
  // 5 of 8 rows are visual: a 0.4 target is met without any costly slot.
  auto report = CalibrateExpertSkipping(Options(0.4), 2, run);
  ASSERT_TRUE(report.ok()) << report.status();
  const SkipCalibration& c = report->calibration;
  EXPECT_GT(c.tau_visual, c.tau_text);
  EXPECT_EQ(c.kl, 0.0);
  EXPECT_GE(c.skip_rate, 0.4);
  // Text slots go only at layer 3 (alpha 0: score 0), a third of them at most.
  EXPECT_LE(report->text_skip_rate, 1.0 / 3.0 + 1e-12);
  EXPECT_GT(report->visual_skip_rate, report->text_skip_rate);
  EXPECT_DOUBLE_EQ(c.target_skip_rate, 0.4);
  // A target that needs costly text slots costs KL.
  auto hard = CalibrateExpertSkipping(Options(0.8), 2, run);
  ASSERT_TRUE(hard.ok()) << hard.status();
  EXPECT_GT(hard->calibration.kl, 0.0);
  EXPECT_GT(hard->text_skip_rate, 1.0 / 3.0);
  // The grid starts at 0 and ascends.
  ASSERT_EQ(report->grid.size(), 8u);
  EXPECT_EQ(report->grid[0], 0.0f);
  for (size_t i = 1; i < report->grid.size(); ++i) EXPECT_GE(report->grid[i], report->grid[i - 1]);
  EXPECT_LE(report->search.evaluations, 2 * 8 + 8);
}

TEST(SkipCalibratorTest, BadOptionsAreNamed) {
  FakeModel model;
  auto run = [&](size_t r, const ExpertSkipping* rule, RouterObserver* obs) {
    return model.Run(r, rule, obs);
  };
  EXPECT_THAT(CalibrateExpertSkipping(Options(1.0), 2, run).status().message(),
              HasSubstr("--skip_target_rate"));
  SkipCalibratorOptions o = Options(0.5);
  o.grid = 1;
  EXPECT_THAT(CalibrateExpertSkipping(o, 2, run).status().message(), HasSubstr("--skip_grid"));
  EXPECT_FALSE(CalibrateExpertSkipping(Options(0.5), 0, run).ok());
  EXPECT_EQ(model.calls, 0);
}

}  // namespace
}  // namespace vismoe
