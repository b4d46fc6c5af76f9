// ModelConfig::Parse and ArchSpec on the OLMoE, Mixtral, PhiMoE and DeepSeek families: their
// fields, defaults and refusals, and the tensor lists they imply.
#include "engine/model/model_config.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "engine/model/arch_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
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
  j["model_type"] = "dbrx";
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("'dbrx' is not supported (qwen3_vl_moe, qwen3_moe, olmoe, mixtral, phimoe, "
                        "deepseek_v2, deepseek_v3, gpt_oss, deepseek_vl_v2)"));
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

nlohmann::json PhimoeConfig() {
  return testing::ReadJsonFile(testing::FixturesDir() + "/tiny-phimoe-longrope/config.json");
}

TEST(ModelConfigTest, PhimoeFieldsAndTensorNames) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(PhimoeConfig().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.num_experts, 4);
  EXPECT_FLOAT_EQ(c->text.router_jitter_noise, 0.01f);
  EXPECT_TRUE(c->text.lm_head_bias);
  EXPECT_TRUE(c->text.attention_bias);
  ASSERT_TRUE(c->text.longrope.has_value());
  EXPECT_EQ(c->text.longrope->short_factor.size(), 16u);
  EXPECT_EQ(c->text.longrope->original_max_position_embeddings, 24);
  EXPECT_DOUBLE_EQ(c->text.longrope->long_mscale, 1.3);
  absl::StatusOr<ArchSpec> spec = ArchSpec::For(*c);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->norm, NormKind::kLayerNorm);
  EXPECT_EQ(spec->router, RouterKind::kSparseMixer);
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpectedTensors(*c);
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kInputNormBias, 1)->name,
            "model.layers.1.input_layernorm.bias");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kFinalNormBias, -1)->name, "model.norm.bias");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kLmHeadBias, -1)->name, "lm_head.bias");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kRouter, 0)->name,
            "model.layers.0.block_sparse_moe.gate.weight");
}

TEST(ModelConfigTest, PhimoeRefusalsNameTheField) {
  const std::pair<std::function<void(nlohmann::json&)>, const char*> bad[] = {
      {[](nlohmann::json& j) { j["num_experts_per_tok"] = 3; }, "sparsemixer routes exactly 2"},
      {[](nlohmann::json& j) { j["rope_scaling"]["short_factor"].erase(0); }, "head_dim / 2"},
      {[](nlohmann::json& j) { j["rope_scaling"].erase("long_mscale"); },
       "required field 'rope_scaling.long_mscale' is missing"},
      {[](nlohmann::json& j) { j["rope_scaling"]["long_factor"][3] = -1; }, "must be positive"},
      {[](nlohmann::json& j) { j["rope_scaling"]["long_factor"][3] = "x"; }, "a list of numbers"},
      {[](nlohmann::json& j) {
         j["rope_scaling"].erase("original_max_position_embeddings");
         j.erase("original_max_position_embeddings");
       },
       "original_max_position_embeddings' is missing"},
      {[](nlohmann::json& j) { j["router_jitter_noise"] = -0.5; }, "router_jitter_noise"},
      {[](nlohmann::json& j) { j["rope_scaling"]["type"] = "yarn"; }, "'yarn' is not supported"},
  };
  for (const auto& [mutate, why] : bad) {
    SCOPED_TRACE(why);
    nlohmann::json j = PhimoeConfig();
    mutate(j);
    EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()), HasSubstr(why));
  }
}

nlohmann::json DeepseekConfig(const char* fixture) {
  return testing::ReadJsonFile(testing::FixturesDir() + "/" + fixture + "/config.json");
}

