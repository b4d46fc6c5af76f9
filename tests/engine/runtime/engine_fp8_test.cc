// FP8 experts through the whole engine on the CPU backend: an FP8 checkpoint
// (tests/fixtures/tiny-qwen3-vl-moe-fp8) answers its transformers goldens all
// resident and under an offload budget, reading its experts from the mapped
// checkpoint or a packed store (also the text-only tiny-qwen3-moe-fp8, whose
// block scales are BF16); --expert_dtype=fp8 quantises a bf16 model's
// experts at load, and every budget then gives the same answer; in both, an
// expert copy moves about half the bytes of a bf16 one.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/api/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/offload_budget.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

EngineOptions Options(const std::string& fixture) {
  EngineOptions o;
  o.model_path = testing::FixturesDir() + "/" + fixture;
  o.backend = "cpu";
  o.num_threads = 2;
  o.max_context_tokens = 256;
  return o;
}

// One pinned MoE layer and three slabs, no prefetch: every copied byte is a
// miss's, so bytes_h2d / misses is the bytes of one expert copy.
void Offload(EngineOptions* o, const char* host_experts) {
  o->gpu_memory_budget_bytes = testing::OffloadBudget(*o, 1, 3);
  o->offload.pinned_layers = 1;
  o->offload.prefetch = "none";
  o->offload.host_experts = host_experts;
}

struct Answers {
  std::vector<std::vector<int>> tokens;
  uint64_t bytes_h2d = 0, misses = 0;
  ModelInfo info;  // the plan's slab size and counts
  double BytesPerCopy() const { return misses == 0 ? 0 : double(bytes_h2d) / double(misses); }
};

Answers Answer(const EngineOptions& o, const nlohmann::json& cases) {
  Answers run;
  auto engine = Engine::Create(o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return run;
  run.info = (*engine)->info();
  for (size_t i = 0; i < 2; ++i) {
    auto r = (*engine)->Generate(testing::TextRequestFromCase(cases[i], 16), {});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return run;
    run.tokens.push_back(r->token_ids);
    run.bytes_h2d += r->offload.bytes_h2d;
    run.misses += r->offload.cache_queries - r->offload.cache_hits;
  }
  return run;
}

std::vector<int> Prefix(const nlohmann::json& c, size_t n) {
  const std::vector<int> all = c["greedy_ids"].get<std::vector<int>>();
  return std::vector<int>(all.begin(), all.begin() + std::min(n, all.size()));
}

TEST(EngineFp8Test, Fp8CheckpointAnswersItsGoldensResidentAndOffloaded) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/fp8/text_cases.json");
  ASSERT_TRUE(cases.is_array() && cases.size() >= 2);
  EngineOptions bf16 = Options("tiny-qwen3-vl-moe");
  Offload(&bf16, "packed");
  const Answers bf16_run = Answer(bf16, cases);
  for (const char* host_experts : {"", "mapped", "packed"}) {
    SCOPED_TRACE(*host_experts == 0 ? "resident" : host_experts);
    EngineOptions o = Options("tiny-qwen3-vl-moe-fp8");
    if (*host_experts != 0) Offload(&o, host_experts);
    const Answers run = Answer(o, cases);
    ASSERT_EQ(run.tokens.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(run.tokens[i], Prefix(cases[i], run.tokens[i].size()));
    }
    if (*host_experts == 0) {
      // The CPU kernels read the checkpoint's FP8 experts in place: no offload runtime.
      EXPECT_EQ(run.bytes_h2d, 0u);
      EXPECT_EQ(run.info.slab_bytes, 0);
      continue;
    }
    // 3 x (6144 e4m3 bytes + 32 scale bytes, each 64-byte aligned): the plan's
    // slab is what a copy moves.
    EXPECT_EQ(run.info.slab_bytes, 3 * (6144 + 64));
    EXPECT_EQ(run.info.pinned_layers, 1);
    EXPECT_EQ(run.info.num_slabs, 3);  // OffloadBudget measures as the plan does
    ASSERT_GT(run.misses, 0u);
    // vs 3 x 12288 bf16 bytes.
    EXPECT_EQ(run.BytesPerCopy(), run.info.slab_bytes);
    EXPECT_LT(run.BytesPerCopy() / bf16_run.BytesPerCopy(), 0.51);
  }
}

// A text-only FP8 checkpoint whose block scales are BF16: the same answers
// resident and offloaded, copies of e4m3 bytes and 2-byte scales.
TEST(EngineFp8Test, Bf16ScalesTextCheckpointAnswersItsGoldens) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/fp8_text_cases.json");
  ASSERT_TRUE(cases.is_array() && cases.size() >= 2);
  for (const char* host_experts : {"", "mapped", "packed"}) {
    SCOPED_TRACE(*host_experts == 0 ? "resident" : host_experts);
    EngineOptions o = Options("tiny-qwen3-moe-fp8");
    if (*host_experts != 0) Offload(&o, host_experts);
    const Answers run = Answer(o, cases);
    ASSERT_EQ(run.tokens.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(run.tokens[i], Prefix(cases[i], run.tokens[i].size()));
    }
    if (*host_experts == 0) continue;
    ASSERT_GT(run.misses, 0u);
    // 3 x (6144 e4m3 bytes + 8 BF16 scales, 64-byte aligned).
    EXPECT_EQ(run.info.slab_bytes, 3 * (6144 + 64));
    EXPECT_EQ(run.BytesPerCopy(), run.info.slab_bytes);
  }
}

