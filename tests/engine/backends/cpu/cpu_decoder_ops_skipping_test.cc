// DecoderStep::Experts with skipped slots on the CPU reference backend: a
// skipped slot adds exactly what a zero combine weight adds (nothing; the
// kept experts keep their weights, paper 001 does not renormalise), and an
// expert whose every slot is skipped is never declared to, nor acquired
// from, the expert provider.
#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "engine/backends/cpu/cpu_decoder_ops.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// Records what a layer declares and acquires.
class RecordingProvider final : public ExpertProvider {
 public:
  explicit RecordingProvider(ExpertProvider* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override {
    declared.assign(experts.begin(), experts.end());
    return inner_->BeginLayer(phase, layer, experts);
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    acquired.insert(expert);
    return inner_->Acquire(layer, expert);
  }
  void Release(int layer, int expert) override { inner_->Release(layer, expert); }
  void EndLayer(int layer) override { inner_->EndLayer(layer); }

  std::vector<int> declared;
  std::set<int> acquired;

 private:
  ExpertProvider* inner_;
};

TEST(CpuDecoderOpsSkippingTest, SkippedSlotsAddNothingAndAreNeverFetched) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ThreadPool pool(2);
  auto ops = cpu::CpuDecoderOps::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(ops.ok()) << ops.status();
  auto resident = ResidentExpertProvider::Create(**ckpt, config->text, "model.language_model.");
  ASSERT_TRUE(resident.ok()) << resident.status();
  int layer = 0;
  while (!config->text.IsMoeLayer(layer)) ++layer;

  const std::vector<int> tokens = {11, 305, 42, 7, 613, 99, 250, 18};
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> positions(3 * n);
  for (int64_t i = 0; i < 3 * n; ++i) positions[i] = i % n;
  auto cache = (*ops)->CreateKvCache(64);
  ASSERT_TRUE(cache.ok());
  StepInput in;
  in.tokens = tokens;
  in.positions = positions;
  auto step = (*ops)->BeginStep(in, cache->get());
  ASSERT_TRUE(step.ok()) << step.status();
  DecoderStep& s = **step;
  ASSERT_TRUE(s.Norm(layer, NormSite::kInput).ok());
  ASSERT_TRUE(s.Attention(layer).ok());
  ASSERT_TRUE(s.Norm(layer, NormSite::kPostAttention).ok());
  RouterResult routed;
  ASSERT_TRUE(s.Route(layer, true, &routed).ok());

  // Skip the last slot of every token and every slot of token 0's top expert.
  const int k = routed.top_k;
  const int gone = routed.experts[0];
  RouterResult masked = routed, zeroed = routed;
  masked.skipped.assign(routed.experts.size(), 0);
  for (size_t i = 0; i < routed.experts.size(); ++i) {
    if (static_cast<int>(i % k) == k - 1 || routed.experts[i] == gone) {
      masked.skipped[i] = 1;
      zeroed.weights[i] = 0.0f;
    }
  }
  auto run = [&](const RouterResult& r, RecordingProvider* p) {
    EXPECT_TRUE(s.Experts(layer, Phase::kPrefill, r, p).ok());
    auto out = s.HostRows(StepRows::kMoeOutput);
    EXPECT_TRUE(out.ok());
    return std::vector<float>(*out, *out + n * config->text.hidden_size);
  };
  RecordingProvider full_p(resident->get()), masked_p(resident->get()), zeroed_p(resident->get());
  const std::vector<float> full = run(routed, &full_p);
  const std::vector<float> with_mask = run(masked, &masked_p);
  const std::vector<float> with_zero = run(zeroed, &zeroed_p);

  EXPECT_EQ(with_mask, with_zero);  // bit for bit
  EXPECT_NE(with_mask, full);       // and skipping did change the output
  EXPECT_EQ(std::count(masked_p.declared.begin(), masked_p.declared.end(), gone), 0);
  EXPECT_EQ(masked_p.acquired.count(gone), 0u);
  EXPECT_EQ(full_p.acquired.count(gone), 1u);
  // Every declared expert still has a slot to compute.
  for (int e : masked_p.declared) {
    bool kept = false;
    for (size_t i = 0; i < routed.experts.size(); ++i) {
      kept = kept || (routed.experts[i] == e && masked.skipped[i] == 0);
    }
    EXPECT_TRUE(kept) << "expert " << e << " declared with every slot skipped";
  }
}

TEST(CpuDecoderOpsSkippingTest, EverySlotSkippedDeclaresNothingAndOutputsZero) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto ops = cpu::CpuDecoderOps::Create(*config, **ckpt, nullptr);
  ASSERT_TRUE(ops.ok()) << ops.status();
  auto resident = ResidentExpertProvider::Create(**ckpt, config->text, "model.language_model.");
  ASSERT_TRUE(resident.ok()) << resident.status();
  const std::vector<int> tokens = {5, 6, 7};
  auto cache = (*ops)->CreateKvCache(16);
  ASSERT_TRUE(cache.ok());
  std::vector<int64_t> positions = {0, 1, 2, 0, 1, 2, 0, 1, 2};
  StepInput in;
  in.tokens = tokens;
  in.positions = positions;
  auto step = (*ops)->BeginStep(in, cache->get());
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE((*step)->Norm(0, NormSite::kPostAttention).ok());
  RouterResult r;
  ASSERT_TRUE((*step)->Route(0, true, &r).ok());
  r.skipped.assign(r.experts.size(), 1);
  RecordingProvider p(resident->get());
  ASSERT_TRUE((*step)->Experts(0, Phase::kDecode, r, &p).ok());
  EXPECT_TRUE(p.declared.empty());
  EXPECT_TRUE(p.acquired.empty());
  auto out = (*step)->HostRows(StepRows::kMoeOutput);
  ASSERT_TRUE(out.ok());
  for (int64_t i = 0; i < 3 * config->text.hidden_size; ++i) ASSERT_EQ((*out)[i], 0.0f) << i;
}

}  // namespace
}  // namespace vismoe
