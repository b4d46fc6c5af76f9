// OffloadExpertProvider over synthetic experts: pinned prefix, demand fetch,
// prefetch, errors, and thousands of random schedules (fixed seeds) checking
// that no expert is used before its copy completed (its bytes are exact when
// acquired and still exact at release), that no Required expert is evicted
// (every declared expert is copied at most once per layer: bytes moved equal
// misses + prefetches), and that no slot or copy leaks.
#include "engine/offload/offload_expert_provider.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/policy/history_expert_predictor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/offload/counting_host_allocator.h"
#include "tests/engine/offload/fake_expert_source.h"
#include "tests/engine/offload/flaky_copy_backend.h"

namespace vismoe {
namespace {

using testing::FakeExpertSource;
using ::testing::HasSubstr;

// Sums what the provider reports through StatsSink.
class CountingSink final : public NullStatsSink {
 public:
  void OnExpertQuery(Phase, int, bool hit) override {
    ++queries;
    hits += hit ? 1 : 0;
  }
  void OnPrefetchNeeded(int, bool recalled) override {
    ++needed;
    this->recalled += recalled ? 1 : 0;
  }
  void OnBytesHostToDevice(uint64_t b) override { bytes += b; }
  void SetSlotCount(SlotState s, int64_t n) override { slots[static_cast<int>(s)] = n; }
  void SetMemoryRegion(std::string_view r, int64_t b) override {
    if (r == "slab_cache") slab_bytes = b;
  }
  uint64_t queries = 0, hits = 0, needed = 0, recalled = 0, bytes = 0;
  int64_t slots[4] = {0, 0, 0, 0};
  int64_t slab_bytes = 0;
};

constexpr int kH = 8;
constexpr int kI = 4;

// A provider; with o.prefetch == "history" it owns a HistoryExpertPredictor,
// returned through `history`, which the caller feeds as the forward pass would.
std::unique_ptr<OffloadExpertProvider> Make(FakeExpertSource& src, int layers_top_k,
                                            const MemoryPlan& plan, const OffloadOptions& o,
                                            StatsSink* sink = nullptr,
                                            HistoryExpertPredictor** history = nullptr) {
  const TextConfig config = src.Config(layers_top_k);
  std::unique_ptr<ExpertPredictor> predictor;
  if (o.prefetch == "history") {
    auto h = std::make_unique<HistoryExpertPredictor>(config.num_hidden_layers, config.num_experts,
                                                      o.history_decay);
    if (history != nullptr) *history = h.get();
    predictor = std::move(h);
  }
  auto p = OffloadExpertProvider::Create(src, config, plan, o, sink, std::move(predictor));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(OffloadExpertProviderTest, PinnedPrefixAndDemandFetch) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  CountingSink sink;
  auto p = Make(src, 2, src.Plan(/*pinned=*/1, /*slabs=*/2), OffloadOptions(), &sink);
  ASSERT_NE(p, nullptr);
  // Layer 0 is pinned: always a hit, served from the prefix.
  const std::vector<int> e0 = {3, 1};
  auto order = p->BeginLayer(Phase::kPrefill, 0, e0);
  ASSERT_TRUE(order.ok()) << order.status();
  for (int e : *order) {
    auto w = p->Acquire(0, e);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(src.Holds(*w, 0, e));
    p->Release(0, e);
  }
  p->EndLayer(0);
  // Layer 1: three experts through two slabs.
  const std::vector<int> e1 = {0, 2, 3};
  order = p->BeginLayer(Phase::kPrefill, 1, e1);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(*order, e1);
  for (int e : *order) {
    auto w = p->Acquire(1, e);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(src.Holds(*w, 1, e));
    p->Release(1, e);
  }
  p->EndLayer(1);
  // Again: 3 and 2 are still cached (LRU evicted 0), 0 misses; hits come first.
  order = p->BeginLayer(Phase::kDecode, 1, e1);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(*order, (std::vector<int>{2, 3, 0}));
  for (int e : *order) {
    auto w = p->Acquire(1, e);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(src.Holds(*w, 1, e));
    p->Release(1, e);
  }
  p->EndLayer(1);
  const OffloadStats s = p->TakeRequestStats();
  EXPECT_EQ(s.cache_queries, 8u);
  EXPECT_EQ(s.cache_hits, 4u);
  EXPECT_EQ(s.prefetch_needed, 6u);
  EXPECT_EQ(s.prefetch_recalled, 2u);
  EXPECT_EQ(s.bytes_h2d, 4u * p->format().bytes);
  EXPECT_EQ(p->TakeRequestStats().cache_queries, 0u);  // reset
  EXPECT_EQ(sink.queries, s.cache_queries);
  EXPECT_EQ(sink.hits, s.cache_hits);
  EXPECT_EQ(sink.needed, s.prefetch_needed);
  EXPECT_EQ(sink.recalled, s.prefetch_recalled);
  EXPECT_EQ(sink.bytes, s.bytes_h2d);
  EXPECT_EQ(sink.slab_bytes, static_cast<int64_t>(2 * p->format().bytes));
  EXPECT_EQ(sink.slots[static_cast<int>(SlotState::kExpired)], 2);
  EXPECT_EQ(sink.slots[static_cast<int>(SlotState::kRequired)], 0);
}

// The prefix is packed and uploaded one layer at a time (so host memory never
// holds a second copy of it whole): one copy per layer, each into its own place.
TEST(OffloadExpertProviderTest, EveryPinnedLayerUploadedIntoItsOwnPlace) {
  FakeExpertSource src(4, 3, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  testing::FlakyCopyBackend backend;
  OffloadDevice device;
  device.copy = &backend;
  auto created = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(3, 1),
                                               OffloadOptions(), nullptr, nullptr, device);
  ASSERT_TRUE(created.ok()) << created.status();
  OffloadExpertProvider& p = **created;
  EXPECT_EQ(backend.copies.load(), 3);
  for (int layer = 0; layer < 3; ++layer) {
    const std::vector<int> all = {0, 1, 2};
    auto order = p.BeginLayer(Phase::kPrefill, layer, all);
    ASSERT_TRUE(order.ok()) << order.status();
    for (int e : *order) {
      auto w = p.Acquire(layer, e);
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_TRUE(src.Holds(*w, layer, e)) << "layer " << layer << " expert " << e;
      p.Release(layer, e);
    }
    p.EndLayer(layer);
  }
  EXPECT_EQ(p.TakeRequestStats().bytes_h2d, 0u);  // all served from the prefix
}

// Served from a mapped store (no packed host copy): the same experts, the same
// counters as from a packed one; the prefix is gathered tensor by tensor.
TEST(OffloadExpertProviderTest, MappedStoreServesTheSameExperts) {
  OffloadStats stats[2];
  for (bool map : {false, true}) {
    FakeExpertSource src(4, 3, kH, kI, ExpertWeights::Layout::kFusedTransposed);
    src.stable_views = true;
    testing::FlakyCopyBackend backend;
    OffloadDevice device;
    device.copy = &backend;
    OffloadOptions o;
    o.host_experts = map ? "mapped" : "packed";
    auto created = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2), o, nullptr,
                                                 nullptr, device);
    ASSERT_TRUE(created.ok()) << created.status();
    OffloadExpertProvider& p = **created;
    // One copy of the packed layer, or one per tensor (3 experts x 2 tensors).
    EXPECT_EQ(backend.copies.load(), map ? 6 : 1);
    for (int step = 0; step < 2; ++step) {
      for (int layer = 0; layer < 4; ++layer) {
        const std::vector<int> experts = {(layer + step) % 3, (layer + 2 * step + 1) % 3};
        auto order = p.BeginLayer(Phase::kDecode, layer, experts);
        ASSERT_TRUE(order.ok()) << order.status();
        for (int e : *order) {
          auto w = p.Acquire(layer, e);
          ASSERT_TRUE(w.ok()) << w.status();
          EXPECT_TRUE(src.Holds(*w, layer, e)) << "map " << map << " layer " << layer << " " << e;
          p.Release(layer, e);
        }
        p.EndLayer(layer);
      }
    }
    stats[map] = p.TakeRequestStats();
  }
  EXPECT_GT(stats[1].bytes_h2d, 0u);
  EXPECT_EQ(stats[1].bytes_h2d, stats[0].bytes_h2d);
  EXPECT_EQ(stats[1].cache_hits, stats[0].cache_hits);
  EXPECT_EQ(stats[1].cache_queries, stats[0].cache_queries);
}