TEST(ModelConfigTest, DeepseekFieldsAndTensorNames) {
  absl::StatusOr<ModelConfig> v2 = ModelConfig::Parse(DeepseekConfig("tiny-deepseek-v2").dump());
  ASSERT_TRUE(v2.ok()) << v2.status();
  const TextConfig& t = v2->text;
  ASSERT_TRUE(t.mla.has_value());
  EXPECT_EQ(t.mla->q_lora_rank, 48);
  EXPECT_EQ(t.mla->qk_head_dim(), 32);
  EXPECT_EQ(t.head_dim, 16);  // the rope dims
  EXPECT_EQ(t.KvRowElems(), 32 + 16);
  EXPECT_EQ(t.KvPlanes(), 1);
  EXPECT_TRUE(t.group_limited);
  EXPECT_FALSE(t.norm_topk_prob);  // V2 never renormalises
  EXPECT_FALSE(t.IsMoeLayer(0));   // first_k_dense_replace 1
  EXPECT_TRUE(t.IsMoeLayer(1));
  ASSERT_TRUE(t.yarn.has_value());
  EXPECT_EQ(t.yarn->original_max_position_embeddings, 4096);
  // attention_factor mscale(40, 1) / mscale(40, 0.707); softmax scale 32^-0.5 mscale(40, 0.707)^2.
  EXPECT_NEAR(YarnAttentionFactor(*t.yarn),
              (0.1 * std::log(40.0) + 1) / (0.0707 * std::log(40.0) + 1), 1e-12);
  EXPECT_NEAR(t.AttentionScale(), std::pow(0.0707 * std::log(40.0) + 1, 2) / std::sqrt(32.0),
              1e-12);
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpectedTensors(*v2);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kQA, 0)->name,
            "model.layers.0.self_attn.q_a_proj.weight");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kQ, 0)->name,
            "model.layers.0.self_attn.q_b_proj.weight");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kKvB, 2)->shape, (Shape{4 * (16 + 24), 32}));
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kMlpGate, 0)->name,
            "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kSharedDown, 1)->name,
            "model.layers.1.mlp.shared_experts.down_proj.weight");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kRouterBias, 1), nullptr);

  nlohmann::json j3 = DeepseekConfig("tiny-deepseek-v3");
  j3["topk_method"] = "anything";  // ignored by V3, as by transformers
  j3["rope_interleave"] = false;
  absl::StatusOr<ModelConfig> v3 = ModelConfig::Parse(j3.dump());
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_TRUE(v3->text.norm_topk_prob);
  EXPECT_FALSE(v3->text.mla->rope_interleave);
  EXPECT_EQ(ArchSpec::For(*v3)->router, RouterKind::kDeepseekSigmoid);
  tensors = ExpectedTensors(*v3);
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kRouterBias, 1)->name,
            "model.layers.1.mlp.gate.e_score_correction_bias");

  // V2-Lite: one q_proj; legacy rope_scaling + rope_theta read as well.
  nlohmann::json lite = DeepseekConfig("tiny-deepseek-v2-lite");
  lite["rope_scaling"] = lite["rope_parameters"];
  lite["rope_scaling"]["type"] = "yarn";
  lite["rope_scaling"].erase("rope_type");
  lite["rope_theta"] = lite["rope_scaling"]["rope_theta"];
  lite["rope_scaling"].erase("rope_theta");
  lite.erase("rope_parameters");
  absl::StatusOr<ModelConfig> l = ModelConfig::Parse(lite.dump());
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->text.mla->q_lora_rank, 0);
  ASSERT_TRUE(l->text.yarn.has_value());
  EXPECT_EQ(l->text.yarn->factor, 40);
  tensors = ExpectedTensors(*l);
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kQ, 1)->name,
            "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kQA, 1), nullptr);
}

