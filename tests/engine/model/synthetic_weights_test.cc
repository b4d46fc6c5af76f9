// Synthetic weights: the spec list equals what the fixtures hold (so it is
// what the loaders read), the 30B-shaped byte counts equal the reference
// figures, the bytes depend on the seed only, and bad configs fail clearly.
#include "engine/model/synthetic_weights.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/arch/qwen3_vl_moe.h"
#include "engine/arch/qwen3_vl_vision.h"
#include "engine/core/dtype.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/offload/resident_expert_provider.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

ModelConfig LoadConfig(const std::string& dir) {
  auto c = ModelConfig::Load(dir);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

// name -> shape of the fixture checkpoint vs of the spec list.
void ExpectSpecsMatchCheckpoint(const std::string& dir) {
  const ModelConfig config = LoadConfig(dir);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::map<std::string, Shape> want;
  for (const std::string& name : (*ckpt)->Names()) want[name] = (*ckpt)->Get(name)->shape;
  auto specs = ExpectedTensors(config);
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::map<std::string, Shape> got;
  for (const TensorSpec& s : *specs) {
    EXPECT_TRUE(got.emplace(s.name, s.shape).second) << "duplicate " << s.name;
    EXPECT_EQ(s.dtype, DType::kBF16);
  }
  EXPECT_EQ(got, want) << dir;
}

TEST(SyntheticWeightsTest, SpecsEqualTinyQwen3VlMoeFixture) {
  ExpectSpecsMatchCheckpoint(testing::TinyModelDir());
}

TEST(SyntheticWeightsTest, SpecsEqualTinyQwen3MoeFixture) {
  ExpectSpecsMatchCheckpoint(testing::FixturesDir() + "/tiny-qwen3-moe");
}

TEST(SyntheticWeightsTest, TiedEmbeddingsDropLmHead) {
  ModelConfig config = LoadConfig(testing::TinyModelDir());
  config.text.tie_word_embeddings = true;
  auto specs = ExpectedTensors(config);
  ASSERT_TRUE(specs.ok()) << specs.status();
  for (const TensorSpec& s : *specs) EXPECT_NE(s.name, "lm_head.weight");
}

// Bytes of the Qwen3-VL-30B-A3B-shaped fixture against the reference figures
// (/work/shared/reference/qwen3-vl-moe.md), computed here term by term.
TEST(SyntheticWeightsTest, ThirtyBShapedSizesMatchReference) {
  const ModelConfig config = LoadConfig(testing::FixturesDir() + "/synthetic/qwen3-vl-30b-a3b");
  auto sizes = MeasureSynthetic(config);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(sizes->expert_bytes, int64_t{3} * 2048 * 768 * 2);  // 9.44 MB
  EXPECT_EQ(sizes->num_experts_total, int64_t{128} * 48);
  EXPECT_EQ(sizes->expert_bytes_total, int64_t{128} * 48 * 3 * 2048 * 768 * 2);

  const int64_t layer = 4096 * 2048 + 2 * 512 * 2048 + 2048 * 4096  // q, k, v, o
                        + 2 * 2048 + 2 * 128                        // layer norms, q/k norms
                        + 128 * 2048;                               // router
  const int64_t text = 2 * int64_t{151936} * 2048 + 2048 + 48 * layer;
  const int64_t block =
      4 * 1152 + 3456 * 1152 + 3456 + 1152 * 1152 + 1152 + 4304 * 1152 + 4304 + 1152 * 4304 + 1152;
  const int64_t merger_tail = 4608 * 4608 + 4608 + 2048 * 4608 + 2048;
  const int64_t vision = 1152 * 3 * 2 * 16 * 16 + 1152 + 2304 * 1152 + 27 * block +
                         (2 * 1152 + merger_tail) + 3 * (2 * 4608 + merger_tail);
  EXPECT_EQ(sizes->total_bytes - sizes->expert_bytes_total, 2 * (text + vision));
  // About 31 billion parameters in all, as the published model.
  EXPECT_NEAR(static_cast<double>(sizes->total_bytes) / 2 / 1e9, 31.1, 0.2);
}

// The DeepSeek-V2-Lite-shaped fixture (the published config.json, for the
// GPU benchmark of a latent-attention model): one expert's bytes as the
// README's table gives them, the latent attention, shared experts and the
// dense first layer term by term, and the published 15.7B parameters.
TEST(SyntheticWeightsTest, DeepseekV2LiteShapedSizesMatchThePublishedModel) {
  const ModelConfig config = LoadConfig(testing::FixturesDir() + "/synthetic/deepseek-v2-lite");
  ASSERT_TRUE(config.text.mla.has_value());
  EXPECT_EQ(config.text.mla->kv_lora_rank, 512);
  EXPECT_EQ(config.text.KvRowElems(), 512 + 64);  // the latent KV cache's row
  ASSERT_TRUE(config.text.yarn.has_value());
  auto sizes = MeasureSynthetic(config);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(sizes->expert_bytes, 17301504);  // 3 x 2048 x 1408 bf16
  EXPECT_EQ(sizes->num_experts_total, int64_t{64} * 26);
  const int64_t h = 2048;
  const int64_t attention = 16 * 192 * h          // q_proj
                            + 576 * h + 512       // kv_a_proj_with_mqa, kv_a_layernorm
                            + 4096 * 512          // kv_b_proj
                            + h * 2048            // o_proj
                            + 2 * h;              // the layer's norms
  const int64_t moe = 64 * h + 3 * h * 2 * 1408;  // router, two shared experts
  const int64_t text = 2 * int64_t{102400} * h + h + 27 * attention + 3 * h * 10944 + 26 * moe;
  EXPECT_EQ(sizes->total_bytes - sizes->expert_bytes_total, 2 * text);
  EXPECT_NEAR(static_cast<double>(sizes->total_bytes) / 2 / 1e9, 15.7, 0.05);
}

// The branches no fixture covers (dense MLP layers, attention biases, tied
// embeddings, per-expert layout with vision off): the loaders accept the specs.
TEST(SyntheticWeightsTest, LoadersAcceptSpecsOfUncoveredBranches) {
  for (const std::string& dir :
       {testing::TinyModelDir(), testing::FixturesDir() + "/tiny-qwen3-moe"}) {
    ModelConfig config = LoadConfig(dir);
    config.text.mlp_only_layers = {1};
    config.text.attention_bias = true;
    config.text.tie_word_embeddings = true;
    auto ckpt = SynthesizeCheckpoint(config, 5, nullptr, "synthetic:" + dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto model = Qwen3VlMoeModel::Create(config, **ckpt, nullptr);
    EXPECT_TRUE(model.ok()) << dir << ": " << model.status();
    auto experts =
        ResidentExpertProvider::Create(**ckpt, config.text, Qwen3VlMoeModel::TextPrefix(config));
    EXPECT_TRUE(experts.ok()) << dir << ": " << experts.status();
    EXPECT_TRUE(
        (*ckpt)->Has(Qwen3VlMoeModel::TextPrefix(config) + "layers.1.mlp.gate_proj.weight"));
    if (config.has_vision) {
      auto vision = Qwen3VlVisionModel::Create(config, **ckpt, nullptr);
      EXPECT_TRUE(vision.ok()) << vision.status();
    }
  }
}

std::vector<uint16_t> Bytes(const Checkpoint& c, const std::string& name) {
  const TensorView v = *c.Get(name);
  std::vector<uint16_t> out(static_cast<size_t>(v.numel()));
  std::memcpy(out.data(), v.data, v.nbytes());
  return out;
}

TEST(SyntheticWeightsTest, SeededBytesIndependentOfThreads) {
  const ModelConfig config = LoadConfig(testing::TinyModelDir());
  ThreadPool pool(2);
  auto a = SynthesizeCheckpoint(config, 1, nullptr, "synthetic:a");
  auto b = SynthesizeCheckpoint(config, 1, &pool, "synthetic:b");
  auto c = SynthesizeCheckpoint(config, 2, &pool, "synthetic:c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((*a)->num_shards(), 0u);
  EXPECT_EQ((*b)->dir(), "synthetic:b");
  const auto specs = *ExpectedTensors(config);
  ASSERT_EQ((*a)->Names().size(), specs.size());
  bool any_differs = false;
  for (const TensorSpec& s : specs) {
    ASSERT_TRUE((*a)->Has(s.name)) << s.name;
    auto view = (*a)->Get(s.name, s.shape);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view->data) % 64, 0u) << s.name;
    EXPECT_EQ(Bytes(**a, s.name), Bytes(**b, s.name)) << s.name;
    any_differs |= Bytes(**a, s.name) != Bytes(**c, s.name);
  }
  EXPECT_TRUE(any_differs);
  EXPECT_THAT(std::string((*a)->Get("nope").status().message()), HasSubstr("synthetic:a"));
  EXPECT_THAT(std::string((*a)->Get("lm_head.weight", {1, 2}).status().message()),
              HasSubstr("expected [1, 2]"));
}

TEST(SyntheticWeightsTest, ValuesAreNormsOfOneAndSmallNormals) {
  const ModelConfig config = LoadConfig(testing::TinyModelDir());
  auto ckpt = SynthesizeCheckpoint(config, 3, nullptr, "synthetic");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (uint16_t v : Bytes(**ckpt, "model.language_model.norm.weight")) {
    EXPECT_EQ(Bf16ToFloat(v), 1.0f);
  }
  for (uint16_t v : Bytes(**ckpt, "model.visual.blocks.0.norm1.bias")) {
    EXPECT_EQ(Bf16ToFloat(v), 0.0f);
  }
  const std::vector<uint16_t> w =
      Bytes(**ckpt, "model.language_model.layers.0.mlp.experts.gate_up_proj");
  double sum = 0, sq = 0;
  for (uint16_t v : w) {
    const double x = Bf16ToFloat(v);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += x * x;
  }
  const double mean = sum / static_cast<double>(w.size());
  const double sd = std::sqrt(sq / static_cast<double>(w.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, kSyntheticStd, 0.001);
}

TEST(SyntheticWeightsTest, BadConfigsNameTheField) {
  ModelConfig config = LoadConfig(testing::TinyModelDir());
  ModelConfig bad = config;
  bad.text.hidden_size = 0;
  auto s = ExpectedTensors(bad);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("text_config.hidden_size"));
  bad = config;
  bad.text.num_experts_per_tok = 99;
  EXPECT_THAT(std::string(ExpectedTensors(bad).status().message()),
              HasSubstr("num_experts_per_tok"));
  bad = config;
  bad.vision.depth = -1;
  EXPECT_THAT(std::string(SynthesizeCheckpoint(bad, 0, nullptr, "x").status().message()),
              HasSubstr("vision_config.depth"));
  bad = config;
  bad.model_type = "llama";
  EXPECT_THAT(std::string(MeasureSynthetic(bad).status().message()), HasSubstr("'llama'"));
}

TEST(SyntheticWeightsTest, MoreThanPhysicalMemoryIsResourceExhausted) {
  ModelConfig config = LoadConfig(testing::FixturesDir() + "/tiny-qwen3-moe");
  config.text.vocab_size = 1 << 20;  // embed + lm_head: 2 * 2^20 * 2^20 * 2 bytes = 4 TiB
  config.text.hidden_size = 1 << 20;
  auto ckpt = SynthesizeCheckpoint(config, 0, nullptr, "synthetic:huge");
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kResourceExhausted) << ckpt.status();
}

}  // namespace
}  // namespace vismoe
