// RoutingStats on hand-made token sequences whose figures are worked out
// below: next-token repeat, reuse distances, LRU against Belady on a cyclic
// pattern LRU cannot hold, the warm-up split, and distinct experts per window.
#include "engine/calibrate/routing_stats.h"

#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(RoutingStatsTest, RepeatAndReuseOfAShortSequence) {
  // k = 2 over 3 experts: {0,1} {1,2} {0,1}.
  const LayerSequence seq = {{0, 1}, {1, 2}, {0, 1}};
  RoutingStatsOptions o;
  o.num_experts = 3;
  o.cache_fractions = {2.0 / 3.0};  // two experts
  o.warmup_tokens = 0;
  o.spread_window = 3;
  const RoutingStats s = ComputeRoutingStats({&seq}, o);
  EXPECT_EQ(s.sequences, 1);
  EXPECT_EQ(s.tokens, 3);
  EXPECT_DOUBLE_EQ(s.next_token_repeat, 0.5);  // one of two shared at each step
  // Reuses: 1 at distance 1 (token 1), 0 at 2 and 1 at 1 (token 2).
  EXPECT_DOUBLE_EQ(s.reuse_median, 1.0);
  EXPECT_DOUBLE_EQ(s.reuse_within_1, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.reuse_within_8, 1.0);
  EXPECT_DOUBLE_EQ(s.first_use_share, 0.5);  // 0, 1 and 2 seen first: 3 of 6
  EXPECT_DOUBLE_EQ(s.distinct_per_window, 3.0);
  ASSERT_EQ(s.cache.size(), 1u);
  EXPECT_EQ(s.cache[0].capacity, 2);
  // LRU: miss miss | hit miss (evicts 0) | miss hit.
  EXPECT_DOUBLE_EQ(s.cache[0].lru_hit, 2.0 / 6.0);
}

TEST(RoutingStatsTest, BeladyHoldsWhatLruCyclesOut) {
  // k = 1, experts 0 1 2 0 1 2 in a cache of two: LRU always evicts the next
  // one needed (no hit); Belady keeps it (hits at tokens 3 and 5).
  const LayerSequence seq = {{0}, {1}, {2}, {0}, {1}, {2}};
  RoutingStatsOptions o;
  o.num_experts = 3;
  o.cache_fractions = {2.0 / 3.0};
  o.warmup_tokens = 2;
  const RoutingStats s = ComputeRoutingStats({&seq}, o);
  ASSERT_EQ(s.cache.size(), 1u);
  EXPECT_DOUBLE_EQ(s.cache[0].lru_hit, 0.0);
  EXPECT_DOUBLE_EQ(s.cache[0].lru_warmup_hit, 0.0);
  EXPECT_DOUBLE_EQ(s.cache[0].belady_hit, 2.0 / 4.0);  // tokens 2..5 after the warm-up
  EXPECT_DOUBLE_EQ(s.next_token_repeat, 0.0);
  EXPECT_DOUBLE_EQ(s.reuse_median, 3.0);
}

// One cache for both layers lends layer B the slots layer A does not need:
// A uses expert 0 only, B cycles 0 1 2 (E = 4, half the experts cached). Per
// layer (2 slots) LRU cycles B out; shared (4 slots) B fits after its first
// cycle: hits 5 + 0 against 5 + 3 of 12 lookups.
TEST(RoutingStatsTest, SharedCacheLendsIdleSlots) {
  const LayerSequence a = {{0}, {0}, {0}, {0}, {0}, {0}};
  const LayerSequence b = {{0}, {1}, {2}, {0}, {1}, {2}};
  RoutingStatsOptions o;
  o.num_experts = 4;
  o.cache_fractions = {0.5};
  o.warmup_tokens = 0;
  const RoutingStats s = ComputeRoutingStats({&a, &b}, o, {{&a, &b}});
  ASSERT_EQ(s.cache.size(), 1u);
  EXPECT_DOUBLE_EQ(s.cache[0].lru_hit, 5.0 / 12.0);
  EXPECT_DOUBLE_EQ(s.cache[0].shared_lru_hit, 8.0 / 12.0);
  EXPECT_DOUBLE_EQ(s.cache[0].shared_belady_hit, 8.0 / 12.0);
  // Without the per-request grouping there are no shared figures.
  EXPECT_DOUBLE_EQ(ComputeRoutingStats({&a, &b}, o).cache[0].shared_lru_hit, 0.0);
}

TEST(RoutingStatsTest, ShortSequencesCountForNothing) {
  const LayerSequence one = {{0, 1}};
  RoutingStatsOptions o;
  o.num_experts = 2;
  const RoutingStats s = ComputeRoutingStats({&one, nullptr}, o);
  EXPECT_EQ(s.sequences, 0);
  EXPECT_EQ(s.tokens, 0);
  EXPECT_DOUBLE_EQ(s.next_token_repeat, 0.0);
}

TEST(RoutingStatsTest, RecorderKeepsRowsInOrderPerPhaseAndLayer) {
  RoutingStatsRecorder rec;
  RouterResult r;
  r.n = 2;
  r.num_experts = 4;
  r.top_k = 2;
  r.experts = {0, 1, 2, 3};
  rec.OnRouting(Phase::kPrefill, 1, nullptr, r);
  r.n = 1;
  r.experts = {3, 0};
  rec.OnRouting(Phase::kDecode, 1, nullptr, r);
  ASSERT_EQ(rec.prefill().size(), 2u);
  EXPECT_TRUE(rec.prefill()[0].empty());
  EXPECT_EQ(rec.prefill()[1], (LayerSequence{{0, 1}, {2, 3}}));
  ASSERT_EQ(rec.decode().size(), 2u);
  EXPECT_EQ(rec.decode()[1], (LayerSequence{{3, 0}}));
}

}  // namespace
}  // namespace vismoe

namespace vismoe {
namespace {

TEST(RoutingStatsTest, NextLayerIdAgreementOverAlignedLayers) {
  const LayerSequence a = {{0, 1}, {2, 3}};
  const LayerSequence b = {{1, 5}, {2, 3}};  // 1 of 2, then 2 of 2 ids again
  const LayerSequence c = {{1}, {2}, {3}};   // other rows (compressed away): not paired
  const LayerSequence d = {{6, 7}, {0, 3}};  // after c, paired with nothing aligned
  RoutingStatsOptions o;
  o.num_experts = 8;
  const std::vector<const LayerSequence*> all = {&a, &b, &d};
  RoutingStats s = ComputeRoutingStats(all, o, {{&a, &b}});
  EXPECT_DOUBLE_EQ(s.next_layer_agreement, 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.next_layer_agreement_chance, 2.0 / 8.0);
  // b -> c differs in length; c -> d too: only a -> b counts.
  s = ComputeRoutingStats(all, o, {{&a, &b, &c, &d}});
  EXPECT_DOUBLE_EQ(s.next_layer_agreement, 3.0 / 4.0);
  // b -> d: token 0 shares nothing, token 1 shares id 3.
  s = ComputeRoutingStats(all, o, {{&a, &b}, {&b, &d}});
  EXPECT_DOUBLE_EQ(s.next_layer_agreement, (3.0 + 1.0) / 8.0);
  EXPECT_EQ(ComputeRoutingStats(all, o).next_layer_agreement, 0);  // needs `requests`
  EXPECT_TRUE(RoutingStatsJson(s).contains("next_layer_agreement"));
}

}  // namespace
}  // namespace vismoe
