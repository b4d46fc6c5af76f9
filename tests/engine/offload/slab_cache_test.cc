// SlabCache victim rules (protected preload experts included), and randomised
// schedules (fixed seeds) checking its invariants: never evict Required,
// pinned or in-flight slots; no leaks.
#include "engine/offload/slab_cache.h"

#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(SlabCacheTest, ParsesPolicies) {
  EXPECT_EQ(*ParseEvictionPolicy("lru"), EvictionPolicy::kLru);
  EXPECT_EQ(*ParseEvictionPolicy("lfu"), EvictionPolicy::kLfu);
  EXPECT_EQ(*ParseEvictionPolicy("guarded-priority"), EvictionPolicy::kGuardedPriority);
  EXPECT_FALSE(ParseEvictionPolicy("fifo").ok());
}

TEST(SlabCacheTest, FreeFirstThenExpiredByPolicyThenSpeculativeOnDemand) {
  SlabCache c(3, EvictionPolicy::kLru);
  EXPECT_EQ(c.PickVictim(false), 0);
  c.Assign(0, 5, 1, SlotState::kRequired, false);
  c.Assign(1, 5, 2, SlotState::kRequired, false);
  c.Assign(2, 6, 3, SlotState::kSpeculative, true);
  EXPECT_EQ(c.PickVictim(true), -1);  // all in flight
  for (int i = 0; i < 3; ++i) c.MarkLoaded(i);
  EXPECT_EQ(c.PickVictim(false), -1);  // Required x2, Speculative not for prefetch
  EXPECT_EQ(c.PickVictim(true), 2);    // demand may take the Speculative one
  c.SetState(1, SlotState::kExpired);
  c.SetState(0, SlotState::kExpired);
  c.Touch(0);  // 0 used more recently than 1
  EXPECT_EQ(c.PickVictim(false), 1);
  c.Pin(1);
  EXPECT_EQ(c.PickVictim(false), 0);
  c.Unpin(1);
  EXPECT_EQ(c.Find(5, 2), 1);
  c.Assign(1, 7, 7, SlotState::kRequired, false);
  EXPECT_EQ(c.Find(5, 2), -1);
  EXPECT_EQ(c.Find(7, 7), 1);
  std::string why;
  EXPECT_TRUE(c.CheckInvariants(&why)) << why;
  EXPECT_EQ(c.Count(SlotState::kRequired), 1);
  EXPECT_EQ(c.Count(SlotState::kExpired), 1);
  EXPECT_EQ(c.Count(SlotState::kSpeculative), 1);
}

TEST(SlabCacheTest, LfuAndGuardedRanking) {
  SlabCache lfu(2, EvictionPolicy::kLfu);
  lfu.Assign(0, 0, 0, SlotState::kRequired, false);
  lfu.Assign(1, 0, 1, SlotState::kRequired, false);
  lfu.Touch(0);
  lfu.Touch(0);
  lfu.Touch(1);  // most recent, but used less
  for (int i = 0; i < 2; ++i) {
    lfu.MarkLoaded(i);
    lfu.SetState(i, SlotState::kExpired);
  }
  EXPECT_EQ(lfu.PickVictim(false), 1);

  SlabCache g(2, EvictionPolicy::kGuardedPriority);
  g.Assign(0, 0, 0, SlotState::kRequired, false);
  g.Assign(1, 0, 1, SlotState::kRequired, false);
  g.SetPriority(0, 0, 0.5);
  g.SetPriority(0, 1, 0.9);
  for (int i = 0; i < 2; ++i) {
    g.MarkLoaded(i);
    g.SetState(i, SlotState::kExpired);
  }
  EXPECT_EQ(g.PickVictim(false), 0);
  g.SetPriority(0, 0, 2.0);
  EXPECT_EQ(g.PickVictim(false), 1);
}