// host_experts: auto packs a page-locked copy only where it fits the host's
// available memory with room to spare (unknown memory: packs, as before);
// mapped and packed force a side; a dtype conversion packs whatever the mode,
// into pageable memory where mapping was chosen (a page-locked copy was not
// wanted or would not fit). Either way the same experts come out.
TEST(OffloadExpertProviderTest, HostExpertsModeChoosesMappedOrPacked) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  struct Case {
    const char* mode;
    int64_t available;
    std::optional<DType> dtype;
    bool mapped;
  };
  for (const Case& c : {Case{"auto", 1024 * kGiB, std::nullopt, false},
                        Case{"auto", 2 * kGiB, std::nullopt, true},
                        Case{"auto", 0, std::nullopt, false},
                        Case{"mapped", 1024 * kGiB, std::nullopt, true},
                        Case{"packed", 2 * kGiB, std::nullopt, false},
                        Case{"mapped", 2 * kGiB, DType::kBF16, false}}) {
    SCOPED_TRACE(::testing::Message() << c.mode << " available " << c.available
                                      << (c.dtype ? " converted" : ""));
    FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
    src.stable_views = true;
    testing::CountingHostAllocator page_locked;
    OffloadDevice device;
    device.host_allocator = &page_locked;
    device.host_memory_available = c.available;
    device.expert_dtype = c.dtype;
    OffloadOptions o;
    o.host_experts = c.mode;
    auto created = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2), o, nullptr,
                                                 nullptr, device);
    ASSERT_TRUE(created.ok()) << created.status();
    OffloadExpertProvider& p = **created;
    EXPECT_EQ(p.host_experts_mapped(), c.mapped);
    EXPECT_EQ(page_locked.bytes_total, c.dtype.has_value() ? 0 : p.host_store_bytes());
    EXPECT_EQ(p.host_store_bytes() > 0, !c.mapped);
    for (int layer : {1, 2}) {
      auto order = p.BeginLayer(Phase::kDecode, layer, std::vector<int>{0, 3});
      ASSERT_TRUE(order.ok()) << order.status();
      for (int e : *order) {
        auto w = p.Acquire(layer, e);
        ASSERT_TRUE(w.ok()) << w.status();
        EXPECT_TRUE(src.Holds(*w, layer, e)) << layer << "/" << e;
        p.Release(layer, e);
      }
      p.EndLayer(layer);
    }
  }
  OffloadOptions bad;
  bad.host_experts = "pinned";
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  auto refused = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2), bad, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("host experts must be one of auto, mapped, packed; got 'pinned'"));
}

