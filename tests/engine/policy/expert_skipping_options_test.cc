// ResolveExpertSkipping: "none" is off; dual-threshold takes each threshold
// from the options, else the calibration profile, with alpha(l) from the
// profile (1 everywhere without one); errors name the setting in the caller's
// words (engine option, server flag or request field).
#include "engine/policy/expert_skipping_options.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

SkipCalibration Calibrated() {
  SkipCalibration c;
  c.alpha = {2.0f, 1.0f, 0.5f};
  c.tau_text = 0.1f;
  c.tau_visual = 0.4f;
  return c;
}

TEST(ExpertSkippingOptionsTest, NoneIsOff) {
  ExpertSkippingOptions o;
  auto r = ResolveExpertSkipping(o, nullptr, 3, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
  o.tau_text = 0.5f;  // thresholds without the kind: still off
  r = ResolveExpertSkipping(o, nullptr, 3, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
}

TEST(ExpertSkippingOptionsTest, ThresholdsComeFromOptionsElseTheProfile) {
  const SkipCalibration cal = Calibrated();
  ExpertSkippingOptions o;
  o.kind = "dual-threshold";
  auto r = ResolveExpertSkipping(o, &cal, 3, {});
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->tau_text, 0.1f);
  EXPECT_EQ((*r)->tau_visual, 0.4f);
  EXPECT_EQ((*r)->alpha, cal.alpha);
  o.tau_visual = 0.0f;  // set: wins over the profile, even at 0
  r = ResolveExpertSkipping(o, &cal, 3, {});
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->tau_text, 0.1f);
  EXPECT_EQ((*r)->tau_visual, 0.0f);
}

TEST(ExpertSkippingOptionsTest, WithoutCalibrationAlphaIsOneAndThresholdsAreNeeded) {
  ExpertSkippingOptions o;
  o.kind = "dual-threshold";
  o.tau_visual = 0.3f;
  auto r = ResolveExpertSkipping(o, nullptr, 3, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("skip_tau_text is not set"));
  const SkipOptionNames flags{"--expert_skipping", "--skip_tau_text", "--skip_tau_visual"};
  EXPECT_THAT(ResolveExpertSkipping(o, nullptr, 3, flags).status().message(),
              HasSubstr("--skip_tau_text is not set"));
  o.tau_text = 0.2f;
  r = ResolveExpertSkipping(o, nullptr, 3, {});
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_TRUE((*r)->alpha.empty());
  EXPECT_EQ((*r)->Alpha(2), 1.0f);
}

TEST(ExpertSkippingOptionsTest, BadSettingsAreNamed) {
  ExpertSkippingOptions o;
  o.kind = "dual";
  const SkipOptionNames req{"policy.expert_skipping", "policy.skip_tau_text",
                            "policy.skip_tau_visual"};
  absl::Status st = CheckExpertSkippingOptions(o, req);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("policy.expert_skipping \"dual\" is not one of none, "
                                      "dual-threshold"));
  o.kind = "dual-threshold";
  o.tau_visual = std::numeric_limits<float>::infinity();
  EXPECT_THAT(CheckExpertSkippingOptions(o, req).message(), HasSubstr("policy.skip_tau_visual"));
  // A profile calibrated for another depth.
  o.tau_visual = 0.1f;
  o.tau_text = 0.1f;
  const SkipCalibration cal = Calibrated();
  auto r = ResolveExpertSkipping(o, &cal, 4, req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("alpha has 3 values"));
}

}  // namespace
}  // namespace vismoe
