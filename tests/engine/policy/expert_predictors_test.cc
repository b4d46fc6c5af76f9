// Expert predictors on the tiny Qwen3-VL-MoE fixture: router-lookahead
// reproduces the real routing when aimed at the observed layer (d = 0) and
// beats random choice one layer ahead; the mlp-lookahead predictor builds the
// same features and output as the calibration path (BuildLookaheadExamples +
// MlpLookahead::Predict); history follows OnRouting; the factory's errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/policy/calibration_profile.h"
#include "engine/calibrate/routing_trace.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/policy/expert_predictor_factory.h"
#include "engine/policy/history_expert_predictor.h"
#include "engine/policy/lookahead_features.h"
#include "engine/policy/mlp_lookahead_predictor.h"
#include "engine/policy/observer_chain.h"
#include "engine/policy/router_lookahead_predictor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  ModelConfig config;
  std::unique_ptr<Checkpoint> ckpt;
  ThreadPool pool{1};
  std::unique_ptr<ResidentExpertProvider> experts;
  std::unique_ptr<Qwen3VlMoeModel> model;
};

std::unique_ptr<Fixture> LoadTiny(const std::string& dir = testing::TinyModelDir()) {
  auto f = std::make_unique<Fixture>();
  auto config = ModelConfig::Load(dir);
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(config.ok() && ckpt.ok());
  if (!config.ok() || !ckpt.ok()) return nullptr;
  f->config = *config;
  f->ckpt = std::move(*ckpt);
  auto experts =
      ResidentExpertProvider::Create(*f->ckpt, f->config.text, Qwen3VlMoeModel::Experts(f->config));
  auto model = Qwen3VlMoeModel::Create(f->config, *f->ckpt, &f->pool);
  EXPECT_TRUE(experts.ok() && model.ok());
  if (!experts.ok() || !model.ok()) return nullptr;
  f->experts = std::move(*experts);
  f->model = std::move(*model);
  return f;
}

// Runs a 12-token random prompt and `steps` decode steps (random next tokens,
// so the random model does not loop) with `observer`.
void RunTrace(Fixture& f, RouterObserver* observer, uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  std::vector<int> tokens(12);
  for (int& t : tokens) t = static_cast<int>(rng() % 2000);
  auto cache = f.model->NewKvCache(64);
  DecoderInput in;
  in.tokens = tokens;
  in.observer = observer;
  std::vector<float> logits;
  ASSERT_TRUE(f.model->Forward(in, cache.get(), f.experts.get(), &logits).ok());
  for (int s = 0; s < steps; ++s) {
    const int next = static_cast<int>(rng() % 2000);
    DecoderInput d;
    d.tokens = absl::MakeConstSpan(&next, 1);
    d.phase = Phase::kDecode;
    d.observer = observer;
    ASSERT_TRUE(f.model->Forward(d, cache.get(), f.experts.get(), &logits).ok());
  }
}