// Brute-force reference of the victim rule: Free; unprotected Expired;
// (demand) unprotected Speculative; (demand) protected Expired or Speculative.
int ReferenceVictim(const SlabCache& c, bool demand) {
  for (int i = 0; i < c.num_slots(); ++i) {
    if (c.slot(i).state == SlotState::kFree) return i;
  }
  auto rank = [&](int i) {
    const SlabCache::Slot& s = c.slot(i);
    double key = 0;
    if (c.policy() == EvictionPolicy::kLfu)
      key = static_cast<double>(c.UseCount(s.layer, s.expert));
    if (c.policy() == EvictionPolicy::kGuardedPriority) key = c.Priority(s.layer, s.expert);
    return std::make_tuple(key, s.last_use, i);
  };
  auto best_of = [&](auto eligible) {
    int best = -1;
    for (int i = 0; i < c.num_slots(); ++i) {
      const SlabCache::Slot& s = c.slot(i);
      if (s.pins > 0 || s.in_flight || !eligible(s)) continue;
      if (best < 0 || rank(i) < rank(best)) best = i;
    }
    return best;
  };
  auto kept = [&](const SlabCache::Slot& s) { return c.IsProtected(s.layer, s.expert); };
  int v =
      best_of([&](const SlabCache::Slot& s) { return s.state == SlotState::kExpired && !kept(s); });
  if (v >= 0 || !demand) return v;
  v = best_of(
      [&](const SlabCache::Slot& s) { return s.state == SlotState::kSpeculative && !kept(s); });
  if (v >= 0) return v;
  return best_of([&](const SlabCache::Slot& s) {
    return (s.state == SlotState::kExpired || s.state == SlotState::kSpeculative) && kept(s);
  });
}

// Protected experts (a sequence's preload): passed over for prefetch, taken
// by a demand miss only when nothing else is left; the set may name experts
// that are not cached.
TEST(SlabCacheTest, ProtectedSlotsAreADemandMissesLastResort) {
  SlabCache c(4, EvictionPolicy::kLru);
  c.Assign(0, 1, 0, SlotState::kRequired, false);
  c.Assign(1, 1, 1, SlotState::kRequired, false);
  c.Assign(2, 2, 2, SlotState::kSpeculative, true);
  c.Assign(3, 2, 3, SlotState::kSpeculative, false);
  for (int i = 0; i < 4; ++i) c.MarkLoaded(i);
  c.SetState(0, SlotState::kExpired);
  c.SetState(1, SlotState::kExpired);
  c.Touch(1);  // slot 1 used last: LRU would take slot 0 first
  c.SetProtected({{1, 0}, {2, 3}, {5, 5}});
  EXPECT_EQ(c.protected_count(), 3);
  EXPECT_TRUE(c.IsProtected(1, 0));
  EXPECT_FALSE(c.IsProtected(1, 1));
  EXPECT_EQ(c.PickVictim(false), 1);  // the unprotected Expired one, though used later
  EXPECT_EQ(c.PickVictim(true), 1);
  c.Pin(1);
  EXPECT_EQ(c.PickVictim(false), -1);  // never a protected one for a prefetch or preload
  EXPECT_EQ(c.PickVictim(true), 2);    // unprotected Speculative before protected Expired
  c.Pin(2);
  // Only protected slots left: the lowest-ranked one (slot 0's last use is the oldest).
  EXPECT_EQ(c.PickVictim(true), 0);
  c.Pin(0);
  EXPECT_EQ(c.PickVictim(true), 3);  // a protected Speculative one as well
  c.SetProtected({});
  EXPECT_EQ(c.protected_count(), 0);
  EXPECT_EQ(c.PickVictim(false), -1);  // slot 3 is Speculative: demand only
  EXPECT_EQ(c.PickVictim(true), 3);
}

TEST(SlabCacheTest, AssignClearsThePreloadedMark) {
  SlabCache c(1, EvictionPolicy::kLfu);
  c.Assign(0, 3, 1, SlotState::kSpeculative, false);
  c.SetPreloaded(0, true);
  EXPECT_TRUE(c.slot(0).preloaded);
  c.MarkLoaded(0);
  c.SetState(0, SlotState::kExpired);
  c.Assign(0, 3, 2, SlotState::kRequired, false);
  EXPECT_FALSE(c.slot(0).preloaded);
  c.SetPreloaded(0, true);
  c.Drop(0);
  EXPECT_FALSE(c.slot(0).preloaded);
}

