// Label parity with every expert predictor: prefetch and predictor-driven
// guarded eviction only move weights earlier, so logits stay bit-identical to
// the all-resident run under small budgets; and the Engine wiring (calibration
// profile loading, the observer chain, mlp-lookahead from a profile) keeps the
// greedy tokens of the resident engine, with clear errors for a missing or
// mismatched profile.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/policy/calibration_profile.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/policy/expert_predictor_factory.h"
#include "engine/policy/lookahead_features.h"
#include "engine/api/engine.h"
#include "engine/runtime/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/greedy_decode.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

constexpr int kDecodeSteps = 8;

// A profile that matches the tiny model, with a random (untrained) MLP and
// default vectors: enough to drive the mlp-lookahead and router-lookahead paths.
CalibrationProfile TinyProfile(const ModelConfig& config) {
  const TextConfig& c = config.text;
  CalibrationProfile p;
  p.model_type = config.model_type;
  p.num_layers = c.num_hidden_layers;
  p.num_experts = c.num_experts;
  p.hidden_size = c.hidden_size;
  p.has_vision = config.has_vision;
  p.window = 2;
  p.prefetch_count = c.num_experts_per_tok;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  auto layer = [&](int in, int out, bool bn) {
    MlpLayer l;
    l.in = in;
    l.out = out;
    l.w.resize(static_cast<size_t>(in) * out);
    l.b.resize(out);
    for (float& v : l.w) v = u(rng);
    for (float& v : l.b) v = u(rng);
    if (bn) {
      l.bn_gamma.assign(out, 1.0f);
      l.bn_beta.assign(out, 0.0f);
      l.bn_mean.assign(out, 0.0f);
      l.bn_var.assign(out, 1.0f);
    }
    return l;
  };
  MlpLookaheadWeights w;
  w.l1 = layer(LookaheadFeatureWidth(c.num_experts, c.hidden_size, config.has_vision), 16, true);
  w.l2 = layer(16, 8, true);
  w.lo = layer(8, c.num_experts, false);
  p.mlp = MlpLookahead(std::move(w));
  p.default_vectors.resize(static_cast<size_t>(c.num_hidden_layers) * c.hidden_size);
  for (float& v : p.default_vectors) v = u(rng);
  return p;
}

TEST(PredictorParityTest, EveryPredictorKeepsLogitsBitIdentical) {
  const std::string dir = testing::TinyModelDir();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::string prefix = Qwen3VlMoeModel::TextPrefix(*config);
  auto resident = ResidentExpertProvider::Create(**ckpt, config->text, prefix);
  ASSERT_TRUE(resident.ok()) << resident.status();
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto sizes = MeasureModelSizes(**ckpt, config->text, prefix);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  const nlohmann::json cases = testing::TextCases();
  ASSERT_TRUE(cases.is_array() && !cases.empty());
  std::vector<std::vector<std::vector<float>>> want;
  for (const auto& c : cases) {
    want.push_back(testing::GreedyLogits(**model, resident->get(),
                                         c["input_ids"].get<std::vector<int>>(), kDecodeSteps));
  }
  const CalibrationProfile profile = TinyProfile(*config);
  const int e = config->text.num_experts;
  struct Variant {
    int pinned, slabs;
    const char* eviction;
    const char* predictor;
  };
  const Variant variants[] = {{0, 1, "guarded", "router-lookahead"},
                              {1, 2, "guarded", "router-lookahead"},
                              {1, 5, "lru", "router-lookahead"},
                              {0, 3, "guarded", "mlp-lookahead"},
                              {1, 6, "lfu", "mlp-lookahead"},
                              {1, 4, "guarded", "history"},
                              {0, 1, "lru", "history"}};
  for (const Variant& v : variants) {
    MemoryPlanOptions po;
    po.pinned_layers = v.pinned;
    po.budget_bytes = sizes->resident_bytes +
                      (static_cast<int64_t>(v.pinned) * e + v.slabs) * sizes->expert_bytes;
    auto plan = MakeMemoryPlan(*sizes, po);
    ASSERT_TRUE(plan.ok()) << plan.status();
    OffloadOptions oo;
    oo.eviction = v.eviction;
    oo.prefetch = v.predictor;
    oo.lookahead_window = 2;
    auto predictor = MakeExpertPredictor(v.predictor, *config, **ckpt, oo, &profile);
    ASSERT_TRUE(predictor.ok()) << predictor.status();
    auto offload = OffloadExpertProvider::Create(**resident, config->text, *plan, oo, nullptr,
                                                 std::move(*predictor));
    ASSERT_TRUE(offload.ok()) << offload.status();
    ASSERT_NE((*offload)->observer(), nullptr);
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << v.predictor << " " << v.eviction << " pinned "
                                        << v.pinned << " slabs " << v.slabs << " case " << i);
      (*offload)->BeginRequest();
      auto got = testing::GreedyLogits(**model, offload->get(),
                                       cases[i]["input_ids"].get<std::vector<int>>(), kDecodeSteps,
                                       (*offload)->observer());
      EXPECT_TRUE(testing::BitIdentical(got, want[i]));
      std::string why;
      EXPECT_TRUE((*offload)->CheckInvariants(&why)) << why;
    }
    (*offload)->WaitForTransfers();
    const OffloadStats s = (*offload)->TakeRequestStats();
    std::printf(
        "[predictor-parity] %-16s %-7s pinned %d slabs %d: hot recall %.3f, %llu issued, "
        "%llu used\n",
        v.predictor, v.eviction, v.pinned, v.slabs,
        s.prefetch_needed > 0
            ? static_cast<double>(s.prefetch_recalled) / static_cast<double>(s.prefetch_needed)
            : 0.0,
        static_cast<unsigned long long>(s.prefetch_issued),
        static_cast<unsigned long long>(s.prefetch_used));
    // While a pinned layer runs every slab is free to prefetch into.
    if (v.pinned > 0) {
      EXPECT_GT(s.prefetch_issued, 0u);
    }
    EXPECT_EQ(s.bytes_h2d, (s.prefetch_needed - s.prefetch_recalled + s.prefetch_issued) *
                               (*offload)->format().bytes);
  }
}