// A source whose layer 1 reports its experts with other shapes (same bytes).
class ReshapedLayerSource final : public ExpertProvider {
 public:
  explicit ReshapedLayerSource(FakeExpertSource& inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int>> BeginLayer(Phase ph, int l, absl::Span<const int> e) override {
    return inner_.BeginLayer(ph, l, e);
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    absl::StatusOr<ExpertWeights> w = inner_.Acquire(layer, expert);
    if (w.ok() && layer == 1) {
      std::swap(w->gate_up.shape[0], w->gate_up.shape[1]);
      std::swap(w->down.shape[0], w->down.shape[1]);
    }
    return w;
  }
  void Release(int l, int e) override { inner_.Release(l, e); }
  void EndLayer(int l) override { inner_.EndLayer(l); }

 private:
  FakeExpertSource& inner_;
};

TEST(OffloadExpertProviderTest, PinnedLayersOfDifferentShapesAreRefused) {
  FakeExpertSource inner(3, 2, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  ReshapedLayerSource src(inner);
  auto created = OffloadExpertProvider::Create(src, inner.Config(1), inner.Plan(2, 1),
                                               OffloadOptions(), nullptr, nullptr);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("layer 1's experts differ"));
}

// Ready() is the CUDA decoder's hint for launching experts together: true
// exactly when Acquire would not wait for a copy.
TEST(OffloadExpertProviderTest, ReadyMeansResidentAndCopied) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  auto p = Make(src, 2, src.Plan(/*pinned=*/1, /*slabs=*/2), OffloadOptions());
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->Ready(0, 2));  // the pinned prefix, any time
  EXPECT_FALSE(p->Ready(1, 0));  // never copied
  EXPECT_FALSE(p->Ready(1, 99));
  EXPECT_FALSE(p->Ready(7, 0));
  const std::vector<int> e1 = {0, 2, 3};
  ASSERT_TRUE(p->BeginLayer(Phase::kPrefill, 1, e1).ok());
  p->WaitForTransfers();
  // Two slabs: 0 and 2 landed, 3 waits for a slab.
  EXPECT_TRUE(p->Ready(1, 0));
  EXPECT_TRUE(p->Ready(1, 2));
  EXPECT_FALSE(p->Ready(1, 3));
  ASSERT_TRUE(p->Acquire(1, 0).ok());
  p->Release(1, 0);  // frees a slab: 3 is copied into it
  p->WaitForTransfers();
  EXPECT_TRUE(p->Ready(1, 3));
  EXPECT_FALSE(p->Ready(1, 0));  // its slab went to 3
  for (int e : {2, 3}) {
    ASSERT_TRUE(p->Acquire(1, e).ok());
    p->Release(1, e);
  }
  p->EndLayer(1);
}

// A failed copy fails the step that needs it with the copy's error (not
// "cancelled", which would read as a shutdown), frees its slab, and the
// provider serves the next step once copies work again.
TEST(OffloadExpertProviderTest, FailedCopyFailsTheStepAndTheNextOneWorks) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  testing::FlakyCopyBackend backend;
  OffloadDevice device;
  device.copy = &backend;
  auto created = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2),
                                               OffloadOptions(), nullptr, nullptr, device);
  ASSERT_TRUE(created.ok()) << created.status();
  OffloadExpertProvider& p = **created;
  const std::vector<int> e1 = {0, 2};
  backend.FailFromNow(true);
  ASSERT_TRUE(p.BeginLayer(Phase::kPrefill, 1, e1).ok());
  const absl::StatusOr<ExpertWeights> w = p.Acquire(1, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable) << w.status();
  EXPECT_NE(w.status().message().find("device lost"), std::string::npos) << w.status();
  p.EndLayer(1);
  p.WaitForTransfers();
  std::string why;
  EXPECT_TRUE(p.CheckInvariants(&why)) << why;

  backend.FailFromNow(false);
  auto order = p.BeginLayer(Phase::kDecode, 1, e1);
  ASSERT_TRUE(order.ok()) << order.status();
  for (int e : *order) {
    auto got = p.Acquire(1, e);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(src.Holds(*got, 1, e));
    p.Release(1, e);
  }
  p.EndLayer(1);
  EXPECT_TRUE(p.CheckInvariants(&why)) << why;
}

// OffloadDevice::expert_dtype: the pinned prefix and the slabs both hold the
// converted experts (the CUDA backend's F16/F32 checkpoints run as bf16).
TEST(OffloadExpertProviderTest, ExpertsConvertedToTheDeviceDtype) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kSeparate);
  OffloadDevice device;
  device.expert_dtype = DType::kBF16;
  auto created = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2),
                                               OffloadOptions(), nullptr, nullptr, device);
  ASSERT_TRUE(created.ok()) << created.status();
  OffloadExpertProvider& p = **created;
  EXPECT_EQ(p.format().dtype, DType::kBF16);
  for (int layer : {0, 1, 2}) {
    const std::vector<int> ex = {1, 3};
    auto order = p.BeginLayer(Phase::kPrefill, layer, ex);
    ASSERT_TRUE(order.ok()) << order.status();
    for (int e : *order) {
      auto w = p.Acquire(layer, e);
      ASSERT_TRUE(w.ok()) << w.status();
      EXPECT_EQ(w->down.dtype, DType::kBF16);
      EXPECT_TRUE(src.Holds(*w, layer, e)) << layer << "/" << e;
      p.Release(layer, e);
    }
    p.EndLayer(layer);
  }
}