TEST(EngineFp8Test, ExpertDtypeFp8QuantisesABf16ModelsExpertsAtLoad) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/text_cases.json");
  ASSERT_TRUE(cases.is_array() && cases.size() >= 2);
  EngineOptions bf16 = Options("tiny-qwen3-vl-moe");
  Offload(&bf16, "packed");
  const Answers bf16_run = Answer(bf16, cases);
  EXPECT_EQ(bf16_run.info.slab_bytes, 3 * 12288);
  EXPECT_EQ(bf16_run.info.num_slabs, 3);
  EngineOptions o = Options("tiny-qwen3-vl-moe");
  o.offload.expert_dtype = "fp8";
  const Answers resident = Answer(o, cases);
  Offload(&o, "auto");
  o.offload.expert_dtype = "fp8";
  const Answers offloaded = Answer(o, cases);
  ASSERT_EQ(resident.tokens.size(), 2u);
  // The offload runtime is exact over the quantised experts.
  EXPECT_EQ(offloaded.tokens, resident.tokens);
  EXPECT_EQ(resident.bytes_h2d, 0u);
  // Without a budget the quantised experts sit in an everything-pinned plan.
  EXPECT_EQ(resident.info.slab_bytes, 3 * (6144 + 64));
  EXPECT_EQ(resident.info.num_slabs, 0);
  EXPECT_EQ(resident.info.pinned_layers, resident.info.num_layers);  // every layer is MoE
  ASSERT_GT(offloaded.misses, 0u);
  // 128 x 128 blocks: gate/up [48, 128] and down [128, 48] hold one scale each.
  EXPECT_EQ(offloaded.BytesPerCopy(), 3 * (6144 + 64));
  EXPECT_LT(offloaded.BytesPerCopy() / bf16_run.BytesPerCopy(), 0.51);
  // Quantisation changes the weights, so some answer differs from bf16's
  // (if none did, the option would not be in effect).
  EXPECT_NE(resident.tokens, bf16_run.tokens);
}

// DeepSeek (#33): only the routed experts are quantised (the shared experts
// stay as loaded, resident), and the offload runtime is exact over them.
TEST(EngineFp8Test, ExpertDtypeFp8QuantisesDeepseekRoutedExperts) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_v2_lite_cases.json");
  ASSERT_TRUE(cases.is_array() && cases.size() >= 2);
  EngineOptions bf16 = Options("tiny-deepseek-v2-lite");
  Offload(&bf16, "auto");
  const Answers bf16_run = Answer(bf16, cases);
  EngineOptions o = Options("tiny-deepseek-v2-lite");
  o.offload.expert_dtype = "fp8";
  const Answers resident = Answer(o, cases);
  Offload(&o, "auto");
  o.offload.expert_dtype = "fp8";
  const Answers offloaded = Answer(o, cases);
  ASSERT_EQ(resident.tokens.size(), 2u);
  EXPECT_EQ(offloaded.tokens, resident.tokens);
  ASSERT_GT(offloaded.misses, 0u);
  // Experts [32, 128] / [128, 32]: 4096 e4m3 bytes and one 64-byte-aligned scale each.
  EXPECT_EQ(offloaded.BytesPerCopy(), 3 * (4096 + 64));
  EXPECT_EQ(bf16_run.BytesPerCopy(), 3 * 8192);  // F16 experts as loaded
  // This tiny model's greedy answers survive the quantisation.
  EXPECT_EQ(resident.tokens, bf16_run.tokens);
}

// GPT-OSS interleaves gate and up columns, which the load-time quantiser
// does not keep: refused by name until it does.
TEST(EngineFp8Test, ExpertDtypeFp8IsRefusedForGptOss) {
  EngineOptions o = Options("tiny-gpt-oss");
  o.offload.expert_dtype = "fp8";
  auto engine = Engine::Create(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_TRUE(
      absl::StrContains(engine.status().message(), "expert_dtype=fp8 is not supported for gpt_oss"))
      << engine.status();
}

// A bad dtype is refused by name. FP8 experts on the CUDA backend (widened
// before their GEMMs) have not run on a GPU: "auto" keeps them on the CPU,
// with or without a device, as it keeps an FP8 checkpoint.
TEST(EngineFp8Test, ExpertDtypeIsCheckedAndAutoKeepsFp8ExpertsOnTheCpu) {
  EngineOptions o = Options("tiny-qwen3-vl-moe");
  o.offload.expert_dtype = "int4";
  auto bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "expert_dtype must be auto or fp8"))
      << bad.status();
  o.offload.expert_dtype = "fp8";
  o.backend = "auto";
  auto quantised = Engine::Create(o);
  ASSERT_TRUE(quantised.ok()) << quantised.status();
  EXPECT_EQ((*quantised)->info().backend, "cpu");
  EngineOptions fp8 = Options("tiny-qwen3-vl-moe-fp8");
  fp8.backend = "auto";
  auto engine = Engine::Create(fp8);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().backend, "cpu");
}

}  // namespace
}  // namespace vismoe