// Generates `prompt` (and one image when `image`) with the engine; greedy.
absl::StatusOr<GenerateResult> Generate(Engine& engine, bool image, bool compress,
                                        RouterObserver* observer = nullptr) {
  GenerateRequest req;
  if (compress) req.policy.token_compressor = "affinity";
  ChatMessage m;
  m.role = "user";
  if (image) {
    req.images.resize(1);
    RgbImage& img = req.images[0];
    img.width = img.height = 64;
    for (int y = 0; y < 64; ++y) {
      for (int x = 0; x < 64; ++x) {
        img.pixels.push_back(static_cast<uint8_t>(4 * x));
        img.pixels.push_back(static_cast<uint8_t>(4 * y));
        img.pixels.push_back(static_cast<uint8_t>(x ^ y));
      }
    }
    ContentPart part;
    part.kind = ContentPart::Kind::kImage;
    part.image_index = 0;
    m.content.push_back(part);
  }
  ContentPart text;
  text.text = "Describe what you see in two words.";
  m.content.push_back(text);
  req.messages.push_back(m);
  req.sampling.max_new_tokens = 5;
  GenerateCallbacks cb;
  cb.router_observer = observer;
  return engine.Generate(req, cb);
}

// Counts what the engine feeds a caller's observer.
class CountingObserver final : public RouterObserver {
 public:
  void OnRouting(Phase, int, const float*, const RouterResult&) override { ++routings; }
  void OnPostAttention(Phase, int, const float*, int64_t) override { ++residuals; }
  void OnMoeOutput(Phase, int, const float*, int64_t) override { ++outputs; }
  void OnVisualSummary(absl::Span<const float> s) override { summaries.push_back(s.size()); }
  int routings = 0, residuals = 0, outputs = 0;
  std::vector<size_t> summaries;
};

TEST(PredictorParityTest, EngineLoadsProfileAndKeepsTokens) {
  EngineOptions base;
  base.model_path = testing::TinyModelDir();
  base.backend = "cpu";
  base.num_threads = 1;
  base.max_context_tokens = 256;
  auto resident = Engine::Create(base);
  ASSERT_TRUE(resident.ok()) << resident.status();
  auto config = ModelConfig::Load(base.model_path);
  ASSERT_TRUE(config.ok());
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/vismoe_predictor_profile.json";
  ASSERT_TRUE(TinyProfile(*config).Save(good).ok());

  auto ckpt = Checkpoint::Open(base.model_path);
  ASSERT_TRUE(ckpt.ok());
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  ASSERT_TRUE(sizes.ok());
  ThreadPool pool(1);
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok());
  EngineOptions o = base;
  // One pinned MoE layer and three slabs.
  o.gpu_memory_budget_bytes = sizes->resident_bytes +
                              (*model)->NewKvCache(base.max_context_tokens)->bytes() +
                              (int64_t{config->text.num_experts} + 3) * sizes->expert_bytes;
  o.offload.pinned_layers = 1;
  o.offload.eviction = "guarded";
  o.offload.lookahead_window = 2;
  // mlp-lookahead without a profile: a clear error at Create.
  o.offload.prefetch = "mlp-lookahead";
  auto no_profile = Engine::Create(o);
  ASSERT_FALSE(no_profile.ok());
  EXPECT_EQ(no_profile.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_profile.status().message()), HasSubstr("--calibration_profile"));
  // A missing file names the path.
  o.calibration_profile = dir + "/no_such_profile.json";
  auto missing = Engine::Create(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no_such_profile.json"));
  // A profile of another model names the field.
  CalibrationProfile other = TinyProfile(*config);
  other.model_type = "qwen3_moe";
  const std::string bad = dir + "/vismoe_predictor_profile_other.json";
  ASSERT_TRUE(other.Save(bad).ok());
  o.calibration_profile = bad;
  auto mismatched = Engine::Create(o);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(mismatched.status().message()), HasSubstr("model_type"));

  o.calibration_profile = good;
  for (const char* kind : {"mlp-lookahead", "router-lookahead"}) {
    SCOPED_TRACE(kind);
    o.offload.prefetch = kind;
    auto engine = Engine::Create(o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (int variant = 0; variant < 3; ++variant) {
      const bool image = variant > 0, compress = variant == 2;
      SCOPED_TRACE(::testing::Message() << "image " << image << " compress " << compress);
      CountingObserver seen;
      auto a = Generate(**resident, image, compress);
      auto b = Generate(**engine, image, compress, &seen);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(a->token_ids, b->token_ids);
      EXPECT_GT(b->offload.prefetch_needed, 0u);
      // Every MoE layer of every step reaches the caller's observer.
      EXPECT_GT(seen.routings, 0);
      EXPECT_EQ(seen.residuals, seen.routings);
      EXPECT_EQ(seen.outputs, seen.routings);
      // h_v before prefill, and again over the kept tokens after compression.
      EXPECT_EQ(seen.summaries.size(), image ? (compress ? 2u : 1u) : 0u);
      for (size_t s : seen.summaries) EXPECT_EQ(s, static_cast<size_t>(config->text.hidden_size));
    }
  }
}

}  // namespace
}  // namespace vismoe