TEST(ModelConfigTest, DeepseekRefusalsNameTheField) {
  const std::pair<std::function<void(nlohmann::json&)>, const char*> bad[] = {
      {[](nlohmann::json& j) { j["topk_method"] = "noaux_tc"; }, "topk_method 'noaux_tc'"},
      {[](nlohmann::json& j) { j["n_group"] = 3; }, "n_group (3) must divide"},
      {[](nlohmann::json& j) { j["topk_group"] = 5; }, "topk_group (5)"},
      {[](nlohmann::json& j) { j.erase("kv_lora_rank"); }, "'kv_lora_rank' is missing"},
      {[](nlohmann::json& j) { j["qk_rope_head_dim"] = 15; }, "qk_rope_head_dim must be even"},
      {[](nlohmann::json& j) { j["mlp_bias"] = true; }, "mlp_bias"},
      {[](nlohmann::json& j) { j["routed_scaling_factor"] = -1; }, "routed_scaling_factor"},
      {[](nlohmann::json& j) { j["rope_parameters"]["factor"] = 0; }, "factor must be a positive"},
      {[](nlohmann::json& j) { j["rope_parameters"]["mscale"] = -1; }, "mscale must be"},
      {[](nlohmann::json& j) { j["rope_parameters"]["rope_type"] = "dynamic"; },
       "'dynamic' is not supported"},
  };
  for (const auto& [mutate, why] : bad) {
    SCOPED_TRACE(why);
    nlohmann::json j = DeepseekConfig("tiny-deepseek-v2");
    mutate(j);
    EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()), HasSubstr(why));
  }
}

// openai/gpt-oss-20b's config.json (its layer_types: 12 x sliding, full),
// the quantization_config left out (MXFP4 experts are not served yet).
nlohmann::json GptOss20bConfig() {
  nlohmann::json j = nlohmann::json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880, "max_position_embeddings": 131072, "model_type": "gpt_oss",
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": false,
    "pad_token_id": 199999, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": false},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": false, "transformers_version": "4.57.0",
    "use_cache": true, "vocab_size": 201088})");
  for (int l = 0; l < 24; ++l) {
    j["layer_types"].push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  }
  return j;
}

TEST(ModelConfigTest, GptOssFieldsAndTensorNames) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(GptOss20bConfig().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  const TextConfig& t = c->text;
  EXPECT_EQ(t.head_dim, 64);
  EXPECT_EQ(t.num_experts, 32);
  EXPECT_EQ(t.moe_intermediate_size, 2880);
  EXPECT_EQ(t.LayerWindow(0), 128);
  EXPECT_EQ(t.LayerWindow(1), 0);
  EXPECT_TRUE(t.attention_sinks);
  ASSERT_TRUE(t.clamped_swiglu.has_value());
  EXPECT_FLOAT_EQ(t.clamped_swiglu->alpha, 1.702f);
  ASSERT_TRUE(t.yarn.has_value());
  EXPECT_FALSE(t.yarn->truncate);
  EXPECT_DOUBLE_EQ(t.rope_theta, 150000);
  EXPECT_NEAR(YarnAttentionFactor(*t.yarn), 0.1 * std::log(32.0) + 1, 1e-12);
  EXPECT_EQ(ArchSpec::For(*c)->router, RouterKind::kTopKSoftmaxBiased);
  absl::StatusOr<std::vector<TensorSpec>> tensors = ExpectedTensors(*c);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kRouter, 3)->name, "model.layers.3.mlp.router.weight");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kRouterBias, 3)->name,
            "model.layers.3.mlp.router.bias");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kSinks, 3)->name, "model.layers.3.self_attn.sinks");
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kExpertsGateUp, 3)->shape, (Shape{32, 2880, 5760}));
  const TensorSpec* bias = FindTensor(*tensors, WeightRole::kExpertsGateUpBias, 3);
  EXPECT_EQ(bias->name, "model.layers.3.mlp.experts.gate_up_proj_bias");
  EXPECT_FALSE(bias->routed_expert);  // resident
  EXPECT_EQ(FindTensor(*tensors, WeightRole::kQBias, 3)->shape, (Shape{64 * 64}));

  nlohmann::json j = GptOss20bConfig();
  j.erase("layer_types");
  j.erase("rope_scaling");
  j.erase("rope_theta");
  c = ModelConfig::Parse(j.dump());  // GptOssConfig's defaults
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.LayerWindow(2), 128);
  EXPECT_EQ(c->text.LayerWindow(3), 0);
  ASSERT_TRUE(c->text.yarn.has_value());
  EXPECT_FALSE(c->text.yarn->truncate);
  EXPECT_DOUBLE_EQ(c->text.rope_theta, 150000);
  j = GptOss20bConfig();
  j["rope_scaling"].erase("truncate");  // a rope dict without it: truncate, as transformers
  EXPECT_TRUE(ModelConfig::Parse(j.dump())->text.yarn->truncate);
}