TEST(OffloadExpertProviderTest, ContractViolationsAreErrors) {
  FakeExpertSource src(2, 4, kH, kI, ExpertWeights::Layout::kSeparate);
  auto p = Make(src, 2, src.Plan(0, 1), OffloadOptions());
  ASSERT_NE(p, nullptr);
  const std::vector<int> two = {1, 2};
  EXPECT_FALSE(p->BeginLayer(Phase::kPrefill, 0, std::vector<int>{1, 1}).ok());
  EXPECT_FALSE(p->BeginLayer(Phase::kPrefill, 0, std::vector<int>{4}).ok());
  ASSERT_TRUE(p->BeginLayer(Phase::kPrefill, 0, two).ok());
  EXPECT_FALSE(p->BeginLayer(Phase::kPrefill, 1, two).ok());  // layer 0 not ended
  EXPECT_FALSE(p->Acquire(0, 3).ok());                        // not declared
  auto w = p->Acquire(0, 1);
  ASSERT_TRUE(w.ok());
  // One slab, pinned: the second expert can never get one.
  auto stuck = p->Acquire(0, 2);
  ASSERT_FALSE(stuck.ok());
  EXPECT_EQ(stuck.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(stuck.status().message(), HasSubstr("1 slabs"));
  p->Release(0, 1);
  w = p->Acquire(0, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(src.Holds(*w, 0, 2));
  p->Release(0, 2);
  p->EndLayer(0);
  OffloadOptions bad;
  bad.eviction = "fifo";
  EXPECT_FALSE(
      OffloadExpertProvider::Create(src, src.Config(2), src.Plan(0, 1), bad, nullptr).ok());
  bad = OffloadOptions();
  bad.prefetch = "oracle";
  EXPECT_FALSE(
      OffloadExpertProvider::Create(src, src.Config(2), src.Plan(0, 1), bad, nullptr).ok());
}

TEST(OffloadExpertProviderTest, HistoryPrefetchIsUsed) {
  FakeExpertSource src(2, 8, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.prefetch = "history";
  o.prefetch_count = 2;
  HistoryExpertPredictor* hist = nullptr;
  auto p = Make(src, 2, src.Plan(0, 3), o, nullptr, &hist);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(hist, nullptr);
  const std::vector<int> a = {1, 2}, b = {5, 6};
  for (int step = 0; step < 4; ++step) {
    for (int layer = 0; layer < 2; ++layer) {
      const std::vector<int>& ex = layer == 0 ? a : b;
      hist->Observe(layer, ex);  // OnRouting comes before BeginLayer
      auto order = p->BeginLayer(Phase::kDecode, layer, ex);
      ASSERT_TRUE(order.ok());
      for (int e : *order) {
        auto w = p->Acquire(layer, e);
        ASSERT_TRUE(w.ok());
        EXPECT_TRUE(src.Holds(*w, layer, e));
        p->Release(layer, e);
      }
      p->EndLayer(layer);
    }
  }
  p->WaitForTransfers();
  const OffloadStats s = p->TakeRequestStats();
  EXPECT_GT(s.prefetch_issued, 0u);
  EXPECT_GT(s.prefetch_used, 0u);
  EXPECT_LE(s.prefetch_used, s.prefetch_issued);
  EXPECT_EQ(s.prefetch_needed, 16u);
  EXPECT_EQ(s.bytes_h2d,
            (s.prefetch_needed - s.prefetch_recalled + s.prefetch_issued) * p->format().bytes);
}

// A predictor that always says the same thing about one layer.
class ScriptedPredictor final : public ExpertPredictor {
 public:
  ScriptedPredictor(int layer, std::vector<std::pair<int, double>> says)
      : layer_(layer), says_(std::move(says)) {}
  const char* name() const override { return "scripted"; }
  void BeginRequest() override { ++requests; }
  std::vector<std::pair<int, double>> Predict(int target, int count) override {
    if (target != layer_) return {};
    auto out = says_;
    if (static_cast<int>(out.size()) > count) out.resize(count);
    return out;
  }
  void OnRouting(Phase, int, const float*, const RouterResult&) override {}
  int requests = 0;

 private:
  int layer_;
  std::vector<std::pair<int, double>> says_;
};

TEST(OffloadExpertProviderTest, PinnedPrefixPrefetchesFirstOffloadedLayer) {
  FakeExpertSource src(2, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.prefetch = "router-lookahead";  // any predictor kind; the predictor itself is given
  o.prefetch_count = 2;
  auto pred = std::make_unique<ScriptedPredictor>(
      1, std::vector<std::pair<int, double>>{{3, 0.9}, {2, 0.5}, {0, 0.1}});
  ScriptedPredictor* raw = pred.get();
  auto p = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2), o, nullptr,
                                         std::move(pred));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->observer(), raw);
  (*p)->BeginRequest();
  EXPECT_EQ(raw->requests, 1);
  const std::vector<int> e0 = {0, 1};
  ASSERT_TRUE((*p)->BeginLayer(Phase::kPrefill, 0, e0).ok());
  for (int e : e0) {
    ASSERT_TRUE((*p)->Acquire(0, e).ok());
    (*p)->Release(0, e);
  }
  (*p)->EndLayer(0);
  (*p)->WaitForTransfers();
  // Layer 1's top-2 (3, 2) were fetched while the pinned layer ran.
  const std::vector<int> e1 = {2, 3};
  auto order = (*p)->BeginLayer(Phase::kPrefill, 1, e1);
  ASSERT_TRUE(order.ok()) << order.status();
  for (int e : *order) {
    auto w = (*p)->Acquire(1, e);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(src.Holds(*w, 1, e));
    (*p)->Release(1, e);
  }
  (*p)->EndLayer(1);
  const OffloadStats s = (*p)->TakeRequestStats();
  EXPECT_EQ(s.prefetch_issued, 2u);
  EXPECT_EQ(s.prefetch_used, 2u);
  EXPECT_EQ(s.prefetch_needed, 2u);
  EXPECT_EQ(s.prefetch_recalled, 2u);
  EXPECT_EQ(s.bytes_h2d, 2u * (*p)->format().bytes);
}

// Guarded eviction keeps the Expired slab the predictor expects next; LRU
// (and guarded without a predictor) evicts it as the oldest, so it must be
// copied again (by prefetch or on demand).
TEST(OffloadExpertProviderTest, GuardedEvictionFollowsPredictedPriority) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kSeparate);
  auto copies_with = [&](const char* eviction, bool predictor) {
    OffloadOptions o;
    o.eviction = eviction;
    o.prefetch = predictor ? "router-lookahead" : "none";
    std::unique_ptr<ExpertPredictor> pred;
    if (predictor) {
      pred = std::make_unique<ScriptedPredictor>(2, std::vector<std::pair<int, double>>{{1, 1.0}});
    }
    auto p = OffloadExpertProvider::Create(src, src.Config(1), src.Plan(0, 2), o, nullptr,
                                           std::move(pred));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return uint64_t{0};
    // (2, 1) first, then layers 0 and 1 each need one slab, then (2, 1) again.
    const std::vector<std::pair<int, int>> schedule = {{2, 1}, {0, 0}, {1, 2}, {2, 1}};
    for (const auto& [layer, e] : schedule) {
      const std::vector<int> ex = {e};
      EXPECT_TRUE((*p)->BeginLayer(Phase::kDecode, layer, ex).ok());
      EXPECT_TRUE((*p)->Acquire(layer, e).ok());
      (*p)->Release(layer, e);
      (*p)->EndLayer(layer);
      (*p)->WaitForTransfers();
    }
    std::string why;
    EXPECT_TRUE((*p)->CheckInvariants(&why)) << why;
    return (*p)->TakeRequestStats().bytes_h2d / (*p)->format().bytes;
  };
  EXPECT_EQ(copies_with("guarded", true), 3u);
  EXPECT_EQ(copies_with("guarded", false), 4u);
  EXPECT_EQ(copies_with("lru", true), 4u);
}

