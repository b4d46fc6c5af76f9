// RunExpertBatches, the provider protocol of the CUDA decoder's MoE layers,
// with a scripted provider and a fake asynchronous launcher: batching by
// Ready(), release only after the batch finished, the ResourceExhausted retry,
// and every error path releasing all it acquired. Then with the real
// OffloadExpertProvider and a launcher that reads the weights only when a
// batch "finishes": a slab handed back too early would be overwritten by the
// next copy and caught there.
#include "engine/offload/expert_batch_runner.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/offload/offload_expert_provider.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/offload/fake_expert_source.h"
#include "tests/engine/offload/flaky_copy_backend.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using testing::FakeExpertSource;

constexpr int kLayer = 2;

// Batches as launched; a batch finishes on Wait, Drain, or (with
// finish_on_poll) when polled. Finishing a batch finishes the earlier ones
// (one stream). `on_finish` sees each batch's weights as it finishes.
class FakeLauncher final : public ExpertBatchLauncher {
 public:
  absl::Status Launch(absl::Span<const AcquiredExpert> batch, int ticket) override {
    EXPECT_EQ(ticket, static_cast<int>(batches.size()));
    batches.emplace_back(batch.begin(), batch.end());
    finished.push_back(false);
    if (ticket == fail_at) return absl::InternalError("launch failed");
    return absl::OkStatus();
  }
  absl::StatusOr<bool> Done(int ticket) override {
    if (finish_on_poll) FinishThrough(ticket);
    return finished.at(ticket);
  }
  absl::Status Wait(int ticket) override {
    FinishThrough(ticket);
    return absl::OkStatus();
  }
  absl::Status Drain() override {
    drained = true;
    if (!batches.empty()) FinishThrough(static_cast<int>(batches.size()) - 1);
    return absl::OkStatus();
  }
  absl::Status PrepareHost(absl::Span<const int> experts) override {
    EXPECT_TRUE(batches.empty()) << "PrepareHost after a launch";
    prepared.assign(experts.begin(), experts.end());
    return absl::OkStatus();
  }
  absl::Status ComputeOnHost(int expert, const ExpertWeights& weights) override {
    if (!can_host) return ExpertBatchLauncher::ComputeOnHost(expert, weights);
    host.push_back({expert, static_cast<int>(batches.size())});
    if (on_host) on_host(expert, weights);
    return absl::OkStatus();
  }

  // The ticket of the batch holding `expert`, or -1.
  int TicketOf(int expert) const {
    for (size_t t = 0; t < batches.size(); ++t) {
      for (const AcquiredExpert& a : batches[t]) {
        if (a.expert == expert) return static_cast<int>(t);
      }
    }
    return -1;
  }
  std::vector<std::vector<int>> Ids() const {
    std::vector<std::vector<int>> ids;
    for (const auto& b : batches) {
      ids.emplace_back();
      for (const AcquiredExpert& a : b) ids.back().push_back(a.expert);
    }
    return ids;
  }

  std::vector<std::vector<AcquiredExpert>> batches;
  std::vector<bool> finished;
  bool finish_on_poll = false;
  bool drained = false;
  int fail_at = -1;
  std::function<void(const std::vector<AcquiredExpert>&)> on_finish;
  // Host execution: the experts PrepareHost was told, and each expert
  // computed on the host with the number of batches launched before it.
  bool can_host = true;
  std::vector<int> prepared;
  std::vector<std::pair<int, int>> host;
  std::function<void(int, const ExpertWeights&)> on_host;

 private:
  void FinishThrough(int ticket) {
    for (int t = 0; t <= ticket; ++t) {
      if (finished[t]) continue;
      finished[t] = true;
      if (on_finish) on_finish(batches[t]);
    }
  }
};

// Declares, orders and hands out experts as scripted; checks that each
// Release comes after the expert's batch finished (or after Drain for an
// expert never launched) and logs the calls.
class ScriptedProvider final : public ExpertProvider {
 public:
  explicit ScriptedProvider(const FakeLauncher& launcher) : launcher_(launcher) {}

