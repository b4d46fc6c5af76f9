// ResolveCommitMiss: "fetch" is the exact path; "commit" takes its threshold
// from the options, else the calibration profile; OWA is on with alpha1 > 0
// and its trigger range defaults to [ceil(k/2), k - 1]; errors name the
// setting in the caller's words.
#include "engine/policy/commit_miss_options.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

TEST(CommitMissOptionsTest, FetchIsOff) {
  CommitMissOptions o;
  o.threshold = 0.5f;  // settings without the policy: still fetch
  auto r = ResolveCommitMiss("fetch", o, nullptr, 4, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
}

TEST(CommitMissOptionsTest, ThresholdFromOptionsElseTheProfile) {
  CommitCalibration cal;
  cal.threshold = 0.7f;
  CommitMissOptions o;
  auto r = ResolveCommitMiss("commit", o, &cal, 4, {});
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->threshold, 0.7f);
  EXPECT_FALSE((*r)->owa());
  o.threshold = 0.0f;  // set: wins over the profile, even at 0
  r = ResolveCommitMiss("commit", o, &cal, 4, {});
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->threshold, 0.0f);
  o.threshold = -1.0f;  // unset and no profile
  r = ResolveCommitMiss("commit", o, nullptr, 4, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("commit_threshold is not set"));
  const CommitOptionNames flags{"--miss_policy", "--commit_threshold", "--commit_owa_alpha1",
                                "--commit_owa_alpha2"};
  r = ResolveCommitMiss("commit", o, nullptr, 4, flags);
  EXPECT_THAT(r.status().message(), HasSubstr("--commit_threshold is not set"));
}

TEST(CommitMissOptionsTest, OwaAndItsDefaultTriggerRange) {
  CommitMissOptions o;
  o.threshold = 1.0f;
  o.owa_alpha1 = 1.3f;
  o.owa_alpha2 = 1.05f;
  auto r = ResolveCommitMiss("commit", o, nullptr, 4, {});
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_TRUE((*r)->owa());
  EXPECT_EQ((*r)->owa_alpha1, 1.3f);
  EXPECT_EQ((*r)->owa_alpha2, 1.05f);
  EXPECT_EQ((*r)->owa_min_correct, 2);  // the paper's Qwen1.5-MoE (top-4) range
  EXPECT_EQ((*r)->owa_max_correct, 3);
  r = ResolveCommitMiss("commit", o, nullptr, 6, {});
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->owa_min_correct, 3);
  EXPECT_EQ((*r)->owa_max_correct, 5);
  o.owa_min_correct = 1;
  o.owa_max_correct = 1;
  r = ResolveCommitMiss("commit", o, nullptr, 2, {});  // Mixtral's (top-2) range
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->owa_max_correct, 1);
  o.owa_max_correct = 4;  // past top_k - 1
  r = ResolveCommitMiss("commit", o, nullptr, 4, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("miss_policy: commit miss policy: OWA"));
}

TEST(CommitMissOptionsTest, BadValuesAreNamed) {
  CommitMissOptions o;
  EXPECT_THAT(CheckCommitMissOptions("sometimes", o, {}).message(),
              HasSubstr("miss_policy \"sometimes\" is not one of fetch, commit"));
  o.threshold = std::numeric_limits<float>::infinity();
  EXPECT_THAT(CheckCommitMissOptions("commit", o, {}).message(),
              HasSubstr("commit_threshold must be finite"));
  o.threshold = 1;
  o.owa_alpha1 = -0.5f;
  EXPECT_THAT(CheckCommitMissOptions("commit", o, {}).message(), HasSubstr("commit_owa_alpha1"));
  o.owa_alpha1 = 0;
  o.owa_alpha2 = 0;
  EXPECT_THAT(CheckCommitMissOptions("commit", o, {}).message(), HasSubstr("commit_owa_alpha2"));
  o.owa_alpha2 = 1;
  o.owa_min_correct = 0;
  EXPECT_THAT(CheckCommitMissOptions("commit", o, {}).message(), HasSubstr("trigger bounds"));
}

}  // namespace
}  // namespace vismoe
