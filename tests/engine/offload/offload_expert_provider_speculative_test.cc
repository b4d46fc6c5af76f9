// OffloadExpertProvider's part in speculative execution
// (engine/offload/offload_expert_provider_speculative.cc): AcquireIfResident
// pins a landed slab of a layer ahead without a lookup or a state change, a
// pinned-prefix expert always; an expert not cached or still copying, or one
// of the running layer, is refused; a pinned slab is never evicted, and its
// release lets a waiting demand miss in; with a one-slab cache the running
// layer holds the slab and nothing ahead is usable, without blocking progress.
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/offload/offload_expert_provider.h"
#include "gtest/gtest.h"
#include "tests/engine/offload/fake_expert_source.h"

namespace vismoe {
namespace {

using testing::FakeExpertSource;

constexpr int kH = 8;
constexpr int kI = 4;

// A copy backend whose copies wait while the gate is closed (it starts open:
// Create copies the pinned prefix through it).
class GatedCopyBackend final : public CopyBackend {
 public:
  absl::Status Copy(void* dst, const void* src, size_t bytes) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  const char* name() const override { return "gated"; }
  void Set(bool open) {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = open;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

std::unique_ptr<OffloadExpertProvider> Make(FakeExpertSource& src, const MemoryPlan& plan,
                                            CopyBackend* copy = nullptr) {
  OffloadDevice device;
  device.copy = copy;
  auto p = OffloadExpertProvider::Create(src, src.Config(2), plan, OffloadOptions(), nullptr,
                                         nullptr, device);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// Runs `layer` over `experts` the way the forward pass does.
void RunLayer(OffloadExpertProvider& p, int layer, const std::vector<int>& experts) {
  auto order = p.BeginLayer(Phase::kDecode, layer, experts);
  ASSERT_TRUE(order.ok()) << order.status();
  for (int e : *order) {
    ASSERT_TRUE(p.Acquire(layer, e).ok());
    p.Release(layer, e);
  }
  p.EndLayer(layer);
}

bool Consistent(const OffloadExpertProvider& p) {
  std::string why;
  const bool ok = p.CheckInvariants(&why);
  EXPECT_TRUE(ok) << why;
  return ok;
}

TEST(OffloadSpeculativeTest, LandedSlabsAndThePinnedPrefixOnlyWithoutALookup) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  auto p = Make(src, src.Plan(/*pinned=*/1, /*slabs=*/4));
  ASSERT_NE(p, nullptr);
  RunLayer(*p, 2, {0, 1});  // layer 2's experts 0 and 1 land and expire
  p->WaitForTransfers();
  p->TakeRequestStats();
  ASSERT_TRUE(p->BeginLayer(Phase::kDecode, 1, std::vector<int>{3}).ok());
  auto ahead = p->AcquireIfResident(2, 0);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  EXPECT_TRUE(src.Holds(*ahead, 2, 0));
  EXPECT_EQ(p->AcquireIfResident(2, 3).status().code(), absl::StatusCode::kNotFound);
  auto pinned = p->AcquireIfResident(0, 2);  // the pinned prefix: always usable
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_TRUE(src.Holds(*pinned, 0, 2));
  EXPECT_EQ(p->AcquireIfResident(1, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);  // the running layer: Acquire
  EXPECT_EQ(p->AcquireIfResident(5, 0).status().code(), absl::StatusCode::kInvalidArgument);
  p->ReleaseResident(2, 0);
  p->ReleaseResident(0, 2);
  ASSERT_TRUE(p->Acquire(1, 3).ok());
  p->Release(1, 3);
  p->EndLayer(1);
  const OffloadStats s = p->TakeRequestStats();
  EXPECT_EQ(s.cache_queries, 1u);  // layer 1's expert 3 only
  EXPECT_TRUE(Consistent(*p));
  // Its state did not change: layer 2's expert 0 is still a hit.
  RunLayer(*p, 2, {0});
  EXPECT_EQ(p->TakeRequestStats().cache_hits, 1u);
}

TEST(OffloadSpeculativeTest, AnExpertStillCopyingIsNotUsable) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  GatedCopyBackend gate;
  auto p = Make(src, src.Plan(/*pinned=*/1, /*slabs=*/4), &gate);
  ASSERT_NE(p, nullptr);
  gate.Set(false);
  ASSERT_TRUE(p->BeginLayer(Phase::kDecode, 2, std::vector<int>{1}).ok());
  p->EndLayer(2);  // its copy is still in flight
  ASSERT_TRUE(p->BeginLayer(Phase::kDecode, 1, std::vector<int>{0}).ok());
  const absl::Status copying = p->AcquireIfResident(2, 1).status();
  EXPECT_EQ(copying.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(copying.message().find("still copying"), absl::string_view::npos) << copying;
  gate.Set(true);
  p->WaitForTransfers();
  auto landed = p->AcquireIfResident(2, 1);
  ASSERT_TRUE(landed.ok()) << landed.status();
  EXPECT_TRUE(src.Holds(*landed, 2, 1));
  p->ReleaseResident(2, 1);
  ASSERT_TRUE(p->Acquire(1, 0).ok());
  p->Release(1, 0);
  p->EndLayer(1);
  EXPECT_TRUE(Consistent(*p));
}

TEST(OffloadSpeculativeTest, APinnedSlabIsNotEvictedAndItsReleaseLetsDemandIn) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  auto p = Make(src, src.Plan(/*pinned=*/1, /*slabs=*/1));
  ASSERT_NE(p, nullptr);
  RunLayer(*p, 2, {0});
  p->WaitForTransfers();
  auto ahead = p->AcquireIfResident(2, 0);
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  // Layer 1's miss finds the only slab pinned: it waits for it.
  ASSERT_TRUE(p->BeginLayer(Phase::kDecode, 1, std::vector<int>{3}).ok());
  EXPECT_FALSE(p->Ready(1, 3));
  EXPECT_TRUE(src.Holds(*ahead, 2, 0));  // still there, pinned
  p->ReleaseResident(2, 0);              // dispatches the miss into it
  auto w = p->Acquire(1, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(src.Holds(*w, 1, 3));
  p->Release(1, 3);
  p->EndLayer(1);
  EXPECT_TRUE(Consistent(*p));
}

TEST(OffloadSpeculativeTest, OneSlabCacheHoldsNothingAheadWhileALayerRuns) {
  FakeExpertSource src(3, 4, kH, kI, ExpertWeights::Layout::kFusedTransposed);
  auto p = Make(src, src.Plan(/*pinned=*/1, /*slabs=*/1));
  ASSERT_NE(p, nullptr);
  RunLayer(*p, 2, {0});
  p->WaitForTransfers();
  // The running layer's demand takes the one slab: layer 2 is gone.
  auto order = p->BeginLayer(Phase::kDecode, 1, std::vector<int>{3, 2});
  ASSERT_TRUE(order.ok());
  for (int e : *order) {
    EXPECT_EQ(p->AcquireIfResident(2, 0).status().code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE(p->Acquire(1, e).ok());
    p->Release(1, e);
  }
  p->EndLayer(1);
  EXPECT_TRUE(Consistent(*p));
}

}  // namespace
}  // namespace vismoe
