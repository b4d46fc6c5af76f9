// Speculative execution in the decoder (engine/core/speculative_execution.h)
// on the tiny Qwen3-VL-MoE (4 MoE layers, 16 experts top-4), against a
// provider that scripts which layer waits on copies, what is "there" and what
// is usable now: off, it is the exact path even when layers wait; prefill
// rows, a decode step without a wait and an all-resident target compute
// nothing ahead; with a wait, the target layer's MoE output is, bit for bit,
// the sum in ascending expert order of weight * expert(q) for the kept slots
// (q = RMSNorm_target(r + d), the quasi-hidden state) and weight *
// expert(x) for the others; only usable experts run; every pin is released;
// in a batch, a neighbour without speculation is untouched.
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/text_weights.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rms_norm.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_decoder.h"

namespace vismoe {
namespace {

constexpr int kWaitLayer = 1;    // its copies "never land" before Acquire
constexpr int kTargetLayer = 2;  // the next MoE layer: what is computed ahead

// Resident experts behind a script: Ready() is false at `wait_layer` (so the
// decoder waits there), `there` are held or copying at every layer but
// `pinned`, and AcquireIfResident succeeds for the `usable` ones.
class ScriptedProvider final : public ExpertProvider {
 public:
  ScriptedProvider(ExpertProvider* inner, int num_experts, int wait_layer, int pinned)
      : inner_(inner), wait_layer_(wait_layer), pinned_(pinned) {
    there.assign(static_cast<size_t>(num_experts), 1);
    usable = there;
  }
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override {
    declared[layer].insert(experts.begin(), experts.end());
    return inner_->BeginLayer(phase, layer, experts);
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    return inner_->Acquire(layer, expert);
  }
  void Release(int layer, int expert) override { inner_->Release(layer, expert); }
  void EndLayer(int layer) override { inner_->EndLayer(layer); }
  bool Ready(int layer, int /*expert*/) override { return layer != wait_layer_; }
  ExpertAvailability Availability(int layer) override {
    if (layer == pinned_) return ExpertAvailability{true, {}, {}};
    return ExpertAvailability{false, there, {}};
  }
  absl::StatusOr<ExpertWeights> AcquireIfResident(int layer, int expert) override {
    ++tried;
    if (!usable[expert]) return absl::NotFoundError("still copying");
    ++pins;
    ran[layer].insert(expert);
    return inner_->Acquire(layer, expert);
  }
  void ReleaseResident(int /*layer*/, int /*expert*/) override { --pins; }

  std::vector<uint8_t> there, usable;
  int tried = 0;
  int pins = 0;  // AcquireIfResident minus ReleaseResident
  std::map<int, std::set<int>> declared, ran;

