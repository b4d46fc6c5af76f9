// The decoder's side of the GPU decode step's hit path, run on the CPU: with
// CpuDecoderOps' deferred_moe, pinned MoE layers go through DeviceMoe and the
// host hears of them later (TakeDeferred), in layer order, before anything
// that depends on them. Against the same model without it, a run behind the
// offload runtime (a pinned prefix, a slab cache, the router-lookahead
// predictor prefetching from what it observes) gives bit-identical logits,
// the same observer calls with the same data in the same order, the same
// expert lookups in the same order and the same offload counters -- for text,
// an image with compression right after the pinned prefix, decode steps and a
// batch. Greedy steps return tokens equal to the argmax of those logits.
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/backends/cpu/cpu_decoder_ops.h"
#include "engine/core/argmax.h"
#include "engine/core/stats_sink.h"
#include "engine/core/thread_pool.h"
#include "engine/core/token_draw.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/policy/expert_predictor_factory.h"
#include "engine/policy/observer_chain.h"
#include "gtest/gtest.h"
#include "tests/testing/reference_math.h"
#include "tests/testing/tiny_decoder.h"

namespace vismoe {
namespace {

using testing::Pattern;

// Every observer hook with its data, in order.
class Recorder final : public RouterObserver {
 public:
  explicit Recorder(int64_t hidden) : hidden_(hidden) {}
  void OnRouting(Phase phase, int layer, const float* x, const RouterResult& r) override {
    ++routings_;
    Log(0, phase, layer, x, r.n);
    ids_.insert(ids_.end(), r.experts.begin(), r.experts.end());
    scores_.insert(scores_.end(), r.weights.begin(), r.weights.end());
    scores_.insert(scores_.end(), r.logits.begin(), r.logits.end());
  }
  void OnPostAttention(Phase phase, int layer, const float* x, int64_t n) override {
    Log(1, phase, layer, x, n);
  }
  void OnMoeOutput(Phase phase, int layer, const float* x, int64_t n) override {
    Log(2, phase, layer, x, n);
  }
  bool operator==(const Recorder& o) const {
    return calls_ == o.calls_ && ids_ == o.ids_ && scores_ == o.scores_ && rows_ == o.rows_;
  }
  size_t calls() const { return calls_.size(); }
  int routings() const { return routings_; }

 private:
  void Log(int hook, Phase phase, int layer, const float* x, int64_t n) {
    calls_.push_back({hook, static_cast<int>(phase), layer, static_cast<int>(n)});
    rows_.insert(rows_.end(), x, x + n * hidden_);
  }
  const int64_t hidden_;
  int routings_ = 0;
  std::vector<std::tuple<int, int, int, int>> calls_;
  std::vector<int> ids_;
  std::vector<float> scores_, rows_;
};

// Every expert lookup the provider counts, in order.
class QueryLog final : public NullStatsSink {
 public:
  void OnExpertQuery(Phase phase, int layer, bool hit) override {
    queries.push_back({static_cast<int>(phase), layer, hit ? 1 : 0});
  }
  std::vector<std::tuple<int, int, int>> queries;
};

// Forwards to the offload provider; counts RecordPinnedLayer calls.
// The provider's counters depend on which copies have landed when a layer is
// planned or a prefetch chosen (a slab in flight cannot be evicted), i.e. on
// the copy thread's timing. For the two runs to be compared count for count,
// every copy lands before each of those points: Counting waits before
// BeginLayer, Quiesce before the predictor sees a hook.
class Counting final : public ExpertProvider {
 public:
  explicit Counting(OffloadExpertProvider* p) : p_(p) {}
  absl::StatusOr<std::vector<int>> BeginLayer(Phase ph, int l, absl::Span<const int> e) override {
    p_->WaitForTransfers();
    return p_->BeginLayer(ph, l, e);
  }
  absl::StatusOr<ExpertWeights> Acquire(int l, int e) override { return p_->Acquire(l, e); }
  void Release(int l, int e) override { p_->Release(l, e); }
  bool Ready(int l, int e) override { return p_->Ready(l, e); }
  void EndLayer(int l) override { p_->EndLayer(l); }
  bool LayerPinned(int l) const override { return p_->LayerPinned(l); }
  absl::StatusOr<ExpertWeights> PinnedWeights(int l, int e) override {
    return p_->PinnedWeights(l, e);
  }
  absl::Status RecordPinnedLayer(Phase ph, int l, absl::Span<const int> e) override {
    ++recorded;
    return p_->RecordPinnedLayer(ph, l, e);
  }
  int recorded = 0;

