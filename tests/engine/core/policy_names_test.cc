// The policy name table: every kind round-trips through its name, aliases are
// accepted but never printed, unknown names are refused, and the listed names
// are the documented ones in table order.
#include "engine/core/policy_names.h"

#include "gtest/gtest.h"

namespace vismoe {
namespace {

template <typename Kind>
void ExpectRoundTrip(std::initializer_list<Kind> kinds) {
  for (Kind k : kinds) {
    const std::optional<Kind> back = PolicyFromName<Kind>(PolicyName(k));
    ASSERT_TRUE(back.has_value()) << PolicyName(k);
    EXPECT_EQ(*back, k) << PolicyName(k);
  }
}

TEST(PolicyNamesTest, EveryKindRoundTrips) {
  ExpectRoundTrip<CompressorKind>({CompressorKind::kNone, CompressorKind::kRandom,
                                   CompressorKind::kSaliency, CompressorKind::kAffinity});
  ExpectRoundTrip<PredictorKind>({PredictorKind::kNone, PredictorKind::kHistory,
                                  PredictorKind::kRouterLookahead, PredictorKind::kMlpLookahead});
  ExpectRoundTrip<EvictionPolicy>(
      {EvictionPolicy::kLru, EvictionPolicy::kLfu, EvictionPolicy::kGuardedPriority});
  ExpectRoundTrip<SkipKind>({SkipKind::kNone, SkipKind::kDualThreshold});
  ExpectRoundTrip<PreloadKind>({PreloadKind::kNone, PreloadKind::kPrefillRouting});
  ExpectRoundTrip<MissPolicy>({MissPolicy::kFetch, MissPolicy::kCommit, MissPolicy::kCpu});
  ExpectRoundTrip<HostStoreMode>(
      {HostStoreMode::kAuto, HostStoreMode::kMapped, HostStoreMode::kPacked});
}

TEST(PolicyNamesTest, ListsAreTheDocumentedNames) {
  EXPECT_EQ(PolicyNames<CompressorKind>(", "), "none, random, saliency, affinity");
  EXPECT_EQ(PolicyNames<PredictorKind>(" | "), "none | history | router-lookahead | mlp-lookahead");
  EXPECT_EQ(PolicyNames<EvictionPolicy>(", "), "lru, lfu, guarded");
  EXPECT_EQ(PolicyNames<SkipKind>(", "), "none, dual-threshold");
  EXPECT_EQ(PolicyNames<PreloadKind>(", "), "none, prefill-routing");
  EXPECT_EQ(PolicyNames<MissPolicy>(", "), "fetch, commit, cpu");
  EXPECT_EQ(PolicyNames<HostStoreMode>(", "), "auto, mapped, packed");
}

TEST(PolicyNamesTest, AliasIsAcceptedButNotPrinted) {
  EXPECT_EQ(PolicyFromName<EvictionPolicy>("guarded-priority"), EvictionPolicy::kGuardedPriority);
  EXPECT_STREQ(PolicyName(EvictionPolicy::kGuardedPriority), "guarded");
}

TEST(PolicyNamesTest, UnknownAndCaseVariantsAreRefused) {
  EXPECT_FALSE(PolicyFromName<CompressorKind>("gzip").has_value());
  EXPECT_FALSE(PolicyFromName<CompressorKind>("Affinity").has_value());
  EXPECT_FALSE(PolicyFromName<PredictorKind>("").has_value());
  EXPECT_FALSE(PolicyFromName<EvictionPolicy>("fifo").has_value());
  // Names of one kind are not names of another.
  EXPECT_FALSE(PolicyFromName<EvictionPolicy>("history").has_value());
}

}  // namespace
}  // namespace vismoe