  absl::StatusOr<std::vector<int>> BeginLayer(Phase, int layer,
                                              absl::Span<const int> experts) override {
    log.push_back(absl::StrCat("begin ", layer));
    if (!order.empty()) return order;
    return std::vector<int>(experts.begin(), experts.end());
  }
  absl::StatusOr<ExpertWeights> Acquire(int, int expert) override {
    if (expert == fail_expert) return absl::UnavailableError("copy failed");
    if (static_cast<int>(held.size()) >= capacity) {
      return absl::ResourceExhaustedError("every slab is held");
    }
    held.insert(expert);
    ++acquired;
    log.push_back(absl::StrCat("acquire ", expert));
    return ExpertWeights();
  }
  void Release(int, int expert) override {
    EXPECT_EQ(held.erase(expert), 1u) << "release of " << expert << " not held";
    const int t = launcher_.TicketOf(expert);
    if (t >= 0) {
      EXPECT_TRUE(launcher_.finished[t]) << expert << " released before its batch finished";
    } else {
      EXPECT_TRUE(launcher_.drained) << expert << " released before Drain";
    }
    log.push_back(absl::StrCat("release ", expert));
  }
  bool Ready(int, int expert) override { return ready.count(expert) > 0; }
  void EndLayer(int layer) override { log.push_back(absl::StrCat("end ", layer)); }
  absl::StatusOr<LayerPlan> BeginRoutedLayer(Phase phase, int layer, absl::Span<const int> experts,
                                             absl::Span<const int64_t> tokens) override {
    routed_tokens.assign(tokens.begin(), tokens.end());
    LayerPlan plan;
    VISMOE_ASSIGN_OR_RETURN(plan.order, BeginLayer(phase, layer, experts));
    for (int e : plan.order) plan.on_host.push_back(on_host.count(e) > 0 ? 1 : 0);
    return plan;
  }
  absl::StatusOr<ExpertWeights> HostWeights(int, int expert) override {
    log.push_back(absl::StrCat("host ", expert));
    return ExpertWeights();
  }
  void OnHostExpertTime(int64_t tokens, double seconds) override {
    EXPECT_GE(seconds, 0.0);
    log.push_back(absl::StrCat("time ", tokens));
  }

  std::vector<int> order;  // empty = the declared order
  std::set<int> ready;
  std::set<int> on_host;  // put on the host by BeginRoutedLayer
  std::vector<int64_t> routed_tokens;
  int capacity = 1 << 20;  // experts held at once before ResourceExhausted
  int fail_expert = -1;
  std::set<int> held;
  int acquired = 0;
  std::vector<std::string> log;

 private:
  const FakeLauncher& launcher_;
};

TEST(ExpertBatchRunnerTest, ReadyExpertsAreOneBatch) {
  FakeLauncher launcher;
  ScriptedProvider p(launcher);
  p.ready = {1, 3, 5};
  const std::vector<int> active = {5, 1, 3};
  ASSERT_TRUE(RunExpertBatches(p, Phase::kDecode, kLayer, active, launcher).ok());
  EXPECT_THAT(launcher.Ids(), ElementsAre(ElementsAre(5, 1, 3)));
  EXPECT_TRUE(p.held.empty());
  EXPECT_EQ(p.log.front(), "begin 2");
  EXPECT_EQ(p.log.back(), "end 2");
}

TEST(ExpertBatchRunnerTest, ABatchGoesOutBeforeAnExpertThatIsNotReady) {
  FakeLauncher launcher;
  launcher.finish_on_poll = true;  // finished batches are released while the layer runs
  ScriptedProvider p(launcher);
  p.ready = {5, 1};
  const std::vector<int> active = {5, 1, 3, 7};
  ASSERT_TRUE(RunExpertBatches(p, Phase::kPrefill, kLayer, active, launcher).ok());
  EXPECT_THAT(launcher.Ids(), ElementsAre(ElementsAre(5, 1), ElementsAre(3), ElementsAre(7)));
  EXPECT_TRUE(p.held.empty());
  // 5 and 1 went back before 7 was acquired.
  const auto pos = [&](const std::string& s) {
    return std::find(p.log.begin(), p.log.end(), s) - p.log.begin();
  };
  EXPECT_LT(pos("release 1"), pos("acquire 7"));
}