 private:
  OffloadExpertProvider* p_;
};

class Quiesce final : public RouterObserver {
 public:
  explicit Quiesce(OffloadExpertProvider* p) : p_(p) {}
  void OnRouting(Phase, int, const float*, const RouterResult&) override { p_->WaitForTransfers(); }
  void OnPostAttention(Phase, int, const float*, int64_t) override { p_->WaitForTransfers(); }
  void OnMoeOutput(Phase, int, const float*, int64_t) override { p_->WaitForTransfers(); }

 private:
  OffloadExpertProvider* p_;
};

// One model (deferred or not) behind its own offload runtime.
struct ModelRun {
  std::unique_ptr<Qwen3VlMoeModel> model;
  QueryLog log;
  std::unique_ptr<OffloadExpertProvider> offload;
  std::unique_ptr<Counting> experts;
};

class DeferredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::unique_ptr<Qwen3VlMoeModel> unused;
    ASSERT_TRUE(testing::LoadTinyDecoder(&pool_, &config_, &ckpt_, &unused, &resident_));
    ASSERT_GE(MoeLayers(), 3);
  }

  int MoeLayers() const {
    int m = 0;
    for (int l = 0; l < config_.text.num_hidden_layers; ++l) m += config_.text.IsMoeLayer(l);
    return m;
  }

  // `pinned` MoE layers, four slabs for the rest, router-lookahead prefetch.
  void Make(bool deferred, int pinned, ModelRun* run) {
    auto ops = cpu::CpuDecoderOps::Create(config_, *ckpt_, &pool_, deferred);
    ASSERT_TRUE(ops.ok()) << ops.status();
    auto model = Qwen3VlMoeModel::Create(config_, *std::move(ops));
    ASSERT_TRUE(model.ok()) << model.status();
    run->model = *std::move(model);
    const std::string prefix = Qwen3VlMoeModel::TextPrefix(config_);
    auto sizes = MeasureModelSizes(*ckpt_, config_.text, prefix);
    ASSERT_TRUE(sizes.ok()) << sizes.status();
    MemoryPlanOptions po;
    po.pinned_layers = pinned;
    const int64_t slabs = pinned == MoeLayers() ? 0 : 4;
    po.budget_bytes = sizes->resident_bytes +
                      (int64_t{pinned} * config_.text.num_experts + slabs) * sizes->expert_bytes;
    auto plan = MakeMemoryPlan(*sizes, po);
    ASSERT_TRUE(plan.ok()) << plan.status();
    OffloadOptions oo;
    oo.prefetch = "router-lookahead";
    auto predictor = MakeExpertPredictor(oo.prefetch, config_, *ckpt_, oo, nullptr);
    ASSERT_TRUE(predictor.ok()) << predictor.status();
    auto offload = OffloadExpertProvider::Create(*resident_, config_.text, *plan, oo, &run->log,
                                                 *std::move(predictor));
    ASSERT_TRUE(offload.ok()) << offload.status();
    run->offload = *std::move(offload);
    run->experts = std::make_unique<Counting>(run->offload.get());
  }

  std::vector<int> Text(int n, int salt) const {
    std::vector<int> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = (31 * (i + salt) + 7) % 900;
    return ids;
  }