// Checks router-lookahead against the routing it precedes.
class RouterChecker final : public RouterObserver {
 public:
  RouterChecker(ExpertPredictor* p, const TextConfig& c) : p_(p), c_(c) {}
  void OnRouting(Phase phase, int layer, const float* /*hidden*/,
                 const RouterResult& r) override {
    const int k = r.top_k, e = r.num_experts;
    // Aimed at the observed layer: the real routing (decode: exactly its top-k
    // in order; prefill: the mean top-k-masked probability per expert).
    const auto same = p_->Predict(layer, e);
    if (phase == Phase::kDecode) {
      ASSERT_GE(same.size(), static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) EXPECT_EQ(same[j].first, r.experts[j]) << "layer " << layer;
      ++exact_checks;
    } else {
      std::vector<double> want(e, 0.0);
      const int64_t m = std::min<int64_t>(r.n, RouterLookaheadPredictor::kMaxRows);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = i * r.n / m;
        const float* l = r.logits.data() + t * e;
        const float mx = *std::max_element(l, l + e);
        double sum = 0;
        for (int x = 0; x < e; ++x) sum += std::exp(double{l[x]} - mx);
        for (int j = 0; j < k; ++j) {
          const int x = r.experts[t * k + j];
          want[x] += std::exp(double{l[x]} - mx) / sum / static_cast<double>(m);
        }
      }
      for (const auto& [x, s] : same) EXPECT_NEAR(s, want[x], 1e-5) << "layer " << layer;
      ++prefill_checks;
    }
    // One MoE layer ahead: remember the guess, score it at the next layer.
    if (phase == Phase::kDecode && !guess_.empty() && layer == guess_layer_) {
      std::set<int> actual(r.experts.begin(), r.experts.begin() + k);
      int hit = 0;
      for (int x : guess_) hit += actual.count(x) ? 1 : 0;
      recall_sum += static_cast<double>(hit) / k;
      ++recall_n;
    }
    guess_.clear();
    guess_layer_ = -1;
    for (int next = layer + 1; next < c_.num_hidden_layers; ++next) {
      if (!c_.IsMoeLayer(next)) continue;
      for (const auto& [x, s] : p_->Predict(next, k)) guess_.push_back(x);
      guess_layer_ = next;
      break;
    }
  }
  int exact_checks = 0, prefill_checks = 0, recall_n = 0;
  double recall_sum = 0;

 private:
  ExpertPredictor* p_;
  const TextConfig& c_;
  std::vector<int> guess_;
  int guess_layer_ = -1;
};

TEST(RouterLookaheadPredictorTest, ReproducesRoutingAndBeatsRandomAhead) {
  auto f = LoadTiny();
  ASSERT_NE(f, nullptr);
  auto p = RouterLookaheadPredictor::Create(f->config, *f->ckpt, /*window=*/3, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_STREQ((*p)->name(), "router-lookahead");
  EXPECT_TRUE((*p)->Predict(1, 4).empty());  // nothing observed yet
  RouterChecker checker(p->get(), f->config.text);
  ObserverChain chain{p->get(), &checker};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    (*p)->BeginRequest();
    RunTrace(*f, chain.Head(), seed, 16);
  }
  EXPECT_EQ(checker.exact_checks, 6 * 16 * 4);
  EXPECT_EQ(checker.prefill_checks, 6 * 4);
  ASSERT_GT(checker.recall_n, 0);
  const double recall = checker.recall_sum / checker.recall_n;
  const double random = 4.0 / 16.0;
  std::printf("[router-lookahead] next-layer recall@4 %.3f (random %.3f) over %d decode layers\n",
              recall, random, checker.recall_n);
  EXPECT_GT(recall, random + 0.25);  // 0.78 measured on this fixture
  // Outside the window (and behind the last observed layer): nothing.
  EXPECT_TRUE((*p)->Predict(0, 4).empty());
  (*p)->BeginRequest();
  EXPECT_TRUE((*p)->Predict(3, 4).empty());
}

// PhiMoE: LayerNorm with bias before the router, and the sparsemixer's two
// picks are the softmax's top two, so aimed at the observed layer the
// predictor reproduces them too.
TEST(RouterLookaheadPredictorTest, ReproducesPhimoeRouting) {
  auto f = LoadTiny(testing::FixturesDir() + "/tiny-phimoe");
  ASSERT_NE(f, nullptr);
  auto p = RouterLookaheadPredictor::Create(f->config, *f->ckpt, /*window=*/3, {});
  ASSERT_TRUE(p.ok()) << p.status();
  RouterChecker checker(p->get(), f->config.text);
  ObserverChain chain{p->get(), &checker};
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    (*p)->BeginRequest();
    RunTrace(*f, chain.Head(), seed, 8);
  }
  EXPECT_EQ(checker.exact_checks, 3 * 8 * f->config.text.num_hidden_layers);
  EXPECT_EQ(checker.prefill_checks, 3 * f->config.text.num_hidden_layers);
}

