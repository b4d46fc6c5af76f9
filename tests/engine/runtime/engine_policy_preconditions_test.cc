// A policy that cannot work in the engine's configuration is refused where it
// is chosen (issue #37): the affinity compressor reads the routing of pinned
// MoE layers, so with none pinned a request asking for it fails at Prepare,
// alone -- eight plain requests running beside it all finish with their
// answers alone -- and an engine whose default is affinity does not start.
#include <string>
#include <thread>
#include <vector>

#include "engine/api/engine.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/memory_plan.h"
#include "gtest/gtest.h"
#include "tests/testing/image_request.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// The tiny model under a budget that pins no MoE layer (two slabs per layer).
EngineOptions NoPinnedLayer() {
  EngineOptions o;
  o.model_path = testing::TinyModelDir();
  o.backend = "cpu";
  o.num_threads = 2;
  o.max_context_tokens = 256;
  o.kv_cache_tokens = 1024;
  auto config = ModelConfig::Load(o.model_path);
  auto ckpt = Checkpoint::Open(o.model_path);
  EXPECT_TRUE(config.ok() && ckpt.ok());
  if (!config.ok() || !ckpt.ok()) return o;
  auto sizes = MeasureModelSizes(**ckpt, config->text, Qwen3VlMoeModel::TextPrefix(*config));
  EXPECT_TRUE(sizes.ok()) << sizes.status();
  if (!sizes.ok()) return o;
  const TextConfig& t = config->text;
  const int64_t kv_bytes =
      2 * int64_t{t.num_hidden_layers} * t.num_key_value_heads * t.head_dim * o.kv_cache_tokens * 4;
  o.gpu_memory_budget_bytes = sizes->resident_bytes + kv_bytes + 8 * sizes->expert_bytes;
  o.offload.pinned_layers = 0;
  o.max_running_sequences = 9;
  return o;
}

GenerateRequest Text(int i) {
  GenerateRequest r;
  ChatMessage m;
  m.role = "user";
  ContentPart p;
  p.text = "Tell me about the number " + std::to_string(7 * i + 3) + ".";
  m.content.push_back(p);
  r.messages.push_back(m);
  r.sampling.max_new_tokens = 12 + i;
  return r;
}

TEST(EnginePolicyPreconditionsTest, AnAffinityRequestFailsAloneWithNoPinnedLayer) {
  auto engine = Engine::Create(NoPinnedLayer());
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<GenerateResult> alone(9);
  for (int i = 0; i < 9; ++i) {
    if (i == 4) continue;  // the affinity request's place
    auto r = (*engine)->Generate(Text(i), {});
    ASSERT_TRUE(r.ok()) << r.status();
    alone[i] = *r;
  }
  GenerateRequest affinity = testing::PatternImageRequest(20);
  affinity.policy.token_compressor = "affinity";
  std::vector<absl::StatusOr<GenerateResult>> out(9, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 9; ++i) {
    threads.emplace_back([&, i] { out[i] = (*engine)->Generate(i == 4 ? affinity : Text(i), {}); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(out[4].status().code(), absl::StatusCode::kFailedPrecondition) << out[4].status();
  EXPECT_NE(out[4].status().message().find("policy.token_compressor \"affinity\""),
            std::string::npos)
      << out[4].status();
  for (int i = 0; i < 9; ++i) {
    if (i == 4) continue;
    ASSERT_TRUE(out[i].ok()) << "request " << i << ": " << out[i].status();
    EXPECT_EQ(out[i]->token_ids, alone[i].token_ids) << "request " << i;
  }
}

TEST(EnginePolicyPreconditionsTest, AnAffinityDefaultWithNoPinnedLayerDoesNotStart) {
  EngineOptions o = NoPinnedLayer();
  o.compression.kind = "affinity";
  auto engine = Engine::Create(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition) << engine.status();
  EXPECT_NE(engine.status().message().find("token_compressor \"affinity\""), std::string::npos)
      << engine.status();
  // Saliency needs no routing: it starts.
  o.compression.kind = "saliency";
  EXPECT_TRUE(Engine::Create(o).ok());
}

}  // namespace
}  // namespace vismoe