 private:
  ExpertProvider* inner_;
  int wait_layer_;
  int pinned_;
};

// What the decoder showed its observer, per layer.
class Seen final : public RouterObserver {
 public:
  void OnPostAttention(Phase, int layer, const float* r, int64_t n) override {
    residual[layer].assign(r, r + n * hidden);
  }
  void OnRouting(Phase, int layer, const float* x, const RouterResult& r) override {
    input[layer].assign(x, x + r.n * hidden);
    routing[layer] = r;
  }
  void OnMoeOutput(Phase, int layer, const float* out, int64_t n) override {
    output[layer].assign(out, out + n * hidden);
  }
  int64_t hidden = 0;
  std::map<int, std::vector<float>> residual, input, output;
  std::map<int, RouterResult> routing;
};

class SpeculativeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::LoadTinyDecoder(&pool_, &config_, &ckpt_, &model_, &resident_));
    auto w = TextWeights::Load(config_, *ckpt_);
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::make_unique<TextWeights>(*std::move(w));
    spec_.hidden_size = config_.text.hidden_size;
  }

  std::unique_ptr<ScriptedProvider> Scripted(int wait_layer = kWaitLayer) {
    return std::make_unique<ScriptedProvider>(resident_.get(), config_.text.num_experts, wait_layer,
                                              /*pinned=*/0);
  }

  // Random default vectors for every layer (d != 0 moves q away from r).
  void RandomDefaultVectors() {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    spec_.default_vectors.resize(static_cast<size_t>(config_.text.num_hidden_layers) *
                                 config_.text.hidden_size);
    for (float& v : spec_.default_vectors) v = normal(rng);
  }

  std::unique_ptr<KvCache> Prefilled(const std::vector<int>& prompt) {
    auto cache = model_->NewKvCache(64);
    DecoderInput p;
    p.tokens = prompt;
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward(p, cache.get(), resident_.get(), &logits).ok());
    return cache;
  }

  // Prefills the prompt (resident), then runs one decode step of `token_`
  // under `in` and `experts`; the decode step's logits.
  std::vector<float> PrefillThenDecode(DecoderInput in, ExpertProvider* experts) {
    auto cache = Prefilled(prompt_);
    in.tokens = token_;
    in.phase = Phase::kDecode;
    std::vector<float> logits;
    const absl::Status st = model_->Forward(in, cache.get(), experts, &logits);
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  }

  // The target layer's MoE output recomputed from what the observer saw: the
  // router's slots in ascending expert order, weight * expert(q) where the
  // expert was computed ahead (`ahead`) and picked, else weight * expert(x).
  std::vector<float> ExpectedTargetOutput(const Seen& seen, const std::set<int>& ahead, int* kept) {
    const int64_t h = config_.text.hidden_size;
    const int k = config_.text.num_experts_per_tok;
    std::vector<float> r = seen.residual.at(kWaitLayer);
    const float* d = spec_.DefaultVector(kWaitLayer);
    if (d != nullptr) {
      for (int64_t i = 0; i < h; ++i) r[i] += d[i];
    }
    std::vector<float> q(h), y(h), out(h, 0.0f);
    cpu::RmsNorm(&pool_, r.data(), 1, h, weights_->layers[kTargetLayer].post_norm,
                 config_.text.rms_norm_eps, q.data());
    const RouterResult& routing = seen.routing.at(kTargetLayer);
    const std::vector<float>& x = seen.input.at(kTargetLayer);
    std::vector<int> slots(k);
    for (int j = 0; j < k; ++j) slots[j] = j;
    std::sort(slots.begin(), slots.end(),
              [&](int a, int b) { return routing.experts[a] < routing.experts[b]; });
    *kept = 0;
    for (int j : slots) {
      const int e = routing.experts[j];
      const bool from_q = ahead.count(e) > 0;
      *kept += from_q ? 1 : 0;
      auto w = resident_->Acquire(kTargetLayer, e);
      EXPECT_TRUE(w.ok());
      cpu::ExpertForward(&pool_, *w, from_q ? q.data() : x.data(), 1, h,
                         config_.text.moe_intermediate_size, y.data());
      for (int64_t i = 0; i < h; ++i) out[i] += y[i] * routing.weights[j];
    }
    return out;
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Qwen3VlMoeModel> model_;
  std::unique_ptr<ResidentExpertProvider> resident_;
  std::unique_ptr<TextWeights> weights_;
  SpeculativeExecution spec_;
  const std::vector<int> prompt_ = {17, 230, 5, 81, 400, 9};
  const std::vector<int> token_ = {77};
};

TEST_F(SpeculativeTest, OffIsTheExactPathEvenWhenLayersWait) {
  const std::vector<float> exact = PrefillThenDecode({}, resident_.get());
  auto scripted = Scripted();
  EXPECT_EQ(PrefillThenDecode({}, scripted.get()), exact);
  EXPECT_EQ(scripted->tried, 0);
}

TEST_F(SpeculativeTest, PrefillRowsNeverSpeculate) {
  auto scripted = Scripted();
  DecoderInput in;
  in.tokens = prompt_;
  in.all_logits = true;
  std::vector<float> exact, logits;
  auto c1 = model_->NewKvCache(64);
  ASSERT_TRUE(model_->Forward(in, c1.get(), resident_.get(), &exact).ok());
  SpeculativeCounts counts;
  in.speculative = &spec_;
  in.speculative_counts = &counts;
  auto c2 = model_->NewKvCache(64);
  ASSERT_TRUE(model_->Forward(in, c2.get(), scripted.get(), &logits).ok());
  EXPECT_EQ(logits, exact);
  EXPECT_EQ(scripted->tried, 0);
  EXPECT_EQ(counts.executed, 0u);
}

TEST_F(SpeculativeTest, NoWaitMeansNothingComputedAhead) {
  const std::vector<float> exact = PrefillThenDecode({}, resident_.get());
  auto scripted = Scripted(/*wait_layer=*/-1);  // every copy has landed
  SpeculativeCounts counts;
  DecoderInput in;
  in.speculative = &spec_;
  in.speculative_counts = &counts;
  EXPECT_EQ(PrefillThenDecode(in, scripted.get()), exact);
  EXPECT_EQ(scripted->tried, 0);
  EXPECT_EQ(counts.executed, 0u);
  EXPECT_EQ(counts.wait_seconds, 0.0);
}

TEST_F(SpeculativeTest, AllResidentTargetComputesNothingAhead) {
  const std::vector<float> exact = PrefillThenDecode({}, resident_.get());
  // The resident provider: everything is there and ready, nothing is copied.
  SpeculativeCounts counts;
  DecoderInput in;
  in.speculative = &spec_;
  in.speculative_counts = &counts;
  EXPECT_EQ(PrefillThenDecode(in, resident_.get()), exact);
  EXPECT_EQ(counts.executed, 0u);
  // A layer that waits, before a target whose experts are all there (as a
  // pinned-prefix layer's are): no copy to hide there, so no units.
  ScriptedProvider pinned_target(resident_.get(), config_.text.num_experts, kWaitLayer,
                                 /*pinned=*/kTargetLayer);
  SpeculativeCounts pinned_counts;
  in.speculative_counts = &pinned_counts;
  EXPECT_EQ(PrefillThenDecode(in, &pinned_target), exact);
  EXPECT_EQ(pinned_counts.executed, 0u);
  EXPECT_EQ(pinned_target.tried, 0);
  EXPECT_GT(pinned_counts.wait_seconds, 0.0);  // it waited, with nothing to fill the wait
}