// The families that do not pick the softmax's top-k: DeepSeek-V2's group
// limits, V3's sigmoid with its selection bias and GPT-OSS's biased logits
// (MXFP4 experts here). Aimed at the observed layer, the predictor's top k
// are the layer's own picks at every decode step.
class PickChecker final : public RouterObserver {
 public:
  explicit PickChecker(ExpertPredictor* p) : p_(p) {}
  void OnRouting(Phase phase, int layer, const float*, const RouterResult& r) override {
    if (phase != Phase::kDecode) return;
    const auto predicted = p_->Predict(layer, r.top_k);
    std::set<int> got, want(r.experts.begin(), r.experts.begin() + r.top_k);
    for (const auto& [x, s] : predicted) got.insert(x);
    EXPECT_EQ(got, want) << "layer " << layer;
    ++checks;
  }
  int checks = 0;

 private:
  ExpertPredictor* p_;
};

TEST(RouterLookaheadPredictorTest, ReproducesTheFamiliesOwnPicks) {
  for (const char* fixture : {"tiny-deepseek-v2", "tiny-deepseek-v3", "tiny-gpt-oss-mxfp4"}) {
    SCOPED_TRACE(fixture);
    auto f = LoadTiny(testing::FixturesDir() + "/" + fixture);
    ASSERT_NE(f, nullptr);
    auto p = RouterLookaheadPredictor::Create(f->config, *f->ckpt, /*window=*/3, {});
    ASSERT_TRUE(p.ok()) << p.status();
    PickChecker checker(p->get());
    ObserverChain chain{p->get(), &checker};
    (*p)->BeginRequest();
    RunTrace(*f, chain.Head(), 1, 8);
    int moe_layers = 0;
    for (int l = 0; l < f->config.text.num_hidden_layers; ++l)
      moe_layers += f->config.text.IsMoeLayer(l);
    EXPECT_EQ(checker.checks, 8 * moe_layers);
  }
}

TEST(RouterLookaheadPredictorTest, WindowAndDefaultVectors) {
  auto f = LoadTiny();
  ASSERT_NE(f, nullptr);
  const int h = f->config.text.hidden_size, layers = f->config.text.num_hidden_layers;
  EXPECT_FALSE(
      RouterLookaheadPredictor::Create(f->config, *f->ckpt, 1, std::vector<float>(3)).ok());
  EXPECT_FALSE(RouterLookaheadPredictor::Create(f->config, *f->ckpt, -1, {}).ok());
  // A large default vector dominates the quasi-hidden state: predictions change.
  std::vector<float> d(static_cast<size_t>(layers) * h, 0.0f);
  for (int i = 0; i < h; ++i) d[i] = (i % 3 == 0 ? 50.0f : -20.0f);
  auto plain = RouterLookaheadPredictor::Create(f->config, *f->ckpt, 1, {});
  auto shifted = RouterLookaheadPredictor::Create(f->config, *f->ckpt, 1, d);
  ASSERT_TRUE(plain.ok() && shifted.ok());
  std::vector<float> residual(static_cast<size_t>(h));
  for (int i = 0; i < h; ++i) residual[i] = std::sin(0.37f * i);
  (*plain)->OnPostAttention(Phase::kDecode, 0, residual.data(), 1);
  (*shifted)->OnPostAttention(Phase::kDecode, 0, residual.data(), 1);
  EXPECT_EQ((*plain)->Predict(1, 16).size(), 4u);  // top-k masked: k experts per row
  EXPECT_NE((*plain)->Predict(1, 16), (*shifted)->Predict(1, 16));
  EXPECT_TRUE((*plain)->Predict(2, 4).empty());  // window 1
}

