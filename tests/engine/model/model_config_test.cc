// ModelConfig::Parse and ArchSpec on the OLMoE and Mixtral families: their
// fields, defaults and refusals, and the tensor lists they imply.
#include "engine/model/model_config.h"

#include <fstream>
#include <sstream>

#include "engine/model/arch_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

nlohmann::json OlmoeConfig() {
  std::ifstream in(testing::FixturesDir() + "/tiny-olmoe-clip/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(ModelConfigTest, OlmoeFieldsAndDefaults) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(OlmoeConfig().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "olmoe");
  EXPECT_FALSE(c->has_vision);
  EXPECT_EQ(c->text.moe_intermediate_size, 48);  // OLMoE's experts use intermediate_size
  EXPECT_FLOAT_EQ(c->text.clip_qkv, 0.8f);
  EXPECT_TRUE(c->text.norm_topk_prob);
  for (int l = 0; l < c->text.num_hidden_layers; ++l) EXPECT_TRUE(c->text.IsMoeLayer(l));

  nlohmann::json j = OlmoeConfig();
  j["clip_qkv"] = nullptr;
  j.erase("norm_topk_prob");
  c = ModelConfig::Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.clip_qkv, 0);
  EXPECT_FALSE(c->text.norm_topk_prob);  // OlmoeConfig's default

  absl::StatusOr<ArchSpec> spec = ArchSpec::For(*c);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->qk_norm, QkNormScope::kProjection);
  EXPECT_FALSE(spec->renormalize_topk);
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpectedTensors(*c);
  ASSERT_TRUE(tensors.ok());
  const TensorSpec* q_norm = FindTensor(*tensors, WeightRole::kQNorm, 0);
  const TensorSpec* k_norm = FindTensor(*tensors, WeightRole::kKNorm, 0);
  ASSERT_TRUE(q_norm != nullptr && k_norm != nullptr);
  EXPECT_EQ(q_norm->shape, (Shape{4 * 32}));  // heads * head_dim
  EXPECT_EQ(k_norm->shape, (Shape{2 * 32}));  // kv heads * head_dim
  EXPECT_EQ(q_norm->name, "model.layers.0.self_attn.q_norm.weight");
  const TensorSpec* gate = FindTensor(*tensors, WeightRole::kRouter, 0);
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->name, "model.layers.0.mlp.gate.weight");
}

TEST(ModelConfigTest, OlmoeRefusalsNameTheField) {
  nlohmann::json j = OlmoeConfig();
  j["clip_qkv"] = -1;
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("'clip_qkv' must be a positive number or null"));
  j = OlmoeConfig();
  j.erase("intermediate_size");
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("required field 'intermediate_size' is missing"));
  j = OlmoeConfig();
  j["head_dim"] = 16;
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("olmoe needs head_dim * num_attention_heads == hidden_size"));
  j = OlmoeConfig();
  j["model_type"] = "deepseek_v3";
  EXPECT_THAT(
      std::string(ModelConfig::Parse(j.dump()).status().message()),
      HasSubstr("'deepseek_v3' is not supported (qwen3_vl_moe, qwen3_moe, olmoe, mixtral)"));
}

nlohmann::json MixtralConfig() {
  std::ifstream in(testing::FixturesDir() + "/tiny-mixtral-swa/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(ModelConfigTest, MixtralFieldsAndTensorNames) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(MixtralConfig().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.num_experts, 4);  // num_local_experts
  EXPECT_EQ(c->text.moe_intermediate_size, 48);
  EXPECT_EQ(c->text.sliding_window, 8);
  absl::StatusOr<ArchSpec> spec = ArchSpec::For(*c);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->qk_norm, QkNormScope::kNone);
  EXPECT_TRUE(spec->renormalize_topk);  // Mixtral's router always renormalises
  EXPECT_EQ(spec->ExpertPrefix(1), "model.layers.1.block_sparse_moe.experts.");
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpectedTensors(*c);
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kQNorm, 0), nullptr);
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kRouter, 0)->name,
            "model.layers.0.block_sparse_moe.gate.weight");
  for (const TensorSpec& t : *tensors) {
    if (t.role == WeightRole::kExpertUp && t.layer == 2 && t.expert == 3) {
      EXPECT_EQ(t.name, "model.layers.2.block_sparse_moe.experts.3.w3.weight");
    }
  }
  nlohmann::json j = MixtralConfig();
  j["sliding_window"] = nullptr;
  c = ModelConfig::Parse(j.dump());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->text.sliding_window, 0);
  j["sliding_window"] = 0;
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("sliding_window"));
  j = MixtralConfig();
  j.erase("num_local_experts");
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("required field 'num_local_experts' is missing"));
}

}  // namespace
}  // namespace vismoe