  // A prompt (an image of 8 tokens compressed before the first layer after
  // the pinned prefix when `image`) and `decode` greedy steps; returns every
  // step's logits. The observer chain is the recorder and the predictor.
  std::vector<std::vector<float>> Generate(ModelRun& run, Recorder* rec, bool image, int decode,
                                           int compress_layer) {
    std::vector<std::vector<float>> out;
    auto cache = run.model->NewKvCache(128);
    const int64_t h = config_.text.hidden_size;
    std::vector<int> prompt = Text(5, 1);
    std::vector<float> visual;
    std::vector<std::vector<float>> deepstack;
    DecoderInput in;
    if (image) {
      prompt.insert(prompt.end(), 8, config_.image_token_id);
      const std::vector<int> tail = Text(3, 2);
      prompt.insert(prompt.end(), tail.begin(), tail.end());
      visual = Pattern(8 * h, 3, 0.5f);
      for (size_t k = 0; k < config_.vision.deepstack_visual_indexes.size(); ++k) {
        deepstack.push_back(Pattern(8 * h, 4 + static_cast<int64_t>(k), 0.25f));
      }
      in.visual_embeds = visual.data();
      in.num_visual = 8;
      for (const auto& d : deepstack) in.deepstack.push_back(d.data());
      in.compress_before_layer = compress_layer;
      const int64_t n = static_cast<int64_t>(prompt.size());
      int before = 0;  // MoE layers before the compression
      for (int l = 0; l < compress_layer; ++l) before += config_.text.IsMoeLayer(l);
      in.select_kept_rows = [n, rec, before]() -> absl::StatusOr<std::vector<int64_t>> {
        // The compressor chooses from the routing of every layer before it.
        EXPECT_EQ(rec->routings(), before);
        std::vector<int64_t> kept;
        for (int64_t r = 0; r < n; ++r) {
          if (r % 3 != 1) kept.push_back(r);
        }
        return kept;
      };
    }
    Quiesce quiesce(run.offload.get());
    ObserverChain chain{rec, &quiesce, run.offload->observer()};
    in.tokens = prompt;
    in.observer = chain.Head();
    std::vector<float> logits;
    EXPECT_TRUE(run.model->Forward(in, cache.get(), run.experts.get(), &logits).ok());
    out.push_back(logits);
    std::vector<int> token(1);
    for (int s = 0; s < decode; ++s) {
      token[0] = GreedyArgmax(out.back());
      DecoderInput d;
      d.tokens = token;
      d.phase = Phase::kDecode;
      d.observer = chain.Head();
      EXPECT_TRUE(run.model->Forward(d, cache.get(), run.experts.get(), &logits).ok());
      out.push_back(logits);
    }
    return out;
  }

  // Runs both models the same way and compares everything.
  void ExpectSameAsHostDriven(int pinned, bool image, int compress_layer) {
    ModelRun sync, deferred;
    Make(false, pinned, &sync);
    Make(true, pinned, &deferred);
    if (HasFatalFailure()) return;
    Recorder rec_sync(config_.text.hidden_size), rec_deferred(config_.text.hidden_size);
    const auto a = Generate(sync, &rec_sync, image, 6, compress_layer);
    const auto b = Generate(deferred, &rec_deferred, image, 6, compress_layer);
    ASSERT_EQ(a.size(), b.size());
    for (size_t s = 0; s < a.size(); ++s) {
      ASSERT_EQ(a[s].size(), b[s].size());
      EXPECT_EQ(std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(float)), 0)
          << "step " << s;
    }
    EXPECT_GT(rec_sync.calls(), 0u);
    EXPECT_TRUE(rec_sync == rec_deferred) << "the observers saw something else";
    EXPECT_EQ(sync.log.queries, deferred.log.queries);
    const OffloadStats x = sync.offload->TakeRequestStats();
    const OffloadStats y = deferred.offload->TakeRequestStats();
    EXPECT_EQ(x.cache_queries, y.cache_queries);
    EXPECT_EQ(x.cache_hits, y.cache_hits);
    EXPECT_EQ(x.prefetch_needed, y.prefetch_needed);
    EXPECT_EQ(x.prefetch_recalled, y.prefetch_recalled);
    EXPECT_EQ(x.prefetch_issued, y.prefetch_issued);
    EXPECT_EQ(x.bytes_h2d, y.bytes_h2d);
    // Every pinned layer of every step went through DeviceMoe, and only there.
    EXPECT_EQ(sync.experts->recorded, 0);
    EXPECT_EQ(deferred.experts->recorded, pinned * static_cast<int>(a.size()));
  }

  ThreadPool pool_{2};
  ModelConfig config_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<ResidentExpertProvider> resident_;
};

TEST_F(DeferredTest, PinnedPrefixBeforeOffloadedLayers) {
  ExpectSameAsHostDriven(/*pinned=*/1, /*image=*/false, 0);
}