TEST(ExpertBatchRunnerTest, ResourceExhaustedLaunchesWaitsAndRetries) {
  FakeLauncher launcher;  // batches finish only when waited for
  ScriptedProvider p(launcher);
  p.ready = {1, 3, 5};
  p.capacity = 1;
  const std::vector<int> active = {5, 1, 3};
  ASSERT_TRUE(RunExpertBatches(p, Phase::kDecode, kLayer, active, launcher).ok());
  EXPECT_THAT(launcher.Ids(), ElementsAre(ElementsAre(5), ElementsAre(1), ElementsAre(3)));
  EXPECT_EQ(p.acquired, 3);
  EXPECT_TRUE(p.held.empty());
}

TEST(ExpertBatchRunnerTest, ResourceExhaustedWithNothingHeldIsReturned) {
  FakeLauncher launcher;
  ScriptedProvider p(launcher);
  p.capacity = 0;
  const std::vector<int> active = {4};
  const absl::Status st = RunExpertBatches(p, Phase::kDecode, kLayer, active, launcher);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(p.log.back(), "end 2");
}

TEST(ExpertBatchRunnerTest, LaunchErrorReleasesEverythingAfterDrain) {
  FakeLauncher launcher;
  launcher.fail_at = 1;
  ScriptedProvider p(launcher);
  p.ready = {5};
  const std::vector<int> active = {5, 1, 3};
  const absl::Status st = RunExpertBatches(p, Phase::kDecode, kLayer, active, launcher);
  EXPECT_EQ(st.message(), "launch failed");
  EXPECT_THAT(launcher.Ids(), ElementsAre(ElementsAre(5), ElementsAre(1)));
  EXPECT_TRUE(launcher.drained);
  EXPECT_TRUE(p.held.empty());
  EXPECT_EQ(p.acquired, 2);  // 3 was never acquired
  EXPECT_EQ(p.log.back(), "end 2");
}

TEST(ExpertBatchRunnerTest, AcquireErrorReleasesTheUnlaunchedBatch) {
  FakeLauncher launcher;
  ScriptedProvider p(launcher);
  p.ready = {5, 1, 3};
  p.fail_expert = 3;
  const std::vector<int> active = {5, 1, 3};
  const absl::Status st = RunExpertBatches(p, Phase::kDecode, kLayer, active, launcher);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(launcher.batches.empty());  // 5 and 1 were waiting for 3
  EXPECT_TRUE(p.held.empty());
  EXPECT_EQ(p.log.back(), "end 2");
}

TEST(ExpertBatchRunnerTest, UndeclaredRepeatedOrMissingExpertsAreInternalErrors) {
  const std::vector<int> active = {5, 1};
  for (const std::vector<int>& order :
       {std::vector<int>{5, 9}, std::vector<int>{5, 5}, std::vector<int>{5}}) {
    FakeLauncher launcher;
    ScriptedProvider p(launcher);
    p.order = order;
    const absl::Status st = RunExpertBatches(p, Phase::kDecode, kLayer, active, launcher);
    EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
    EXPECT_TRUE(p.held.empty());
    EXPECT_EQ(p.log.back(), "end 2");
  }
}