TEST_F(SpeculativeTest, KeptSlotsTakeTheExpertOnTheQuasiHiddenState) {
  for (bool with_d : {false, true}) {
    SCOPED_TRACE(with_d);
    if (with_d) RandomDefaultVectors();
    const std::vector<float> exact = PrefillThenDecode({}, resident_.get());
    auto scripted = Scripted();
    SpeculativeCounts counts;
    Seen seen;
    seen.hidden = config_.text.hidden_size;
    DecoderInput in;
    in.speculative = &spec_;
    in.speculative_counts = &counts;
    in.observer = &seen;
    const std::vector<float> logits = PrefillThenDecode(in, scripted.get());
    const int k = config_.text.num_experts_per_tok;
    // One row, every expert there and usable: the row's top-k on q ran.
    EXPECT_EQ(counts.executed, static_cast<uint64_t>(k));
    EXPECT_EQ(counts.kept + counts.discarded, counts.executed);
    EXPECT_EQ(scripted->ran[kTargetLayer].size(), static_cast<size_t>(k));
    EXPECT_EQ(scripted->ran.size(), 1u);  // only the layer after the wait
    EXPECT_EQ(scripted->pins, 0);
    int kept = 0;
    const std::vector<float> expected =
        ExpectedTargetOutput(seen, scripted->ran[kTargetLayer], &kept);
    EXPECT_EQ(seen.output.at(kTargetLayer), expected);  // bit for bit
    EXPECT_EQ(static_cast<uint64_t>(kept), counts.kept);
    EXPECT_GT(counts.kept, 0u);
    // A fully kept expert is not declared: nothing to compute for it.
    for (int e : seen.routing.at(kTargetLayer).experts) {
      EXPECT_EQ(scripted->declared[kTargetLayer].count(e) == 0,
                scripted->ran[kTargetLayer].count(e) > 0)
          << e;
    }
    EXPECT_NE(logits, exact);  // lossy: q is not the router's input
    EXPECT_GT(counts.wait_seconds, 0.0);
    EXPECT_GT(counts.compute_seconds, 0.0);
    EXPECT_LE(counts.saved_seconds, counts.bound_seconds);
  }
}

TEST_F(SpeculativeTest, OnlyExpertsThereAndUsableRun) {
  auto scripted = Scripted();
  std::fill(scripted->there.begin(), scripted->there.end(), 0);
  std::fill(scripted->usable.begin(), scripted->usable.end(), 0);
  for (int e = 0; e < 8; ++e) scripted->there[e] = 1;   // held or copying
  for (int e = 0; e < 4; ++e) scripted->usable[e] = 1;  // of those, landed
  SpeculativeCounts counts;
  DecoderInput in;
  in.speculative = &spec_;
  in.speculative_counts = &counts;
  PrefillThenDecode(in, scripted.get());
  for (int e : scripted->ran[kTargetLayer]) EXPECT_LT(e, 4);
  EXPECT_EQ(counts.executed, scripted->ran[kTargetLayer].size());
  EXPECT_EQ(scripted->pins, 0);
  EXPECT_GT(scripted->tried, 0);
}

TEST_F(SpeculativeTest, BatchNeighbourWithoutSpeculationIsUntouched) {
  auto scripted = Scripted();
  const std::vector<int> prompt_b = {3, 99, 12};
  const std::vector<int> token_b = {41};
  auto cache_alone = Prefilled(prompt_b);
  DecoderInput b;
  b.tokens = token_b;
  b.phase = Phase::kDecode;
  std::vector<float> alone;
  ASSERT_TRUE(model_->Forward(b, cache_alone.get(), scripted.get(), &alone).ok());

  auto cache_a = Prefilled(prompt_);
  auto cache_b = Prefilled(prompt_b);
  DecoderInput a;
  a.tokens = token_;
  a.phase = Phase::kDecode;
  SpeculativeCounts counts;
  a.speculative = &spec_;
  a.speculative_counts = &counts;
  std::vector<float> logits_a, logits_b;
  const DecoderBatchEntry batch[] = {{&a, cache_a.get(), &logits_a},
                                     {&b, cache_b.get(), &logits_b}};
  ASSERT_TRUE(model_->ForwardBatch(batch, scripted.get()).ok());
  EXPECT_EQ(logits_b, alone);
  EXPECT_EQ(counts.executed, static_cast<uint64_t>(config_.text.num_experts_per_tok));  // A's row
  EXPECT_EQ(scripted->pins, 0);
}

}  // namespace
}  // namespace vismoe