TEST_F(DeferredTest, ImageCompressedRightAfterThePinnedPrefix) {
  // Compression before layer 2 reads what the observers saw of layers 0-1.
  ExpectSameAsHostDriven(/*pinned=*/2, /*image=*/true, /*compress_layer=*/2);
}

TEST_F(DeferredTest, EveryLayerPinned) {
  ExpectSameAsHostDriven(MoeLayers(), /*image=*/true, /*compress_layer=*/1);
}

// Entries get their token (greedy or drawn) instead of logits when every
// entry of the step wants one; a step with one entry that needs logits
// returns logits to all and leaves the tokens alone.
TEST_F(DeferredTest, TokensInsteadOfLogits) {
  ModelRun run;
  Make(true, MoeLayers(), &run);
  if (HasFatalFailure()) return;
  const std::vector<int> p1 = Text(6, 3), p2 = Text(4, 5);
  auto c1 = run.model->NewKvCache(32), c2 = run.model->NewKvCache(32);
  auto d1 = run.model->NewKvCache(32), d2 = run.model->NewKvCache(32);
  DecoderInput in1, in2;
  in1.tokens = p1;
  in2.tokens = p2;
  std::vector<float> l1, l2, g1, g2;
  int t1 = -1, t2 = -1;
  std::vector<DecoderBatchEntry> logits = {{&in1, c1.get(), &l1}, {&in2, c2.get(), &l2}};
  ASSERT_TRUE(run.model->ForwardBatch(logits, run.experts.get()).ok());
  std::vector<DecoderBatchEntry> greedy = {{&in1, d1.get(), &g1, &t1}, {&in2, d2.get(), &g2, &t2}};
  ASSERT_TRUE(run.model->ForwardBatch(greedy, run.experts.get()).ok());
  EXPECT_TRUE(g1.empty() && g2.empty());
  EXPECT_EQ(t1, GreedyArgmax(l1));
  EXPECT_EQ(t2, GreedyArgmax(l2));
  // Sampled draws: the picker's tokens from the same logits.
  auto s1 = run.model->NewKvCache(32), s2 = run.model->NewKvCache(32);
  const TokenDraw top_p{1.0f, 0, 0.9f, 0.37}, top_k{0.7f, 4, 1.0f, 0.8};
  int v1 = -1, v2 = -1;
  std::vector<DecoderBatchEntry> sampled = {{&in1, s1.get(), &g1, &v1, &top_p},
                                            {&in2, s2.get(), &g2, &v2, &top_k}};
  ASSERT_TRUE(run.model->ForwardBatch(sampled, run.experts.get()).ok());
  EXPECT_TRUE(g1.empty() && g2.empty());
  TokenPicker picker;
  EXPECT_EQ(v1, picker.Pick(l1, top_p));
  EXPECT_EQ(v2, picker.Pick(l2, top_k));
  // A mixed step: logits for everyone, tokens untouched.
  auto e1 = run.model->NewKvCache(32), e2 = run.model->NewKvCache(32);
  int u1 = -1;
  std::vector<DecoderBatchEntry> mixed = {{&in1, e1.get(), &g1, &u1}, {&in2, e2.get(), &g2}};
  ASSERT_TRUE(run.model->ForwardBatch(mixed, run.experts.get()).ok());
  EXPECT_EQ(u1, -1);
  EXPECT_EQ(g1, l1);
  EXPECT_EQ(g2, l2);
}

TEST(GreedyArgmaxTest, FirstOfEqualMaximaAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(GreedyArgmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(GreedyArgmax(std::vector<float>{1, nan, 3, nan}), 2);
  EXPECT_EQ(GreedyArgmax(std::vector<float>{nan, 5, 7}), 0);  // never moves off a NaN
  EXPECT_EQ(GreedyArgmax(std::vector<float>{-inf, -inf}), 0);
  EXPECT_EQ(GreedyArgmax(std::vector<float>{-inf, nan, -1, inf}), 3);
  EXPECT_TRUE(AllFinite(std::vector<float>{1, -2, 3e38f}));
  EXPECT_FALSE(AllFinite(std::vector<float>{1, nan}));
  EXPECT_FALSE(AllFinite(std::vector<float>{-inf, 1}));
}

}  // namespace
}  // namespace vismoe
