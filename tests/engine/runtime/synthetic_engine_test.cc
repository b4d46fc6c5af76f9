// Engine with EngineOptions::synthetic_weights: runs from a directory without
// safetensors, is deterministic per seed, and drives the offload runtime on
// the scaled "mid" config.
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

std::string MidDir() { return testing::FixturesDir() + "/synthetic/qwen3-vl-mid"; }

GenerateRequest TextRequest(int max_new_tokens) {
  GenerateRequest r;
  ChatMessage m;
  m.role = "user";
  ContentPart p;
  p.text = "Describe a mixture of experts model.";
  m.content.push_back(p);
  r.messages.push_back(m);
  r.sampling.max_new_tokens = max_new_tokens;
  r.sampling.temperature = 0.0f;  // greedy
  return r;
}

absl::StatusOr<GenerateResult> Generate(const EngineOptions& o, int max_new_tokens) {
  auto engine = Engine::Create(o);
  if (!engine.ok()) return engine.status();
  return (*engine)->Generate(TextRequest(max_new_tokens), GenerateCallbacks{});
}

EngineOptions Synthetic(const std::string& dir, uint64_t seed) {
  EngineOptions o;
  o.model_path = dir;
  o.synthetic_weights = true;
  o.synthetic_seed = seed;
  o.num_threads = 2;
  o.max_context_tokens = 256;
  return o;
}

TEST(SyntheticEngineTest, TinyConfigIsDeterministicPerSeed) {
  auto a = Generate(Synthetic(testing::TinyModelDir(), 7), 8);
  auto b = Generate(Synthetic(testing::TinyModelDir(), 7), 8);
  auto c = Generate(Synthetic(testing::TinyModelDir(), 8), 8);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_FALSE(a->token_ids.empty());
  EXPECT_EQ(a->token_ids, b->token_ids);
  EXPECT_NE(a->token_ids, c->token_ids);
}

TEST(SyntheticEngineTest, MidConfigRunsUnderOffloadBudget) {
  EngineOptions o = Synthetic(MidDir(), 1);
  // Resident 32 MiB + 2 MiB KV cache + one pinned MoE layer (24 MiB): the
  // other seven layers' 168 MiB of experts go through a 7-slab cache.
  o.gpu_memory_budget_bytes = 64LL << 20;
  o.offload.pinned_layers = 1;
  auto r = Generate(o, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->token_ids.empty());
  EXPECT_GT(r->offload.cache_queries, 0u);
  EXPECT_LT(r->offload.cache_hits, r->offload.cache_queries);
  EXPECT_GT(r->offload.bytes_h2d, 0u);
}

TEST(SyntheticEngineTest, WithoutTheFlagTheWeightlessDirectoryIsNotFound) {
  EngineOptions o = Synthetic(MidDir(), 1);
  o.synthetic_weights = false;
  auto e = Engine::Create(o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("model.safetensors"));
}

}  // namespace
}  // namespace vismoe
