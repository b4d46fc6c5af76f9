// The client tools' policy overrides: unset flag values stay unset (server
// default), set ones reach the proto and the report's JSON.
#include "client/policy_flags.h"
#include "gtest/gtest.h"

namespace vismoe::client {
namespace {

TEST(ClientPolicyFlagsTest, SkippingOverridesOnlyWhenSet) {
  vismoe::v1::PolicyOverrides p = MakePolicyOverrides("", -1, "");
  AddSkippingOverrides("", -1, -1, &p);
  EXPECT_FALSE(p.has_expert_skipping());
  EXPECT_FALSE(p.has_skip_tau_text());
  EXPECT_FALSE(p.has_skip_tau_visual());
  EXPECT_TRUE(PolicyToJson(p).empty());

  AddSkippingOverrides("dual-threshold", 0.0, 0.25, &p);
  EXPECT_EQ(p.expert_skipping(), "dual-threshold");
  ASSERT_TRUE(p.has_skip_tau_text());  // 0 is a threshold, not "unset"
  EXPECT_EQ(p.skip_tau_text(), 0.0f);
  EXPECT_EQ(p.skip_tau_visual(), 0.25f);
  const nlohmann::json j = PolicyToJson(p);
  EXPECT_EQ(j["expert_skipping"], "dual-threshold");
  EXPECT_EQ(j["skip_tau_visual"].get<double>(), 0.25);
}

}  // namespace
}  // namespace vismoe::client
