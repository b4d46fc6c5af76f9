// The routing-realistic synthetic weights (engine/model/synthetic_routing.h)
// through the Engine on the scaled "mid" config (8 MoE layers, 32 experts
// top-4): the model's own decode routing, sampled at temperature 1, is
// neither constant (the random mode's failure: most of a token's experts the
// previous token's, a handful of experts in use) nor uniformly random (a
// repeat of k / E = 0.125 and an LRU hit ratio near the cache's share of
// experts). And the construction's invariants hold in the tensors.
#include <cmath>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "engine/calibrate/routing_stats.h"
#include "engine/core/dtype.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

std::string MidDir() { return testing::FixturesDir() + "/synthetic/qwen3-vl-mid"; }

// Decode routing statistics of one sampled 160-token answer.
RoutingStats DecodeStats(const std::string& routing) {
  EngineOptions o;
  o.model_path = MidDir();
  o.synthetic_weights = true;
  o.synthetic_routing = routing;
  o.num_threads = 2;
  o.max_context_tokens = 512;
  auto engine = Engine::Create(o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  GenerateRequest r;
  ChatMessage m;
  m.role = "user";
  ContentPart p;
  p.text = "Write a long story about a lighthouse keeper.";
  m.content.push_back(p);
  r.messages.push_back(m);
  r.sampling.max_new_tokens = 160;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 11;
  RoutingStatsRecorder rec;
  GenerateCallbacks cb;
  cb.router_observer = &rec;
  auto result = (*engine)->Generate(r, cb);
  EXPECT_TRUE(result.ok()) << result.status();
  std::vector<const LayerSequence*> seqs;
  for (const LayerSequence& s : rec.decode()) seqs.push_back(&s);
  RoutingStatsOptions so;
  so.num_experts = 32;
  so.cache_fractions = {0.4};
  so.warmup_tokens = 32;
  return ComputeRoutingStats(seqs, so);
}

TEST(SyntheticRoutingTest, RealisticDecodeIsNeitherConstantNorUniform) {
  const RoutingStats real = DecodeStats("realistic");
  const RoutingStats rand = DecodeStats("random");
  ASSERT_EQ(real.sequences, 8);  // every MoE layer decoded
  ASSERT_GE(real.tokens, 8 * 100);
  // Neither constant ...
  EXPECT_LT(real.next_token_repeat, 0.6);
  EXPECT_LT(real.cache[0].lru_hit, 0.95);
  EXPECT_GT(real.distinct_per_window, rand.distinct_per_window + 5);
  // ... nor uniform (0.125 and ~0.4).
  EXPECT_GT(real.next_token_repeat, 0.2);
  EXPECT_LE(real.reuse_median, 4);
  EXPECT_GT(real.cache[0].lru_hit, 0.6);
  // The random mode's degenerate routing, for contrast.
  EXPECT_GT(rand.next_token_repeat, real.next_token_repeat + 0.2);
}

TEST(SyntheticRoutingTest, UnknownModeIsRefused) {
  EngineOptions o;
  o.model_path = MidDir();
  o.synthetic_weights = true;
  o.synthetic_routing = "zipf";
  auto engine = Engine::Create(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(engine.status().message(), HasSubstr("zipf"));
}

// The construction: z (hidden dimension 0) is written by the embeddings and
// the final merger's bias only, read by q_proj / k_proj only (and by the
// router, as each expert's popularity); the rest of the residual stream never
// touches it.
TEST(SyntheticRoutingTest, PositionChannelInvariants) {
  auto config = ModelConfig::Load(MidDir());
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = SynthesizeCheckpoint(*config, 0, nullptr, "synthetic", SyntheticRouting::kRealistic);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  auto get = [&](const std::string& name) {
    auto t = c.Get(name);
    EXPECT_TRUE(t.ok()) << name;
    return t.ok() ? *t : TensorView{};
  };
  auto at = [](const TensorView& t, int64_t i) {
    return Bf16ToFloat(static_cast<const uint16_t*>(t.data)[i]);
  };
  const int64_t h = config->text.hidden_size;
  const std::string lp = "model.language_model.layers.3.";
  const TensorView embed = get("model.language_model.embed_tokens.weight");
  EXPECT_FLOAT_EQ(at(embed, 0), at(embed, 17 * h));  // the same z in every row
  EXPECT_GT(at(embed, 0), 0.0f);
  const TensorView q = get(lp + "self_attn.q_proj.weight");
  int nonzero = 0;
  for (int64_t i = 0; i < q.shape[0] * h; ++i) {
    if (at(q, i) != 0.0f) {
      ++nonzero;
      EXPECT_EQ(i % h, 0) << "q_proj reads dimension " << i % h;
    }
  }
  EXPECT_EQ(nonzero, config->text.num_attention_heads);  // one dimension per head
  const TensorView o = get(lp + "self_attn.o_proj.weight");
  for (int64_t j = 0; j < o.shape[1]; ++j) EXPECT_EQ(at(o, j), 0.0f) << "o_proj writes z";
  const TensorView v = get(lp + "self_attn.v_proj.weight");
  for (int64_t r = 0; r < v.shape[0]; ++r) EXPECT_EQ(at(v, r * h), 0.0f) << "v_proj reads z";
  const TensorView router = get(lp + "mlp.gate.weight");
  int popular = 0;
  for (int64_t e = 0; e < router.shape[0]; ++e) popular += at(router, e * h) != 0.0f;
  EXPECT_GT(popular, 0) << "the router reads z as popularity";
}

}  // namespace
}  // namespace vismoe