// Host experts: told to the launcher before any launch, computed on the
// host after the batch before them went out (the device computes it
// meanwhile), timed for the provider, never acquired or released.
TEST(ExpertBatchRunnerTest, HostExpertsRunWhileTheBatchBeforeThemComputes) {
  FakeLauncher launcher;
  ScriptedProvider p(launcher);
  p.ready = {5, 1, 7};
  p.on_host = {3};
  const std::vector<int> active = {5, 1, 3, 7};
  const std::vector<int64_t> tokens = {1, 2, 6, 4};
  ASSERT_TRUE(RunExpertBatches(p, Phase::kDecode, kLayer, active, tokens, launcher).ok());
  EXPECT_EQ(p.routed_tokens, tokens);
  EXPECT_THAT(launcher.prepared, ElementsAre(3));
  EXPECT_THAT(launcher.Ids(), ElementsAre(ElementsAre(5, 1), ElementsAre(7)));
  ASSERT_EQ(launcher.host.size(), 1u);
  EXPECT_EQ(launcher.host[0], std::make_pair(3, 1));  // after batch {5, 1} was launched
  EXPECT_TRUE(p.held.empty());
  EXPECT_EQ(p.acquired, 3);
  EXPECT_NE(std::find(p.log.begin(), p.log.end(), "time 6"), p.log.end());
  EXPECT_EQ(std::find(p.log.begin(), p.log.end(), "acquire 3"), p.log.end());
  EXPECT_EQ(p.log.back(), "end 2");

  // Without token counts the layer begins with BeginLayer: nothing on the host.
  FakeLauncher plain;
  ScriptedProvider q(plain);
  q.on_host = {3};
  ASSERT_TRUE(RunExpertBatches(q, Phase::kDecode, kLayer, active, plain).ok());
  EXPECT_TRUE(plain.host.empty());
  EXPECT_EQ(q.acquired, 4);
}

TEST(ExpertBatchRunnerTest, ALauncherThatCannotComputeOnTheHostFailsTheLayerCleanly) {
  FakeLauncher launcher;
  launcher.can_host = false;
  ScriptedProvider p(launcher);
  p.ready = {5};
  p.on_host = {1};
  const std::vector<int> active = {5, 1, 3};
  const absl::Status st =
      RunExpertBatches(p, Phase::kDecode, kLayer, active, std::vector<int64_t>{1, 1, 1}, launcher);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_TRUE(launcher.drained);
  EXPECT_TRUE(p.held.empty());
  EXPECT_EQ(p.log.back(), "end 2");
}

