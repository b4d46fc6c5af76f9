// OffloadExpertProvider's per-sequence preload over synthetic experts: the
// preferred experts are copied in and kept for the sequence (where plain LRU
// would evict them), counted as issued and used, never for a host layer; a
// one-slab cache still progresses; nothing happens with every expert resident; sequences share the
// cache by quota and a preload never takes a Required, Speculative or another
// sequence's protected slab; and random schedules with preloads starting and
// ending between steps keep every invariant and byte count.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/offload/offload_expert_provider.h"
#include "engine/policy/history_expert_predictor.h"
#include "gtest/gtest.h"
#include "tests/engine/offload/fake_expert_source.h"

namespace vismoe {
namespace {

using testing::FakeExpertSource;

constexpr int kH = 8;
constexpr int kI = 4;

std::unique_ptr<OffloadExpertProvider> Make(FakeExpertSource& src, const MemoryPlan& plan,
                                            const OffloadOptions& o,
                                            std::unique_ptr<ExpertPredictor> predictor = nullptr) {
  auto p =
      OffloadExpertProvider::Create(src, src.Config(2), plan, o, nullptr, std::move(predictor));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// One layer of a step: declare, acquire each (checking its bytes), release.
void RunLayer(const FakeExpertSource& src, OffloadExpertProvider& p, Phase phase, int layer,
              const std::vector<int>& experts) {
  auto order = p.BeginLayer(phase, layer, experts);
  ASSERT_TRUE(order.ok()) << order.status();
  for (int e : *order) {
    auto w = p.Acquire(layer, e);
    ASSERT_TRUE(w.ok()) << "layer " << layer << " expert " << e << ": " << w.status();
    ASSERT_TRUE(src.Holds(*w, layer, e)) << "layer " << layer << " expert " << e;
    p.Release(layer, e);
  }
  p.EndLayer(layer);
}

bool Cached(OffloadExpertProvider& p, int layer, int expert) {
  p.WaitForTransfers();
  return p.Ready(layer, expert);
}

// Layers 1 and 2 offloaded into 4 slabs (LRU). The sequence prefers 0 and 1
// of layer 1 and 2 of layer 2; its decode steps route {0, 3} / {2, 4}, then
// {1} / {2}. Plain LRU evicts (1, 1) for (2, 4); preload keeps it.
TEST(OffloadExpertProviderPreloadTest, PreferredExpertsAreCopiedInAndKept) {
  FakeExpertSource src(3, 6, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  for (bool preload : {false, true}) {
    SCOPED_TRACE(preload ? "preload" : "no preload");
    OffloadOptions o;
    o.preload_share = 1.0;
    auto p = Make(src, src.Plan(/*pinned=*/1, /*slabs=*/4), o);
    ASSERT_NE(p, nullptr);
    if (preload) {
      p->Preload(1, {{0, 1}, {0, 1}, {2}});  // layer 0 is pinned: ignored
      EXPECT_EQ(p->ProtectedExperts(), 3);
      const OffloadStats s = p->TakeRequestStats();
      EXPECT_EQ(s.preload_issued, 3u);
      EXPECT_EQ(s.bytes_h2d, 3u * p->format().bytes);
      EXPECT_TRUE(Cached(*p, 1, 1));
    } else {
      // Without preload the same experts come in by demand during prefill.
      RunLayer(src, *p, Phase::kPrefill, 1, {0, 1});
      RunLayer(src, *p, Phase::kPrefill, 2, {2});
      (void)p->TakeRequestStats();
    }
    RunLayer(src, *p, Phase::kDecode, 1, {0, 3});
    RunLayer(src, *p, Phase::kDecode, 2, {2, 4});
    EXPECT_EQ(Cached(*p, 1, 1), preload) << "LRU evicts (1, 1); preload keeps it";
    RunLayer(src, *p, Phase::kDecode, 1, {1});
    RunLayer(src, *p, Phase::kDecode, 2, {2});
    const OffloadStats s = p->TakeRequestStats();
    EXPECT_EQ(s.prefetch_needed, 6u);
    EXPECT_EQ(s.preload_kept_lookups, preload ? 4u : 0u);  // 0, 2 | 1, 2
    if (preload) {
      EXPECT_EQ(s.preload_used, 3u);  // (1, 0), (2, 2), (1, 1): first use each
      EXPECT_EQ(s.prefetch_recalled, 4u);
      EXPECT_EQ(s.bytes_h2d, 2u * p->format().bytes);  // 3 and 4 only
    } else {
      EXPECT_EQ(s.preload_used, 0u);
      EXPECT_EQ(s.prefetch_recalled, 3u);
      EXPECT_EQ(s.bytes_h2d, 3u * p->format().bytes);  // 3, 4 and 1 again
    }
    p->EndPreload(1);
    EXPECT_EQ(p->ProtectedExperts(), 0);
    std::string why;
    EXPECT_TRUE(p->CheckInvariants(&why)) << why;
  }
}

// Static host layers (--host_moe_layers) are never copied, not even for a
// sequence's preload: layer 2 computes on the host, so only layer 1's
// preferred experts come in and are protected.
TEST(OffloadExpertProviderPreloadTest, HostLayersAreNeverPreloaded) {
  FakeExpertSource src(3, 6, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.preload_share = 1.0;
  o.host_moe_layers = 1;  // layer 2; layer 0 pinned, layer 1 on the device
  auto p = Make(src, src.Plan(/*pinned=*/1, /*slabs=*/4), o);
  ASSERT_NE(p, nullptr);
  p->Preload(1, {{0}, {0, 1}, {2, 3}});
  EXPECT_EQ(p->ProtectedExperts(), 2);
  const OffloadStats s = p->TakeRequestStats();
  EXPECT_EQ(s.preload_issued, 2u);
  EXPECT_EQ(s.bytes_h2d, 2u * p->format().bytes);
  EXPECT_TRUE(Cached(*p, 1, 0));
  EXPECT_TRUE(Cached(*p, 1, 1));
  EXPECT_FALSE(Cached(*p, 2, 2));
  EXPECT_FALSE(Cached(*p, 2, 3));
  p->EndPreload(1);
  std::string why;
  EXPECT_TRUE(p->CheckInvariants(&why)) << why;
}

// A one-slab cache whose lone slab holds a protected expert: every demand
// miss still gets the slab (a layer of three experts runs through it).
TEST(OffloadExpertProviderPreloadTest, OneSlabCacheStillProgresses) {
  FakeExpertSource src(2, 4, kH, kI, ExpertWeights::Layout::kSeparate);
  OffloadOptions o;
  o.preload_share = 1.0;
  auto p = Make(src, src.Plan(0, 1), o);
  ASSERT_NE(p, nullptr);
  p->Preload(9, {{2, 3}, {1}});
  EXPECT_EQ(p->ProtectedExperts(), 1);  // quota 1: rank 0 of layer 0
  EXPECT_TRUE(Cached(*p, 0, 2));
  RunLayer(src, *p, Phase::kDecode, 0, {0, 1, 3});
  RunLayer(src, *p, Phase::kDecode, 1, {0, 1});
  RunLayer(src, *p, Phase::kDecode, 0, {2});
  const OffloadStats s = p->TakeRequestStats();
  EXPECT_EQ(s.preload_issued, 1u);
  EXPECT_EQ(s.bytes_h2d, 7u * p->format().bytes);  // the preload + 6 demand misses
  // Half the cache for preload: a one-slab cache keeps nothing (quota 0).
  o.preload_share = 0.5;
  auto q = Make(src, src.Plan(0, 1), o);
  ASSERT_NE(q, nullptr);
  q->Preload(9, {{2, 3}, {1}});
  EXPECT_EQ(q->ProtectedExperts(), 0);
  EXPECT_EQ(q->TakeRequestStats().bytes_h2d, 0u);
}

// Every expert resident: with every layer pinned there is no slab to fill;
// with a slab for every offloaded expert, only the missing ones are copied.
TEST(OffloadExpertProviderPreloadTest, AllExpertsResident) {
  FakeExpertSource src(2, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.preload_share = 1.0;
  auto pinned = Make(src, src.Plan(2, 0), o);
  ASSERT_NE(pinned, nullptr);
  pinned->Preload(1, {{0, 1}, {2, 3}});
  EXPECT_EQ(pinned->ProtectedExperts(), 0);
  RunLayer(src, *pinned, Phase::kDecode, 1, {0, 1});
  EXPECT_EQ(pinned->TakeRequestStats().bytes_h2d, 0u);
  pinned->EndPreload(1);

  auto all = Make(src, src.Plan(1, 4), o);
  ASSERT_NE(all, nullptr);
  RunLayer(src, *all, Phase::kPrefill, 1, {0, 1});
  (void)all->TakeRequestStats();
  all->Preload(1, {{}, {0, 1, 2, 3}});
  EXPECT_EQ(all->ProtectedExperts(), 4);
  EXPECT_EQ(all->TakeRequestStats().preload_issued, 2u);  // 2 and 3
  RunLayer(src, *all, Phase::kDecode, 1, {0, 1, 2, 3});
  const OffloadStats s = all->TakeRequestStats();
  EXPECT_EQ(s.cache_hits, 4u);
  EXPECT_EQ(s.bytes_h2d, 0u);
  EXPECT_EQ(s.preload_used, 2u);
}

// Two sequences share 8 slabs at share 0.5: each keeps 2 while both run, the
// one left keeps 4; a preload takes only Free or unprotected Expired slabs.
TEST(OffloadExpertProviderPreloadTest, SequencesShareTheCacheByQuota) {
  FakeExpertSource src(3, 8, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;  // share 0.5
  auto p = Make(src, src.Plan(1, 8), o);
  ASSERT_NE(p, nullptr);
  p->Preload(1, {{}, {0, 1, 2}, {3, 4, 5}});
  EXPECT_EQ(p->ProtectedExperts(), 4);  // alone: 4 of 8
  EXPECT_EQ(p->TakeRequestStats().preload_issued, 4u);
  p->Preload(2, {{}, {6, 7}, {6, 7}});
  EXPECT_EQ(p->ProtectedExperts(), 4);  // 2 each: (1,0) (2,3) and (1,6) (2,6)
  EXPECT_EQ(p->TakeRequestStats().preload_issued, 2u);
  EXPECT_TRUE(Cached(*p, 1, 1));  // no longer kept, still cached
  // A layer of 7 experts through the 8 slabs, 4 of them kept: kept slabs go last.
  RunLayer(src, *p, Phase::kPrefill, 2, {0, 1, 2, 3, 4, 5, 6});
  std::string why;
  EXPECT_TRUE(p->CheckInvariants(&why)) << why;
  p->EndPreload(2);
  EXPECT_EQ(p->ProtectedExperts(), 4);  // sequence 1 alone again: 4
  p->EndPreload(1);
  EXPECT_EQ(p->ProtectedExperts(), 0);
  // Speculative and Required slabs are never a preload's.
  auto q = Make(src, src.Plan(1, 2), OffloadOptions());
  ASSERT_NE(q, nullptr);
  auto order = q->BeginLayer(Phase::kDecode, 1, {4, 5});  // both slabs Required
  ASSERT_TRUE(order.ok());
  q->Preload(3, {{}, {0}, {1}});
  EXPECT_EQ(q->TakeRequestStats().preload_issued, 0u);
  EXPECT_EQ(q->ProtectedExperts(), 1);
  for (int e : *order) {
    ASSERT_TRUE(q->Acquire(1, e).ok());
    q->Release(1, e);
  }
  q->EndLayer(1);
}

// Thousands of random schedules (fixed seeds) with sequences starting and
// ending their preloads between steps: no expert used before its copy, none
// overwritten while pinned, no slot or copy leak, and bytes = demand misses +
// prefetches + preloads.
TEST(OffloadExpertProviderPreloadTest, RandomSchedulesKeepInvariants) {
  constexpr int kLayers = 4, kExperts = 6;
  FakeExpertSource fused(kLayers, kExperts, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  FakeExpertSource separate(kLayers, kExperts, kH, kI, ExpertWeights::Layout::kSeparate);
  const char* policies[] = {"lru", "lfu", "guarded"};
  for (int seed = 0; seed < 1500; ++seed) {
    std::mt19937 rng(seed);
    FakeExpertSource& src = seed % 2 ? fused : separate;
    const int pinned = static_cast<int>(rng() % 3);
    const int slabs = 1 + static_cast<int>(rng() % 8);
    OffloadOptions o;
    o.eviction = policies[rng() % 3];
    o.preload_share = 0.25 * (1 + rng() % 4);
    std::unique_ptr<ExpertPredictor> predictor;
    HistoryExpertPredictor* hist = nullptr;
    if (rng() % 2) {
      o.prefetch = "history";
      o.prefetch_count = 1 + static_cast<int>(rng() % 3);
      auto h = std::make_unique<HistoryExpertPredictor>(kLayers, kExperts, o.history_decay);
      hist = h.get();
      predictor = std::move(h);
    }
    if (seed % 100 == 0) o.copy_bandwidth_bytes_per_s = 2e6;
    auto p = Make(src, src.Plan(pinned, slabs), o, std::move(predictor));
    ASSERT_NE(p, nullptr);
    uint64_t offloaded_queries = 0;
    for (int step = 0; step < 6; ++step) {
      // Between steps: a sequence (re)starts or ends its preload.
      const uint64_t owner = 1 + rng() % 3;
      if (rng() % 3 == 0) {
        p->EndPreload(owner);
      } else {
        std::vector<std::vector<int>> preferred(kLayers);
        for (auto& ids : preferred) {
          for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
            ids.push_back(static_cast<int>(rng() % kExperts));
          }
        }
        p->Preload(owner, preferred);
      }
      for (int layer = 0; layer < kLayers; ++layer) {
        std::vector<int> all(kExperts);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(1 + rng() % kExperts);
        if (layer >= pinned) offloaded_queries += all.size();
        if (hist != nullptr) hist->Observe(layer, all);
        auto order = p->BeginLayer(step == 0 ? Phase::kPrefill : Phase::kDecode, layer, all);
        ASSERT_TRUE(order.ok()) << order.status();
        for (int e : *order) {
          auto w = p->Acquire(layer, e);
          ASSERT_TRUE(w.ok()) << "seed " << seed << ": " << w.status();
          ASSERT_TRUE(src.Holds(*w, layer, e)) << "seed " << seed;
          std::string why;
          ASSERT_TRUE(p->CheckInvariants(&why)) << "seed " << seed << ": " << why;
          ASSERT_TRUE(src.Holds(*w, layer, e)) << "overwritten while pinned, seed " << seed;
          p->Release(layer, e);
        }
        p->EndLayer(layer);
      }
      ASSERT_LE(p->ProtectedExperts(), static_cast<int64_t>(o.preload_share * slabs + 1e-9))
          << "seed " << seed;
    }
    for (uint64_t owner = 1; owner <= 3; ++owner) p->EndPreload(owner);
    EXPECT_EQ(p->ProtectedExperts(), 0);
    p->WaitForTransfers();
    std::string why;
    ASSERT_TRUE(p->CheckInvariants(&why)) << "seed " << seed << ": " << why;
    const OffloadStats s = p->TakeRequestStats();
    ASSERT_EQ(s.prefetch_needed, offloaded_queries);
    ASSERT_LE(s.preload_used, s.preload_issued);
    ASSERT_EQ(s.bytes_h2d,
              (s.prefetch_needed - s.prefetch_recalled + s.prefetch_issued + s.preload_issued) *
                  p->format().bytes)
        << "seed " << seed;
  }
}

}  // namespace
}  // namespace vismoe
