// DecoderStep::Experts on the CPU reference backend, one MoE layer of the
// tiny fixture: the experts a provider reports Ready() are computed side by
// side (one per pool thread) when they have few rows, the others one at a
// time with the pool splitting each kernel. Whatever the pool and whichever
// experts are ready, the layer's output is bit for bit the one-thread output,
// every Acquire has its Release, and the provider is only ever called from
// the thread running the step (its documented contract).
#include "engine/backends/cpu/cpu_decoder_ops.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// Resident experts behind a Ready() pattern (expert e is ready when
// ready_mask has bit e % 32), recording how the step calls it.
class PatternProvider final : public ExpertProvider {
 public:
  PatternProvider(ExpertProvider* inner, uint32_t ready_mask)
      : inner_(inner), ready_mask_(ready_mask) {}
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override {
    Note();
    return inner_->BeginLayer(phase, layer, experts);
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    Note();
    ++acquires;
    max_pinned = std::max(max_pinned, ++pinned);
    return inner_->Acquire(layer, expert);
  }
  void Release(int layer, int expert) override {
    Note();
    ++releases;
    --pinned;
    inner_->Release(layer, expert);
  }
  bool Ready(int /*layer*/, int expert) override {
    Note();
    return (ready_mask_ >> (expert % 32)) & 1u;
  }
  void EndLayer(int layer) override {
    Note();
    inner_->EndLayer(layer);
  }

  int acquires = 0, releases = 0, pinned = 0, max_pinned = 0;
  bool other_thread = false;  // a call came from a thread other than the first caller's

 private:
  void Note() {
    if (caller_ == std::thread::id()) caller_ = std::this_thread::get_id();
    other_thread = other_thread || caller_ != std::this_thread::get_id();
  }

  ExpertProvider* inner_;
  const uint32_t ready_mask_;
  std::thread::id caller_;
};

class CpuDecoderOpsExpertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::TinyModelDir();
    auto config = ModelConfig::Load(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = *std::move(ckpt);
    auto resident = ResidentExpertProvider::Create(*ckpt_, config_.text, "model.language_model.");
    ASSERT_TRUE(resident.ok()) << resident.status();
    resident_ = *std::move(resident);
    while (!config_.text.IsMoeLayer(layer_)) ++layer_;
  }

  // The MoE output of the first MoE layer for `n` tokens of a fixed prompt,
  // computed on `pool` through `provider`.
  std::vector<float> MoeOutput(ThreadPool* pool, int64_t n, ExpertProvider* provider) {
    auto ops = cpu::CpuDecoderOps::Create(config_, *ckpt_, pool);
    EXPECT_TRUE(ops.ok()) << ops.status();
    if (!ops.ok()) return {};
    std::vector<int> tokens(n);
    std::vector<int64_t> positions(3 * n);
    for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int>((i * 97 + 11) % 1000);
    for (int64_t i = 0; i < 3 * n; ++i) positions[i] = i % n;
    auto cache = (*ops)->CreateKvCache(n);
    EXPECT_TRUE(cache.ok()) << cache.status();
    StepInput in;
    in.tokens = tokens;
    in.positions = positions;
    auto step = (*ops)->BeginStep(in, cache->get());
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return {};
    DecoderStep& s = **step;
    EXPECT_TRUE(s.Norm(layer_, NormSite::kInput).ok());
    EXPECT_TRUE(s.Attention(layer_).ok());
    EXPECT_TRUE(s.Norm(layer_, NormSite::kPostAttention).ok());
    RouterResult r;
    EXPECT_TRUE(s.Route(layer_, true, &r).ok());
    EXPECT_TRUE(s.Experts(layer_, Phase::kPrefill, r, provider).ok());
    auto out = s.HostRows(StepRows::kMoeOutput);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    return std::vector<float>(*out, *out + n * config_.text.hidden_size);
  }

  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<ResidentExpertProvider> resident_;
  int layer_ = 0;
};

// 6 tokens (a few rows per expert: the side-by-side path) and 96 (more than
// 16 rows for some expert: those split their kernels), over ready patterns
// from none to all.
TEST_F(CpuDecoderOpsExpertsTest, ReadyExpertsSideBySideEqualOneThread) {
  ThreadPool one(1), three(3);
  for (int64_t n : {6, 96}) {
    PatternProvider alone_p(resident_.get(), 0xffffffffu);
    const std::vector<float> alone = MoeOutput(&one, n, &alone_p);
    ASSERT_FALSE(alone.empty());
    EXPECT_LE(alone_p.max_pinned, 1) << "one thread: one expert at a time";
    for (uint32_t mask : {0u, 0xffffffffu, 0x55555555u, 0x0f0f0f0fu, 0xfffffff0u}) {
      SCOPED_TRACE(::testing::Message() << n << " tokens, ready mask " << std::hex << mask);
      PatternProvider p(resident_.get(), mask);
      const std::vector<float> out = MoeOutput(&three, n, &p);
      EXPECT_EQ(out, alone) << "bit for bit";
      EXPECT_EQ(p.acquires, p.releases);
      EXPECT_EQ(p.pinned, 0);
      EXPECT_FALSE(p.other_thread) << "the provider was called from a pool thread";
      if (n == 6 && mask == 0xffffffffu) {
        EXPECT_GE(p.max_pinned, 2) << "no experts ran side by side";
      }
      if (mask == 0u) {
        EXPECT_LE(p.max_pinned, 1) << "an expert not Ready() was run side by side";
      }
    }
  }
}

}  // namespace
}  // namespace vismoe