// One slab, its expert protected: a demand miss still gets it (progress).
TEST(SlabCacheTest, OneProtectedSlabStillServesADemandMiss) {
  SlabCache c(1, EvictionPolicy::kGuardedPriority);
  c.Assign(0, 4, 7, SlotState::kSpeculative, false);
  c.MarkLoaded(0);
  c.SetState(0, SlotState::kExpired);
  c.SetProtected({{4, 7}});
  EXPECT_EQ(c.PickVictim(false), -1);
  EXPECT_EQ(c.PickVictim(true), 0);
}

TEST(SlabCacheTest, RandomSchedulesKeepInvariants) {
  int victims = 0;
  // Seeds from 3000 on also protect random experts (a preload) now and then.
  for (int seed = 0; seed < 4500; ++seed) {
    std::mt19937 rng(seed);
    const int n = 1 + static_cast<int>(rng() % 6);
    const EvictionPolicy policy = static_cast<EvictionPolicy>(seed % 3);
    SlabCache c(n, policy);
    for (int op = 0; op < 200; ++op) {
      const int kind = static_cast<int>(rng() % (seed < 3000 ? 8 : 9));
      const int i = static_cast<int>(rng() % n);
      const SlabCache::Slot s = c.slot(i);
      switch (kind) {
        case 0:
        case 1: {  // insert a new expert
          const bool demand = rng() % 2 == 0;
          const int layer = static_cast<int>(rng() % 3), expert = static_cast<int>(rng() % 6);
          const int v = c.PickVictim(demand);
          ASSERT_EQ(v, ReferenceVictim(c, demand)) << "seed " << seed;
          if (v < 0 || c.Find(layer, expert) >= 0) break;
          const SlabCache::Slot& old = c.slot(v);
          ASSERT_NE(old.state, SlotState::kRequired) << "seed " << seed;
          ASSERT_EQ(old.pins, 0) << "seed " << seed;
          ASSERT_FALSE(old.in_flight) << "seed " << seed;
          if (!demand) {
            ASSERT_NE(old.state, SlotState::kSpeculative) << "seed " << seed;
          }
          ++victims;
          c.Assign(v, layer, expert, demand ? SlotState::kRequired : SlotState::kSpeculative,
                   !demand);
          break;
        }
        case 2:
          if (s.in_flight) c.MarkLoaded(i);
          break;
        case 3:
          if (s.state != SlotState::kFree && !s.in_flight) c.Pin(i);
          break;
        case 4:
          if (s.pins > 0) c.Unpin(i);
          break;
        case 5:
          if (s.state != SlotState::kFree && s.pins == 0) c.SetState(i, SlotState::kExpired);
          break;
        case 6:
          if (s.state != SlotState::kFree) {
            c.SetState(i, rng() % 2 ? SlotState::kRequired : SlotState::kSpeculative);
          }
          break;
        case 7:
          if (s.state != SlotState::kFree) c.Touch(i);
          c.SetPriority(static_cast<int>(rng() % 3), static_cast<int>(rng() % 6),
                        static_cast<double>(rng() % 5));
          break;
        case 8: {
          std::vector<std::pair<int, int>> keep;
          for (int k = static_cast<int>(rng() % 5); k > 0; --k) {
            keep.push_back({static_cast<int>(rng() % 3), static_cast<int>(rng() % 6)});
          }
          c.SetProtected(keep);
          break;
        }
      }
      std::string why;
      ASSERT_TRUE(c.CheckInvariants(&why)) << "seed " << seed << ": " << why;
      int64_t total = 0;
      for (SlotState st :
           {SlotState::kFree, SlotState::kRequired, SlotState::kSpeculative, SlotState::kExpired}) {
        total += c.Count(st);
      }
      ASSERT_EQ(total, n);  // no slot leaks
    }
  }
  EXPECT_GT(victims, 15000);
}

}  // namespace
}  // namespace vismoe