// Says the same experts about every layer.
class EveryLayerPredictor final : public ExpertPredictor {
 public:
  explicit EveryLayerPredictor(std::vector<std::pair<int, double>> says) : says_(std::move(says)) {}
  const char* name() const override { return "every-layer"; }
  void BeginRequest() override {}
  std::vector<std::pair<int, double>> Predict(int, int count) override {
    auto out = says_;
    if (static_cast<int>(out.size()) > count) out.resize(count);
    return out;
  }
  void OnRouting(Phase, int, const float*, const RouterResult&) override {}

 private:
  std::vector<std::pair<int, double>> says_;
};

// The commit miss policy's view of a layer: pinned layers have everything;
// an offloaded one has what its slabs hold or are copying, and the
// predictor's choice from the last prefetch aimed at it -- also the experts
// that found no slab (so not available) -- cleared when demand left no room to
// prefetch.
TEST(OffloadExpertProviderTest, AvailabilityIsTheCacheAndThePredictorsChoice) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.prefetch = "router-lookahead";  // any kind; the predictor itself is given
  o.prefetch_count = 2;
  auto created = OffloadExpertProvider::Create(
      src, src.Config(2), src.Plan(/*pinned=*/1, /*slabs=*/1), o, nullptr,
      std::make_unique<EveryLayerPredictor>(
          std::vector<std::pair<int, double>>{{3, 0.9}, {2, 0.5}}));
  ASSERT_TRUE(created.ok()) << created.status();
  OffloadExpertProvider& p = **created;
  EXPECT_TRUE(p.Availability(0).all);
  ExpertAvailability a = p.Availability(1);
  EXPECT_FALSE(a.all);
  EXPECT_EQ(a.available, (std::vector<uint8_t>{0, 0, 0, 0}));
  EXPECT_TRUE(a.predicted.empty());  // nothing prefetched for it yet
  auto run = [&p](int layer, const std::vector<int>& experts) {
    auto order = p.BeginLayer(Phase::kDecode, layer, experts);
    ASSERT_TRUE(order.ok()) << order.status();
    for (int e : *order) {
      ASSERT_TRUE(p.Acquire(layer, e).ok());
      p.Release(layer, e);
    }
    p.EndLayer(layer);
  };
  // The pinned layer prefetches for layer 1: 3 into the one slab, 2 finds none.
  ASSERT_TRUE(p.BeginLayer(Phase::kDecode, 0, std::vector<int>{0}).ok());
  a = p.Availability(1);  // 3 is in flight or landed: available either way
  EXPECT_EQ(a.available, (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(a.predicted, (std::vector<int>{3, 2}));
  ASSERT_TRUE(p.Acquire(0, 0).ok());
  p.Release(0, 0);
  p.EndLayer(0);
  p.WaitForTransfers();
  run(1, {0, 1});  // demand waits for the slab: no prefetch for layer 2
  EXPECT_TRUE(p.Availability(2).predicted.empty());
  a = p.Availability(1);
  EXPECT_EQ(a.available, (std::vector<uint8_t>{0, 1, 0, 0}));  // the slab's last expert
  // Layer 2 with room: it prefetches for layer 1 (the next offloaded, wrapping).
  run(2, {1});
  EXPECT_EQ(p.Availability(1).predicted, (std::vector<int>{3, 2}));
  run(1, {});  // every expert skipped: room to prefetch 3 for layer 2
  a = p.Availability(2);
  EXPECT_EQ(a.predicted, (std::vector<int>{3, 2}));
  EXPECT_EQ(a.available, (std::vector<uint8_t>{0, 0, 0, 1}));
  run(2, {0, 1});  // pending demand: the choice for layer 1 is cleared
  EXPECT_TRUE(p.Availability(1).predicted.empty());
  std::string why;
  EXPECT_TRUE(p.CheckInvariants(&why)) << why;
}

TEST(OffloadExpertProviderTest, RandomSchedulesKeepInvariants) {
  constexpr int kLayers = 4, kExperts = 6;
  FakeExpertSource fused(kLayers, kExperts, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  FakeExpertSource separate(kLayers, kExperts, kH, kI, ExpertWeights::Layout::kSeparate);
  const char* policies[] = {"lru", "lfu", "guarded"};
  for (int seed = 0; seed < 2000; ++seed) {
    std::mt19937 rng(seed);
    FakeExpertSource& src = seed % 2 ? fused : separate;
    const int pinned = static_cast<int>(rng() % 3);
    const int slabs = 1 + static_cast<int>(rng() % 8);
    OffloadOptions o;
    o.eviction = policies[rng() % 3];
    o.prefetch = rng() % 2 ? "history" : "none";
    o.prefetch_count = 1 + static_cast<int>(rng() % 4);
    // A few schedules with a slow copy engine so Acquire really waits.
    if (seed % 100 == 0) o.copy_bandwidth_bytes_per_s = 2e6;
    HistoryExpertPredictor* hist = nullptr;
    auto p = Make(src, 3, src.Plan(pinned, slabs), o, nullptr, &hist);
    ASSERT_NE(p, nullptr);
    uint64_t offloaded_queries = 0;
    for (int step = 0; step < 4; ++step) {
      for (int layer = 0; layer < kLayers; ++layer) {
        std::vector<int> all(kExperts);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(1 + rng() % kExperts);
        if (layer >= pinned) offloaded_queries += all.size();
        if (hist != nullptr) hist->Observe(layer, all);
        auto order = p->BeginLayer(step == 0 ? Phase::kPrefill : Phase::kDecode, layer, all);
        ASSERT_TRUE(order.ok()) << order.status();
        std::vector<int> sorted = *order, want = all;
        std::sort(sorted.begin(), sorted.end());
        std::sort(want.begin(), want.end());
        ASSERT_EQ(sorted, want);
        for (int e : *order) {
          auto w = p->Acquire(layer, e);
          ASSERT_TRUE(w.ok()) << "seed " << seed << ": " << w.status();
          ASSERT_TRUE(src.Holds(*w, layer, e))
              << "seed " << seed << " layer " << layer << " e " << e;
          std::string why;
          ASSERT_TRUE(p->CheckInvariants(&why)) << "seed " << seed << ": " << why;
          ASSERT_TRUE(src.Holds(*w, layer, e)) << "overwritten while pinned, seed " << seed;
          p->Release(layer, e);
        }
        p->EndLayer(layer);
      }
    }
    p->WaitForTransfers();
    std::string why;
    ASSERT_TRUE(p->CheckInvariants(&why)) << "seed " << seed << ": " << why;
    const OffloadStats s = p->TakeRequestStats();
    ASSERT_EQ(s.prefetch_needed, offloaded_queries);
    ASSERT_EQ(s.bytes_h2d,
              (s.prefetch_needed - s.prefetch_recalled + s.prefetch_issued) * p->format().bytes)
        << "seed " << seed;
    if (o.prefetch == "none") {
      ASSERT_EQ(s.prefetch_issued, 0u);
    }
  }
}

// Static host placement (--host_moe_layers): every expert of the last N MoE
// layers comes from the host store through HostWeights, is never copied and
// cannot be acquired; plain BeginLayer (a caller that cannot compute on the
// host) still copies.
TEST(OffloadExpertProviderTest, StaticHostLayersAreComputedFromTheHostStore) {
  FakeExpertSource src(4, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  CountingSink sink;
  OffloadOptions o;
  o.host_moe_layers = 2;  // layers 2 and 3; layer 0 pinned, layer 1 on the device
  auto p = Make(src, 2, src.Plan(/*pinned=*/1, /*slabs=*/2), o, &sink);
  ASSERT_NE(p, nullptr);
  const std::vector<int> experts = {3, 0};
  auto plan = p->BeginRoutedLayer(Phase::kDecode, 2, experts, std::vector<int64_t>{1, 2});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->order, experts);
  ASSERT_EQ(plan->on_host, (std::vector<char>{1, 1}));
  for (int e : plan->order) {
    auto w = p->HostWeights(2, e);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(src.Holds(*w, 2, e));
    auto acquired = p->Acquire(2, e);
    EXPECT_EQ(acquired.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(acquired.status().message()), HasSubstr("computes on the host"));
  }
  p->EndLayer(2);
  // Outside a plan that put it there, no expert has host weights.
  EXPECT_EQ(p->HostWeights(2, 3).status().code(), absl::StatusCode::kFailedPrecondition);
  OffloadStats s = p->TakeRequestStats();
  EXPECT_EQ(s.cache_queries, 2u);
  EXPECT_EQ(s.cache_hits, 0u);
  EXPECT_EQ(s.prefetch_needed, 2u);
  EXPECT_EQ(s.prefetch_recalled, 0u);
  EXPECT_EQ(s.experts_host_computed, 2u);
  EXPECT_EQ(s.bytes_not_copied, 2u * p->format().bytes);
  EXPECT_EQ(s.bytes_h2d, 0u);
  EXPECT_EQ(sink.bytes, 0u);

  // Layer 1 is on the device: misses are copied whatever the token counts.
  plan = p->BeginRoutedLayer(Phase::kDecode, 1, experts, std::vector<int64_t>{1, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->on_host.empty());
  for (int e : plan->order) {
    auto w = p->Acquire(1, e);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(src.Holds(*w, 1, e));
    EXPECT_EQ(p->HostWeights(1, e).status().code(), absl::StatusCode::kFailedPrecondition);
    p->Release(1, e);
  }
  p->EndLayer(1);
  // Plain BeginLayer of a host layer copies.
  auto order = p->BeginLayer(Phase::kDecode, 3, {1});
  ASSERT_TRUE(order.ok()) << order.status();
  auto w = p->Acquire(3, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(src.Holds(*w, 3, 1));
  p->Release(3, 1);
  p->EndLayer(3);
  s = p->TakeRequestStats();
  EXPECT_EQ(s.experts_host_computed, 0u);
  EXPECT_EQ(s.bytes_h2d, 3u * p->format().bytes);
}

// Miss policy cpu: a miss goes to the host when the measured host time for its
// tokens is below its copy time (at the measured bandwidth, or the throttle
// before the first copy); hits never do; with fetch, no miss does.
TEST(OffloadExpertProviderTest, CpuMissPolicyWeighsHostTimeAgainstTheCopy) {
  FakeExpertSource src(2, 6, kH, kI, ExpertWeights::Layout::kSeparate);
  OffloadOptions o;
  o.miss_policy = "cpu";
  o.copy_bandwidth_bytes_per_s = 1e6;
  CountingSink sink;
  auto p = Make(src, 2, src.Plan(/*pinned=*/0, /*slabs=*/3), o, &sink);
  ASSERT_NE(p, nullptr);
  const double copy = static_cast<double>(p->format().bytes) / 1e6;
  EXPECT_DOUBLE_EQ(p->CopySecondsEstimate(), copy);
  EXPECT_FALSE(p->HostSecondsEstimate(1).has_value());
  // No sample yet: the one-row miss goes to the host to learn from, the
  // five-row one is copied. Host experts come before those being copied.
  auto plan =
      p->BeginRoutedLayer(Phase::kDecode, 0, std::vector<int>{4, 2}, std::vector<int64_t>{5, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->order, (std::vector<int>{2, 4}));
  EXPECT_EQ(plan->on_host, (std::vector<char>{1, 0}));
  auto host = p->HostWeights(0, 2);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(src.Holds(*host, 0, 2));
  p->OnHostExpertTime(1, copy / 100);
  auto w = p->Acquire(0, 4);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(src.Holds(*w, 0, 4));
  p->OnHostExpertTime(5, copy / 10);
  p->Release(0, 4);
  p->EndLayer(0);
  ASSERT_TRUE(p->HostSecondsEstimate(3).has_value());

  // Cheap on the host now: both misses go there; the cached 4 stays a hit.
  plan = p->BeginRoutedLayer(Phase::kDecode, 0, std::vector<int>{0, 4, 5},
                             std::vector<int64_t>{3, 2, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->order, (std::vector<int>{4, 0, 5}));
  EXPECT_EQ(plan->on_host, (std::vector<char>{0, 1, 1}));
  p->EndLayer(0);

  // Expensive for many rows: a 64-row miss is copied, a one-row miss is not.
  // Far above any copy time, however late the loaded machine wakes the copy thread.
  p->OnHostExpertTime(64, 100.0);
  EXPECT_GT(*p->HostSecondsEstimate(64), copy);
  plan =
      p->BeginRoutedLayer(Phase::kPrefill, 1, std::vector<int>{1, 3}, std::vector<int64_t>{64, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->order, (std::vector<int>{3, 1}));
  EXPECT_EQ(plan->on_host, (std::vector<char>{1, 0}));
  w = p->Acquire(1, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  p->Release(1, 1);
  p->EndLayer(1);
  p->WaitForTransfers();
  const OffloadStats s = p->TakeRequestStats();
  EXPECT_EQ(s.experts_host_computed, 4u);
  EXPECT_EQ(s.bytes_not_copied, 4u * p->format().bytes);
  EXPECT_EQ(s.bytes_h2d, 2u * p->format().bytes);
  EXPECT_EQ(s.cache_queries, 7u);
  EXPECT_EQ(s.cache_hits, 1u);
  // The copies measured the bandwidth (the throttle bounds it).
  EXPECT_GT(p->CopySecondsEstimate(), 0.0);
  EXPECT_LE(static_cast<double>(p->format().bytes) / p->CopySecondsEstimate(), 1e6 * 1.01);
}

TEST(OffloadExpertProviderTest, FetchPolicyOrUnknownBandwidthKeepsMissesOnTheDevice) {
  FakeExpertSource src(2, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  for (const char* policy : {"fetch", "cpu"}) {
    SCOPED_TRACE(policy);
    OffloadOptions o;
    o.miss_policy = policy;
    o.copy_bandwidth_bytes_per_s = std::string(policy) == "fetch" ? 1e6 : 0;  // 0: unknown
    auto p = Make(src, 2, src.Plan(0, 2), o);
    ASSERT_NE(p, nullptr);
    p->OnHostExpertTime(1, 1e-9);  // ignored by fetch; cpu has no copy time to weigh it against
    EXPECT_EQ(p->HostSecondsEstimate(1).has_value(), std::string(policy) == "cpu");
    auto plan =
        p->BeginRoutedLayer(Phase::kDecode, 0, std::vector<int>{1}, std::vector<int64_t>{1});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->on_host.empty());
    auto w = p->Acquire(0, 1);
    ASSERT_TRUE(w.ok()) << w.status();
    p->Release(0, 1);
    p->EndLayer(0);
    EXPECT_EQ(p->TakeRequestStats().experts_host_computed, 0u);
  }
}

TEST(OffloadExpertProviderTest, BadHostExecutionOptionsAndCallsAreErrors) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.miss_policy = "sometimes";
  auto bad = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2), o, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("miss policy must be one of fetch, commit, cpu; got 'sometimes'"));
  o.miss_policy = "cpu";
  o.host_moe_layers = 3;  // only 2 are outside the pinned prefix
  bad = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2), o, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("host_moe_layers=3: must be in [0, 2], the MoE layers outside the pinned "
                        "prefix of 1"));
  o.host_moe_layers = -1;
  EXPECT_FALSE(OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2), o, nullptr).ok());
  o.host_moe_layers = 0;
  auto p = Make(src, 2, src.Plan(1, 2), o);
  ASSERT_NE(p, nullptr);
  auto plan =
      p->BeginRoutedLayer(Phase::kDecode, 1, std::vector<int>{0, 1}, std::vector<int64_t>{1});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  plan = p->BeginRoutedLayer(Phase::kDecode, 1, std::vector<int>{0}, std::vector<int64_t>{0});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  // A pinned layer puts nothing on the host.
  plan = p->BeginRoutedLayer(Phase::kDecode, 0, std::vector<int>{0}, std::vector<int64_t>{1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->on_host.empty());
}

// Random schedules with host execution: the plan is a permutation of the
// declared experts, host experts come from the store with exact bytes and are
// never copied (bytes moved = copied misses + prefetches), and no slot or copy
// leaks.
TEST(OffloadExpertProviderTest, RandomSchedulesWithHostExecutionKeepInvariants) {
  constexpr int kLayers = 4, kExperts = 6;
  FakeExpertSource src(kLayers, kExperts, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  src.stable_views = true;  // mapped and packed stores alike
  for (int seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(seed);
    const int pinned = static_cast<int>(rng() % 3);
    OffloadOptions o;
    o.eviction = rng() % 2 ? "lru" : "guarded";
    o.prefetch = rng() % 2 ? "history" : "none";
    o.miss_policy = rng() % 4 ? "cpu" : "fetch";
    o.host_moe_layers = static_cast<int>(rng() % (kLayers - pinned + 1));
    o.host_experts = rng() % 2 ? "mapped" : "packed";
    o.copy_bandwidth_bytes_per_s = 1e9;
    HistoryExpertPredictor* hist = nullptr;
    auto p = Make(src, 3, src.Plan(pinned, 1 + static_cast<int>(rng() % 6)), o, nullptr, &hist);
    ASSERT_NE(p, nullptr);
    uint64_t host_layer_queries = 0;
    for (int step = 0; step < 5; ++step) {
      for (int layer = 0; layer < kLayers; ++layer) {
        std::vector<int> all(kExperts);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(1 + rng() % kExperts);
        std::vector<int64_t> tokens(all.size());
        for (int64_t& t : tokens) t = 1 + static_cast<int64_t>(rng() % 40);
        if (layer >= kLayers - o.host_moe_layers) host_layer_queries += all.size();
        if (hist != nullptr) hist->Observe(layer, all);
        auto plan = p->BeginRoutedLayer(Phase::kDecode, layer, all, tokens);
        ASSERT_TRUE(plan.ok()) << plan.status();
        std::vector<int> sorted = plan->order, want = all;
        std::sort(sorted.begin(), sorted.end());
        std::sort(want.begin(), want.end());
        ASSERT_EQ(sorted, want);
        for (size_t i = 0; i < plan->order.size(); ++i) {
          const int e = plan->order[i];
          if (plan->OnHost(i)) {
            auto w = p->HostWeights(layer, e);
            ASSERT_TRUE(w.ok()) << "seed " << seed << ": " << w.status();
            ASSERT_TRUE(src.Holds(*w, layer, e)) << "seed " << seed;
            // Random measured times: some cheap, some dearer than a copy.
            p->OnHostExpertTime(tokens[0], (rng() % 2 ? 1e-9 : 1e-3));
            continue;
          }
          auto w = p->Acquire(layer, e);
          ASSERT_TRUE(w.ok()) << "seed " << seed << ": " << w.status();
          ASSERT_TRUE(src.Holds(*w, layer, e)) << "seed " << seed;
          p->OnHostExpertTime(1 + static_cast<int64_t>(rng() % 40), (rng() % 2 ? 1e-9 : 1e-3));
          p->Release(layer, e);
        }
        p->EndLayer(layer);
        std::string why;
        ASSERT_TRUE(p->CheckInvariants(&why)) << "seed " << seed << ": " << why;
      }
    }
    p->WaitForTransfers();
    const OffloadStats s = p->TakeRequestStats();
    ASSERT_GE(s.experts_host_computed, host_layer_queries) << "seed " << seed;
    if (o.miss_policy == "fetch") {
      ASSERT_EQ(s.experts_host_computed, host_layer_queries);
    }
    ASSERT_EQ(s.bytes_not_copied, s.experts_host_computed * p->format().bytes);
    ASSERT_EQ(s.bytes_h2d, (s.prefetch_needed - s.prefetch_recalled - s.experts_host_computed +
                            s.prefetch_issued) *
                               p->format().bytes)
        << "seed " << seed;
  }
}

}  // namespace
}  // namespace vismoe

namespace vismoe {
namespace {

// An Acquire waiting on a copy that takes hours (1 byte/s) leaves with
// Cancelled once the step's interrupt says every sequence wants to stop, and
// not before; cleared, the provider serves the next step as usual (the
// cancelled wait released nothing it had not taken).
TEST(OffloadExpertProviderTest, StepInterruptEndsACopyWait) {
  FakeExpertSource src(2, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.copy_bandwidth_bytes_per_s = 1;
  auto p = Make(src, 2, src.Plan(/*pinned=*/0, /*slabs=*/4), o);
  ASSERT_NE(p, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> polls{0};
  p->SetStepInterrupt([&] {
    ++polls;
    return stop.load();
  });
  ASSERT_TRUE(p->BeginLayer(Phase::kDecode, 0, std::vector<int>{1}).ok());
  absl::Status got;
  std::thread waiter([&] { got = p->Acquire(0, 1).status(); });
  // Polled while it waits, and still waiting.
  while (polls.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  waiter.join();
  EXPECT_EQ(got.code(), absl::StatusCode::kCancelled) << got;
  EXPECT_THAT(std::string(got.message()), ::testing::HasSubstr("cancelled or expired"));
  p->EndLayer(0);
  p->SetStepInterrupt(nullptr);
  // The copy goes on in the background; nothing is pinned or Required.
  ASSERT_TRUE(p->BeginLayer(Phase::kDecode, 1, std::vector<int>{2}).ok());
  EXPECT_FALSE(p->Ready(1, 2));
  p->EndLayer(1);
}

}  // namespace
}  // namespace vismoe
