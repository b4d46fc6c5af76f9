// ModelConfig::Parse and ArchSpec on the OLMoE family: its fields, defaults
// and refusals, and the tensor list it implies.
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
  j["model_type"] = "mixtral";
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("'mixtral' is not supported (qwen3_vl_moe, qwen3_moe, olmoe)"));
}

}  // namespace
}  // namespace vismoe