TEST(ModelConfigTest, GptOssRefusalsNameTheField) {
  const std::pair<std::function<void(nlohmann::json&)>, const char*> bad[] = {
      {[](nlohmann::json& j) { j["layer_types"][3] = "chunked_attention"; },
       "layer_types entry '\"chunked_attention\"'"},
      {[](nlohmann::json& j) { j["layer_types"].erase(0); }, "one type per layer"},
      {[](nlohmann::json& j) { j["swiglu_limit"] = -1; }, "swiglu_limit"},
      {[](nlohmann::json& j) { j.erase("head_dim"); }, "'head_dim' is missing"},
      {[](nlohmann::json& j) {
         j["quantization_config"] = {{"quant_method", "mxfp4"}, {"dequantize", true}};
       },
       "quantization_config.dequantize"},
      {[](nlohmann::json& j) {
         j["quantization_config"] = {{"quant_method", "mxfp4"}, {"modules_to_not_convert", 3}};
       },
       "modules_to_not_convert"},
      {[](nlohmann::json& j) {
         j["quantization_config"] = {{"quant_method", "nvfp4"}};
       },
       "quant_method 'nvfp4' is not supported (fp8, mxfp4)"},
  };
  for (const auto& [mutate, why] : bad) {
    SCOPED_TRACE(why);
    nlohmann::json j = GptOss20bConfig();
    mutate(j);
    EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()), HasSubstr(why));
  }
}

nlohmann::json Fp8Config() {
  return testing::ReadJsonFile(testing::FixturesDir() + "/tiny-qwen3-vl-moe-fp8/config.json");
}

// The published quantization_config of openai/gpt-oss-20b.
TEST(ModelConfigTest, Mxfp4QuantizationConfigForGptOssOnly) {
  nlohmann::json j = GptOss20bConfig();
  j["quantization_config"] = {
      {"modules_to_not_convert",
       {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
      {"quant_method", "mxfp4"}};
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->text.mxfp4.has_value());
  EXPECT_EQ(c->text.mxfp4->modules_to_not_convert.size(), 4u);
  EXPECT_FALSE(c->text.fp8.has_value());
  EXPECT_FALSE(ModelConfig::Parse(GptOss20bConfig().dump())->text.mxfp4.has_value());

  nlohmann::json other = Fp8Config();
  other["quantization_config"] = {{"quant_method", "mxfp4"}};
  EXPECT_THAT(std::string(ModelConfig::Parse(other.dump()).status().message()),
              HasSubstr("'mxfp4' is supported for gpt_oss only, not qwen3_vl_moe"));
}

// DeepSeek-VL2: the language model under language_config, read as the
// published modeling_deepseek does (VL2-Tiny's plain attention, VL2's latent
// attention with interleaved RoPE and biased sigmoid routing).
TEST(ModelConfigTest, DeepseekVl2LanguageConfig) {
  const std::string tiny_dir = testing::FixturesDir() + "/tiny-deepseek-vl2";
  absl::StatusOr<ModelConfig> tiny = ModelConfig::Load(tiny_dir);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->model_type, "deepseek_vl_v2");
  EXPECT_FALSE(tiny->text.mla.has_value());
  EXPECT_EQ(tiny->text.head_dim, tiny->text.hidden_size / tiny->text.num_attention_heads);
  EXPECT_FALSE(tiny->text.deepseek_sigmoid);
  EXPECT_FALSE(tiny->text.norm_topk_prob);
  EXPECT_FLOAT_EQ(tiny->text.rms_norm_eps, 1e-6f);  // DeepseekV2Config's default
  absl::StatusOr<ModelConfig> mla =
      ModelConfig::Load(testing::FixturesDir() + "/tiny-deepseek-vl2-mla");
  ASSERT_TRUE(mla.ok()) << mla.status();
  ASSERT_TRUE(mla->text.mla.has_value());
  EXPECT_TRUE(mla->text.mla->rope_interleave);
  EXPECT_TRUE(mla->text.deepseek_sigmoid);
  EXPECT_TRUE(mla->text.norm_topk_prob);
  auto spec = ArchSpec::For(*mla);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->router, RouterKind::kDeepseekSigmoid);
  EXPECT_EQ(spec->lm_head, "language.lm_head.weight");
  EXPECT_EQ(spec->text_prefix, "language.model.");

  const nlohmann::json good = testing::ReadJsonFile(tiny_dir + "/config.json");
  const std::pair<std::function<void(nlohmann::json&)>, const char*> bad[] = {
      {[](nlohmann::json& j) { j.erase("language_config"); }, "'language_config'"},
      {[](nlohmann::json& j) { j["language_config"]["topk_method"] = "gready"; },
       "topk_method 'gready' with scoring_func 'softmax'"},
      {[](nlohmann::json& j) { j["language_config"]["scoring_func"] = "sigmoid"; },
       "topk_method 'greedy' with scoring_func 'sigmoid'"},
      {[](nlohmann::json& j) {
         j["language_config"]["scoring_func"] = "sigmoid";
         j["language_config"]["topk_method"] = "noaux_tc";
         j["language_config"]["n_group"] = 2;
       },
       "n_group must be 1"},
      {[](nlohmann::json& j) { j["language_config"]["moe_layer_freq"] = 2; }, "moe_layer_freq"},
      {[](nlohmann::json& j) { j["language_config"]["num_key_value_heads"] = 3; },
       "num_key_value_heads"},
      {[](nlohmann::json& j) { j["language_config"]["hidden_act"] = "gelu"; }, "hidden_act"},
  };
  for (const auto& [mutate, why] : bad) {
    SCOPED_TRACE(why);
    nlohmann::json j = good;
    mutate(j);
    EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()), HasSubstr(why));
  }
}