// A random MLP of the right shape.
MlpLookahead RandomMlp(int in, int experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto layer = [&](int i, int o, bool bn) {
    MlpLayer l;
    l.in = i;
    l.out = o;
    l.w.resize(static_cast<size_t>(i) * o);
    l.b.resize(o);
    for (float& v : l.w) v = u(rng);
    for (float& v : l.b) v = u(rng);
    if (bn) {
      l.bn_gamma.assign(o, 1.0f);
      l.bn_beta.assign(o, 0.1f);
      l.bn_mean.assign(o, 0.0f);
      l.bn_var.assign(o, 1.0f);
    }
    return l;
  };
  MlpLookaheadWeights w;
  w.l1 = layer(in, 16, true);
  w.l2 = layer(16, 8, true);
  w.lo = layer(8, experts, false);
  return MlpLookahead(std::move(w));
}

// Records the predictor's features and output after every routing.
class MlpTap final : public RouterObserver {
 public:
  explicit MlpTap(const MlpLookaheadPredictor* p) : p_(p) {}
  void OnRouting(Phase, int, const float*, const RouterResult&) override {
    x.push_back(p_->last_features());
    y.push_back(p_->last_output());
  }
  std::vector<std::vector<float>> x, y;

 private:
  const MlpLookaheadPredictor* p_;
};

TEST(MlpLookaheadPredictorTest, MatchesCalibrationFeaturesAndOutput) {
  auto f = LoadTiny();
  ASSERT_NE(f, nullptr);
  const TextConfig& c = f->config.text;
  ASSERT_TRUE(f->config.has_vision);
  const int width = LookaheadFeatureWidth(c.num_experts, c.hidden_size, true);
  const MlpLookahead mlp = RandomMlp(width, c.num_experts, 7);
  auto p = MlpLookaheadPredictor::Create(f->config, mlp, /*window=*/2);
  ASSERT_TRUE(p.ok()) << p.status();
  MlpTap tap(p->get());
  RoutingTraceRecorder rec(c.hidden_size);
  ObserverChain chain{p->get(), &tap, &rec};
  (*p)->BeginRequest();
  RunTrace(*f, chain.Head(), 3, 5);
  // A text-only request on a vision model: h_v is zeros.
  const std::vector<float> zeros(c.hidden_size, 0.0f);
  const auto examples = BuildLookaheadExamples(rec.steps(), Phase::kDecode, zeros, 2, 0.8f);
  ASSERT_EQ(examples.size(), 5u * 3u);  // every MoE layer but the last of 5 decode steps
  const int moe_layers = 4;
  for (const LookaheadExample& ex : examples) {
    const size_t at = static_cast<size_t>(ex.step) * moe_layers + ex.moe_index;
    ASSERT_LT(at, tap.x.size());
    EXPECT_EQ(tap.x[at], ex.sample.x) << "step " << ex.step << " layer " << ex.moe_index;
    EXPECT_EQ(tap.y[at], mlp.Predict(ex.sample.x));
  }
  // Predict: sigmoid(y) of the last layer's output, for the window ahead only.
  (*p)->BeginRequest();
  std::vector<float> visual(c.hidden_size, 0.25f);
  (*p)->OnVisualSummary(visual);
  RouterResult r;
  r.n = 1;
  r.num_experts = c.num_experts;
  r.top_k = 2;
  r.experts = {5, 9};
  std::vector<float> hidden(c.hidden_size, 1.0f);
  (*p)->OnRouting(Phase::kDecode, 1, hidden.data(), r);
  const std::vector<float>& x = (*p)->last_features();
  ASSERT_EQ(static_cast<int>(x.size()), width);
  EXPECT_EQ(x[5], 1.0f);
  EXPECT_EQ(x[c.num_experts + 5], 0.0f);  // first layer of a new request: no previous
  EXPECT_EQ(x.back(), 0.25f);             // h_v
  const std::vector<float> y = (*p)->last_output();
  const auto top = (*p)->Predict(2, 3);
  ASSERT_EQ(top.size(), 3u);
  std::vector<int> order(y.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return y[a] > y[b]; });
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(top[j].first, order[j]);
    EXPECT_NEAR(top[j].second, 1.0 / (1.0 + std::exp(-double{y[order[j]]})), 1e-12);
  }
  EXPECT_EQ((*p)->Predict(3, 3).size(), 3u);  // window 2
  EXPECT_TRUE((*p)->Predict(1, 3).empty());   // the observed layer itself
  EXPECT_TRUE((*p)->Predict(0, 3).empty());
  // Wrong MLP widths are refused with the numbers.
  auto bad = MlpLookaheadPredictor::Create(f->config, RandomMlp(width - 1, c.num_experts, 1), 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(std::to_string(width)));
  EXPECT_FALSE(MlpLookaheadPredictor::Create(f->config, RandomMlp(width, 7, 1), 2).ok());
}