// The real provider with its last two layers on the host: the host experts'
// weights are the right bytes, and only the device layer's experts launch.
TEST(ExpertBatchRunnerTest, StaticHostLayersReachTheLauncherFromTheHostStore) {
  constexpr int kLayers = 4, kExperts = 6;
  FakeExpertSource src(kLayers, kExperts, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  OffloadOptions o;
  o.host_moe_layers = 2;
  auto created = OffloadExpertProvider::Create(src, src.Config(3), src.Plan(1, 2), o, nullptr);
  ASSERT_TRUE(created.ok()) << created.status();
  OffloadExpertProvider& p = **created;
  const std::vector<int> active = {0, 2, 5};
  const std::vector<int64_t> tokens = {1, 3, 2};
  for (int layer = 0; layer < kLayers; ++layer) {
    FakeLauncher launcher;
    int host_checked = 0;
    launcher.on_host = [&](int e, const ExpertWeights& w) {
      EXPECT_TRUE(src.Holds(w, layer, e)) << "layer " << layer << " expert " << e;
      ++host_checked;
    };
    ASSERT_TRUE(RunExpertBatches(p, Phase::kDecode, layer, active, tokens, launcher).ok());
    const bool on_host = layer >= 2;
    EXPECT_EQ(host_checked, on_host ? 3 : 0) << layer;
    EXPECT_EQ(launcher.batches.empty(), on_host) << layer;
  }
  const OffloadStats s = p.TakeRequestStats();
  EXPECT_EQ(s.experts_host_computed, 6u);
  EXPECT_EQ(s.bytes_h2d, 3u * p.format().bytes);  // layer 1's three misses
}

// The real provider, two slabs for four experts per layer, copies on its own
// thread: every batch must still hold its experts' bytes when it finishes.
TEST(ExpertBatchRunnerTest, OffloadedWeightsStayIntactUntilTheirBatchFinishes) {
  constexpr int kLayers = 4, kExperts = 6;
  FakeExpertSource src(kLayers, kExperts, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  auto created =
      OffloadExpertProvider::Create(src, src.Config(3), src.Plan(1, 2), OffloadOptions(), nullptr);
  ASSERT_TRUE(created.ok()) << created.status();
  OffloadExpertProvider& p = **created;
  std::mt19937 rng(11);
  int checked = 0;
  for (int step = 0; step < 12; ++step) {
    for (int layer = 0; layer < kLayers; ++layer) {
      std::vector<int> all(kExperts);
      for (int e = 0; e < kExperts; ++e) all[e] = e;
      std::shuffle(all.begin(), all.end(), rng);
      const std::vector<int> active(all.begin(), all.begin() + 4);
      FakeLauncher launcher;
      launcher.finish_on_poll = step % 2 == 0;
      launcher.on_finish = [&](const std::vector<AcquiredExpert>& batch) {
        for (const AcquiredExpert& a : batch) {
          EXPECT_TRUE(src.Holds(a.weights, layer, a.expert))
              << "layer " << layer << " expert " << a.expert << " step " << step;
          ++checked;
        }
      };
      const absl::Status st = RunExpertBatches(p, step == 0 ? Phase::kPrefill : Phase::kDecode,
                                               layer, active, launcher);
      ASSERT_TRUE(st.ok()) << st;
      std::vector<int> ran;
      for (const auto& b : launcher.Ids()) ran.insert(ran.end(), b.begin(), b.end());
      std::sort(ran.begin(), ran.end());
      std::vector<int> want = active;
      std::sort(want.begin(), want.end());
      EXPECT_EQ(ran, want);
    }
  }
  EXPECT_EQ(checked, 12 * kLayers * 4);
  std::string why;
  EXPECT_TRUE(p.CheckInvariants(&why)) << why;
}

// With HeldExperts the layer ends without Drain: the experts of batches not
// known to be finished stay held and go back when the caller releases them.
TEST(ExpertBatchRunnerTest, HeldExpertsGoBackWhenTheCallerReleasesThem) {
  FakeLauncher launcher;
  ScriptedProvider p(launcher);
  p.ready = {1, 3};
  const std::vector<int> active = {1, 3, 5};
  HeldExperts held;
  ASSERT_TRUE(RunExpertBatches(p, Phase::kDecode, kLayer, active, {}, launcher, &held).ok());
  EXPECT_FALSE(launcher.drained);
  EXPECT_EQ(p.log.back(), "end 2");
  EXPECT_EQ(p.held.size(), 3u);
  ASSERT_FALSE(held.empty());
  ASSERT_TRUE(launcher.Drain().ok());  // the caller's stream catches up
  held.ReleaseAll();                   // ScriptedProvider checks each batch finished first
  EXPECT_TRUE(p.held.empty());
  EXPECT_TRUE(held.empty());

  // A failing layer still drains and releases everything itself.
  FakeLauncher failing;
  failing.fail_at = 0;
  ScriptedProvider q(failing);
  HeldExperts none;
  EXPECT_FALSE(RunExpertBatches(q, Phase::kDecode, kLayer, active, {}, failing, &none).ok());
  EXPECT_TRUE(failing.drained);
  EXPECT_TRUE(q.held.empty());
  EXPECT_TRUE(none.empty());
}

// Releasing after the layer leaves the real provider where releasing inside
// it would have: the same lookups, hits and copies over many layers.
TEST(ExpertBatchRunnerTest, HeldExpertsLeaveTheProviderAsAnImmediateRelease) {
  constexpr int kLayers = 4, kExperts = 6;
  FakeExpertSource src(kLayers, kExperts, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  OffloadStats stats[2];
  for (int keep = 0; keep < 2; ++keep) {
    auto created = OffloadExpertProvider::Create(src, src.Config(3), src.Plan(1, 3),
                                                 OffloadOptions(), nullptr);
    ASSERT_TRUE(created.ok()) << created.status();
    OffloadExpertProvider& p = **created;
    std::mt19937 rng(5);
    HeldExperts held;
    for (int step = 0; step < 10; ++step) {
      for (int layer = 0; layer < kLayers; ++layer) {
        std::vector<int> all(kExperts);
        for (int e = 0; e < kExperts; ++e) all[e] = e;
        std::shuffle(all.begin(), all.end(), rng);
        const std::vector<int> active(all.begin(), all.begin() + 3);
        FakeLauncher launcher;
        launcher.on_finish = [&](const std::vector<AcquiredExpert>& batch) {
          for (const AcquiredExpert& a : batch) EXPECT_TRUE(src.Holds(a.weights, layer, a.expert));
        };
        ASSERT_TRUE(
            RunExpertBatches(p, Phase::kDecode, layer, active, {}, launcher, keep ? &held : nullptr)
                .ok());
        // The next layer's routing waits for the stream: then they go back.
        ASSERT_TRUE(launcher.Drain().ok());
        held.ReleaseAll();
        p.WaitForTransfers();  // the same copy timing in both runs
      }
    }
    stats[keep] = p.TakeRequestStats();
    std::string why;
    EXPECT_TRUE(p.CheckInvariants(&why)) << why;
  }
  EXPECT_EQ(stats[0].cache_queries, stats[1].cache_queries);
  EXPECT_EQ(stats[0].cache_hits, stats[1].cache_hits);
  EXPECT_EQ(stats[0].bytes_h2d, stats[1].bytes_h2d);
  EXPECT_GT(stats[0].bytes_h2d, 0u);
}

// A copy that fails mid-layer: the layer fails with the copy's error (no
// hang), everything acquired goes back, and the next step runs in full.
TEST(ExpertBatchRunnerTest, FailedCopyFailsTheLayerAndTheNextStepRuns) {
  constexpr int kLayers = 3, kExperts = 6;
  FakeExpertSource src(kLayers, kExperts, 8, 4, ExpertWeights::Layout::kFusedTransposed);
  for (int fail_at = 0; fail_at < 4; ++fail_at) {
    testing::FlakyCopyBackend backend;
    OffloadDevice device;
    device.copy = &backend;
    auto created = OffloadExpertProvider::Create(src, src.Config(2), src.Plan(1, 2),
                                                 OffloadOptions(), nullptr, nullptr, device);
    ASSERT_TRUE(created.ok()) << created.status();
    OffloadExpertProvider& p = **created;
    // The pinned prefix upload was copy 0 (layer 0 is pinned).
    const int base = backend.copies.load();
    backend.fail_from = base + fail_at;
    backend.fail_to = base + fail_at + 1;
    const std::vector<int> active = {0, 1, 2, 3};
    FakeLauncher launcher;
    launcher.finish_on_poll = true;
    absl::Status st = RunExpertBatches(p, Phase::kDecode, 1, active, launcher);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << fail_at << ": " << st;
    p.WaitForTransfers();
    std::string why;
    EXPECT_TRUE(p.CheckInvariants(&why)) << why;

    FakeLauncher again;
    again.on_finish = [&](const std::vector<AcquiredExpert>& batch) {
      for (const AcquiredExpert& a : batch) EXPECT_TRUE(src.Holds(a.weights, 1, a.expert));
    };
    st = RunExpertBatches(p, Phase::kDecode, 1, active, again);
    ASSERT_TRUE(st.ok()) << fail_at << ": " << st;
    std::vector<int> ran;
    for (const auto& b : again.Ids()) ran.insert(ran.end(), b.begin(), b.end());
    std::sort(ran.begin(), ran.end());
    EXPECT_EQ(ran, active);
    p.WaitForTransfers();
    EXPECT_TRUE(p.CheckInvariants(&why)) << why;
  }
}

}  // namespace
}  // namespace vismoe
