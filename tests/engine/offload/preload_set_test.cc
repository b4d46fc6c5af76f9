// PreloadSet: the preload order (rank by rank across the offloaded layers),
// the per-owner quota floor(share * slabs / owners) and its edge cases (every
// expert resident: nothing to keep; a one-slab cache), owners joining and
// leaving, and the option checks.
#include "engine/offload/preload_set.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Pairs = std::vector<std::pair<int, int>>;

TEST(PreloadSetTest, RankByRankAcrossOffloadedLayersOnly) {
  // Layers 1..3 offloaded (0 pinned); 12 slabs, all of it for one owner.
  PreloadSet set(12, 1.0, 8, {3, 1, 2});
  // Layer 0 (pinned) and 4 (not a slab layer) are dropped; duplicates and
  // out-of-range ids too.
  set.Set(7, {{0, 1}, {5, 6, 7}, {2, 2, 9, -1, 3}, {4}, {1}});
  EXPECT_EQ(set.owners(), 1);
  EXPECT_EQ(set.Quota(), 12);
  EXPECT_EQ(set.Protected(), (Pairs{{1, 5}, {2, 2}, {3, 4}, {1, 6}, {2, 3}, {1, 7}}));
}

TEST(PreloadSetTest, ShareBoundsWhatOneOwnerKeeps) {
  PreloadSet set(10, 0.3, 8, {1, 2});
  set.Set(1, {{}, {0, 1, 2}, {3, 4, 5}});
  EXPECT_EQ(set.Quota(), 3);  // floor(0.3 * 10)
  EXPECT_EQ(set.Protected(), (Pairs{{1, 0}, {2, 3}, {1, 1}}));
}

TEST(PreloadSetTest, OwnersShareTheCacheAndGetItBackWhenOthersLeave) {
  PreloadSet set(8, 0.5, 8, {1, 2});
  set.Set(1, {{}, {0, 1}, {2, 3}});
  set.Set(2, {{}, {0, 5}, {6, 7}});
  EXPECT_EQ(set.Quota(), 2);  // 4 slabs for 2 owners
  // Owner 1's two, then owner 2's two; (1, 0) is kept once.
  EXPECT_EQ(set.Protected(), (Pairs{{1, 0}, {2, 2}, {2, 6}}));
  set.Set(3, {{}, {4}, {}});
  EXPECT_EQ(set.Quota(), 1);  // floor(4 / 3)
  EXPECT_EQ(set.Protected(), (Pairs{{1, 0}, {1, 4}}));
  set.Erase(1);
  set.Erase(42);  // unknown: no-op
  EXPECT_EQ(set.owners(), 2);
  EXPECT_EQ(set.Quota(), 2);
  EXPECT_EQ(set.Protected(), (Pairs{{1, 0}, {2, 6}, {1, 4}}));
  set.Set(2, {{}, {}, {7}});  // replaced
  EXPECT_EQ(set.Protected(), (Pairs{{2, 7}, {1, 4}}));
  set.Erase(2);
  set.Erase(3);
  EXPECT_EQ(set.Quota(), 0);
  EXPECT_THAT(set.Protected(), IsEmpty());
}

// Every MoE layer pinned: no slab layer, no slab, nothing to keep.
TEST(PreloadSetTest, AllExpertsResidentKeepsNothing) {
  PreloadSet set(0, 1.0, 4, {});
  set.Set(1, {{0, 1}, {2, 3}});
  EXPECT_EQ(set.Quota(), 0);
  EXPECT_THAT(set.Protected(), IsEmpty());
}

// One slab: the quota is 0 below a full share (the lone slab stays with the
// layers), 1 with the whole cache; a second owner gets nothing.
TEST(PreloadSetTest, OneSlabCache) {
  PreloadSet half(1, 0.5, 4, {0});
  half.Set(1, {{2, 3}});
  EXPECT_EQ(half.Quota(), 0);
  EXPECT_THAT(half.Protected(), IsEmpty());
  PreloadSet whole(1, 1.0, 4, {0});
  whole.Set(1, {{2, 3}});
  EXPECT_THAT(whole.Protected(), ElementsAre(std::pair{0, 2}));
  whole.Set(2, {{1}});
  EXPECT_EQ(whole.Quota(), 0);
  EXPECT_THAT(whole.Protected(), IsEmpty());
}

TEST(PreloadSetTest, OptionsAreChecked) {
  OffloadOptions o;
  EXPECT_TRUE(CheckPreloadOptions(o).ok());  // off by default
  EXPECT_EQ(o.preload, "none");
  o.preload = "prefill-routing";
  EXPECT_TRUE(CheckPreloadOptions(o).ok());
  o.preload = "melinoe";
  EXPECT_THAT(std::string(CheckPreloadOptions(o).message()),
              HasSubstr("preload must be one of none, prefill-routing; got 'melinoe'"));
  o.preload = "none";
  o.preload_experts = -2;
  EXPECT_THAT(std::string(CheckPreloadOptions(o).message()),
              HasSubstr("preload_experts must be >= 0"));
  o.preload_experts = 0;
  for (double bad : {0.0, -0.5, 1.01}) {
    o.preload_share = bad;
    EXPECT_THAT(std::string(CheckPreloadOptions(o).message()), HasSubstr("preload_share")) << bad;
  }
}

}  // namespace
}  // namespace vismoe