TEST(HistoryExpertPredictorTest, ObservesDistinctRoutedExperts) {
  HistoryExpertPredictor h(2, 8, 0.5);
  EXPECT_STREQ(h.name(), "history");
  RouterResult r;
  r.n = 2;
  r.num_experts = 8;
  r.top_k = 2;
  r.experts = {3, 1, 3, 6};  // expert 3 twice: counted once per step
  h.OnRouting(Phase::kPrefill, 1, nullptr, r);
  auto p = h.Predict(1, 8);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (std::pair<int, double>{1, 1.0}));
  EXPECT_EQ(p[1], (std::pair<int, double>{3, 1.0}));
  EXPECT_EQ(p[2], (std::pair<int, double>{6, 1.0}));
  EXPECT_TRUE(h.Predict(0, 8).empty());
  h.BeginRequest();  // history is kept across requests
  EXPECT_EQ(h.Predict(1, 1).size(), 1u);
}

TEST(ExpertPredictorFactoryTest, KindsAndErrors) {
  auto f = LoadTiny();
  ASSERT_NE(f, nullptr);
  OffloadOptions o;
  auto none = MakeExpertPredictor("none", f->config, *f->ckpt, o, nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  for (const char* kind : {"history", "router-lookahead"}) {
    auto p = MakeExpertPredictor(kind, f->config, *f->ckpt, o, nullptr);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_STREQ((*p)->name(), kind);
  }
  auto unknown = MakeExpertPredictor("oracle", f->config, *f->ckpt, o, nullptr);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("oracle"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("mlp-lookahead"));
  auto no_profile = MakeExpertPredictor("mlp-lookahead", f->config, *f->ckpt, o, nullptr);
  EXPECT_EQ(no_profile.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_profile.status().message()), HasSubstr("vismoe-calibrate"));
  EXPECT_THAT(std::string(no_profile.status().message()), HasSubstr("--calibration_profile"));
  CalibrationProfile profile;
  auto no_mlp = MakeExpertPredictor("mlp-lookahead", f->config, *f->ckpt, o, &profile);
  EXPECT_EQ(no_mlp.status().code(), absl::StatusCode::kFailedPrecondition);
  const TextConfig& c = f->config.text;
  profile.mlp =
      RandomMlp(LookaheadFeatureWidth(c.num_experts, c.hidden_size, true), c.num_experts, 2);
  auto mlp = MakeExpertPredictor("mlp-lookahead", f->config, *f->ckpt, o, &profile);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_STREQ((*mlp)->name(), "mlp-lookahead");
  profile.default_vectors.assign(5, 0.0f);  // not [layers * hidden]
  EXPECT_FALSE(MakeExpertPredictor("router-lookahead", f->config, *f->ckpt, o, &profile).ok());
  o.history_decay = 0;
  EXPECT_FALSE(MakeExpertPredictor("history", f->config, *f->ckpt, o, nullptr).ok());
  // The text-only layout of the same weights lacks the tensors: the error names one.
  ModelConfig text_only = f->config;
  text_only.model_type = "qwen3_moe";
  auto missing =
      MakeExpertPredictor("router-lookahead", text_only, *f->ckpt, OffloadOptions(), nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("model.layers.0.mlp.gate.weight"));
}

}  // namespace
}  // namespace vismoe