TEST(ModelConfigTest, Fp8QuantizationConfig) {
  absl::StatusOr<ModelConfig> c = ModelConfig::Parse(Fp8Config().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->text.fp8.has_value());
  EXPECT_EQ(c->text.fp8->block, (QuantBlock{32, 32}));
  EXPECT_EQ(c->text.fp8->modules_to_not_convert.size(), 4u);
  ASSERT_TRUE(Fp8Block(c->text).has_value());
  nlohmann::json j = Fp8Config();
  j["quantization_config"].erase("weight_block_size");  // transformers' default
  c = ModelConfig::Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.fp8->block, (QuantBlock{128, 128}));
  j.erase("quantization_config");
  c = ModelConfig::Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(Fp8Block(c->text).has_value());
}

TEST(ModelConfigTest, Fp8RefusalsNameTheField) {
  const struct {
    const char* key;
    nlohmann::json value;
    const char* message;
  } cases[] = {
      {"quant_method", "gptq",
       "quantization_config.quant_method 'gptq' is not supported (fp8, mxfp4)"},
      {"fmt", "e5m2", "quantization_config.fmt 'e5m2' is not supported (e4m3)"},
      {"activation_scheme", "static",
       "quantization_config.activation_scheme 'static' is not supported (dynamic)"},
      {"scale_fmt", "ue8m0", "quantization_config.scale_fmt 'ue8m0' is not supported (float)"},
      {"weight_block_size", nullptr, "weight_block_size is null (per-tensor FP8 scales"},
      {"weight_block_size", {128, 100}, "weight_block_size must be [rows, cols]"},
      {"weight_block_size", {128}, "weight_block_size must be [rows, cols]"},
      {"modules_to_not_convert", {1, 2}, "'quantization_config.modules_to_not_convert' must be"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key);
    nlohmann::json j = Fp8Config();
    j["quantization_config"][c.key] = c.value;
    const absl::Status st = ModelConfig::Parse(j.dump()).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.message));
  }
  nlohmann::json j = Fp8Config();
  j["quantization_config"] = "fp8";
  EXPECT_THAT(std::string(ModelConfig::Parse(j.dump()).status().message()),
              HasSubstr("'quantization_config' must be an object"));
}

}  // namespace
}  // namespace vismoe
