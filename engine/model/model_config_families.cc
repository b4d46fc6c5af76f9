// The DeepSeek and GPT-OSS text configs (engine/model/config_fields.h).
#include <string>

#include "engine/model/config_fields.h"

namespace vismoe::config_internal {
namespace {

// DeepSeek-V2 / V3 text (top level), as transformers 5 reads it: K and V
// have num_attention_heads heads (num_key_value_heads is ignored, as
// transformers' MLA does), head_dim is qk_rope_head_dim, V2 never
// renormalises its top-k and V3 always routes by sigmoid with group limits
// (topk_method and scoring_func are ignored there, moe_layer_freq by both).
absl::Status ParseMla(const FieldReader& r, bool v3, TextConfig* t) {
  TextConfig::Mla m;
  VISMOE_RETURN_IF_ERROR(r.Int("q_lora_rank", &m.q_lora_rank, false, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("kv_lora_rank", &m.kv_lora_rank, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("qk_nope_head_dim", &m.qk_nope_head_dim, true, 0));
  VISMOE_RETURN_IF_ERROR(r.Int("qk_rope_head_dim", &m.qk_rope_head_dim, true, 2));
  VISMOE_RETURN_IF_ERROR(r.Int("v_head_dim", &m.v_head_dim, true, 1));
  if (v3) VISMOE_RETURN_IF_ERROR(r.Bool("rope_interleave", &m.rope_interleave, false));
  if (m.qk_rope_head_dim % 2 != 0) return Inconsistent("qk_rope_head_dim must be even");
  t->head_dim = m.qk_rope_head_dim;
  t->num_key_value_heads = t->num_attention_heads;
  t->mla = m;
  return absl::OkStatus();
}

absl::Status ParseDeepseekMoe(const FieldReader& r, bool v3, TextConfig* t) {
  VISMOE_RETURN_IF_ERROR(r.Int("moe_intermediate_size", &t->moe_intermediate_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("n_routed_experts", &t->num_experts, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &t->num_experts_per_tok, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("n_shared_experts", &t->n_shared_experts, false, 0));
  VISMOE_RETURN_IF_ERROR(r.Int("first_k_dense_replace", &t->first_k_dense_replace, false, 0));
  VISMOE_RETURN_IF_ERROR(r.Float("routed_scaling_factor", &t->routed_scaling_factor, false));
  if (!(t->routed_scaling_factor > 0) || !std::isfinite(t->routed_scaling_factor)) {
    return Inconsistent("routed_scaling_factor must be a positive number");
  }
  t->norm_topk_prob = v3;  // DeepseekV3Config's default; V2 never renormalises
  if (v3) VISMOE_RETURN_IF_ERROR(r.Bool("norm_topk_prob", &t->norm_topk_prob, false));
  std::string method = "greedy";
  if (!v3) VISMOE_RETURN_IF_ERROR(r.String("topk_method", &method, false));
  if (method != "greedy" && method != "group_limited_greedy") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: topk_method '", method,
                     "' is not supported for deepseek_v2 (greedy, group_limited_greedy)"));
  }
  t->group_limited = v3 || method == "group_limited_greedy";
  if (!t->group_limited) return absl::OkStatus();
  VISMOE_RETURN_IF_ERROR(r.Int("n_group", &t->n_group, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("topk_group", &t->topk_group, true, 1));
  const int per_group = t->num_experts / t->n_group;
  if (t->num_experts % t->n_group != 0 || t->topk_group > t->n_group || (v3 && per_group < 2) ||
      t->num_experts_per_tok > t->topk_group * per_group) {
    return Inconsistent(
        absl::StrCat("n_group (", t->n_group, ") must divide n_routed_experts (", t->num_experts,
                     v3 ? ") into groups of at least 2" : ")", ", topk_group (", t->topk_group,
                     ") be at most n_group, and the kept groups hold num_experts_per_tok (",
                     t->num_experts_per_tok, ") experts"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseDeepseek(const json& root, bool v3, TextConfig* t) {
  FieldReader r(root, "");
  VISMOE_RETURN_IF_ERROR(ParseTextShape(r, t));
  VISMOE_RETURN_IF_ERROR(ParseMla(r, v3, t));
  VISMOE_RETURN_IF_ERROR(ParseDeepseekMoe(r, v3, t));
  VISMOE_RETURN_IF_ERROR(
      r.Int("intermediate_size", &t->intermediate_size, t->first_k_dense_replace > 0, 0));
  VISMOE_RETURN_IF_ERROR(ParseTextCommon(r, t));
  VISMOE_RETURN_IF_ERROR(r.String("hidden_act", &t->hidden_act, false));
  bool mlp_bias = false;
  VISMOE_RETURN_IF_ERROR(r.Bool("mlp_bias", &mlp_bias, false));
  if (mlp_bias) {
    return absl::InvalidArgumentError("config.json: mlp_bias true is not supported (deepseek_v2)");
  }
  VISMOE_RETURN_IF_ERROR(ParseRope(root, "", t));
  if (t->hidden_act != "silu") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: hidden_act '", t->hidden_act, "' is not supported (silu)"));
  }
  if (t->num_experts_per_tok > t->num_experts) {
    return Inconsistent(absl::StrCat("num_experts_per_tok (", t->num_experts_per_tok,
                                     ") exceeds n_routed_experts (", t->num_experts, ")"));
  }
  if (t->longrope.has_value() || !t->mrope_section.empty()) {
    return Inconsistent("deepseek rope_parameters must be default or yarn");
  }
  return absl::OkStatus();
}

namespace {

// The published MoEGate's routing choices (modeling_deepseek of
// DeepSeek-VL2): softmax with greedy / group_limited_greedy (V2's router),
// or sigmoid with noaux_tc (V3's, one group as VL2 publishes it: the
// published code masks other groups with 0.0 where transformers uses -inf).
// The weights are renormalised when norm_topk_prob and top_k > 1.
absl::Status ParseVl2Routing(const FieldReader& r, TextConfig* t) {
  std::string method, scoring = "softmax";
  VISMOE_RETURN_IF_ERROR(r.String("topk_method", &method, true));
  VISMOE_RETURN_IF_ERROR(r.String("scoring_func", &scoring, false));
  bool norm = false;
  VISMOE_RETURN_IF_ERROR(r.Bool("norm_topk_prob", &norm, false));
  t->norm_topk_prob = norm && t->num_experts_per_tok > 1;
  t->deepseek_sigmoid = scoring == "sigmoid";
  const bool softmax_method = method == "greedy" || method == "group_limited_greedy";
  if (!(scoring == "softmax" && softmax_method) &&
      !(scoring == "sigmoid" && method == "noaux_tc")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: language_config.topk_method '", method, "' with scoring_func '", scoring,
        "' is not supported (greedy or group_limited_greedy with softmax, noaux_tc with sigmoid)"));
  }
  t->group_limited = method != "greedy";
  if (!t->group_limited) return absl::OkStatus();
  VISMOE_RETURN_IF_ERROR(r.Int("n_group", &t->n_group, false, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("topk_group", &t->topk_group, false, 1));
  if (t->deepseek_sigmoid && t->n_group != 1) {
    return Inconsistent(
        "language_config.n_group must be 1 with noaux_tc (as DeepSeek-VL2 publishes)");
  }
  if (t->num_experts % t->n_group != 0 || t->topk_group > t->n_group ||
      t->num_experts_per_tok > t->topk_group * (t->num_experts / t->n_group)) {
    return Inconsistent("language_config.n_group / topk_group do not hold num_experts_per_tok");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseDeepseekVl2(const json& root, TextConfig* t) {
  if (!root.contains("language_config") || !root["language_config"].is_object()) {
    return absl::InvalidArgumentError("config.json: field 'language_config' must be an object");
  }
  // The published DeepseekV2Config's defaults for what VL2's configs omit.
  json lc = root["language_config"];
  if (!lc.contains("rms_norm_eps")) lc["rms_norm_eps"] = 1e-6;
  FieldReader r(lc, "language_config");
  VISMOE_RETURN_IF_ERROR(ParseTextShape(r, t));
  bool use_mla = true;
  VISMOE_RETURN_IF_ERROR(r.Bool("use_mla", &use_mla, false));
  if (use_mla) {
    VISMOE_RETURN_IF_ERROR(ParseMla(r, /*v3=*/false, t));
    t->mla->rope_interleave = true;  // the published apply_rotary_pos_emb pairs (2i, 2i+1)
  } else {                           // LlamaAttention: rotate_half over head_dim = hidden / heads
    if (t->hidden_size % t->num_attention_heads != 0 ||
        (t->hidden_size / t->num_attention_heads) % 2 != 0) {
      return Inconsistent("language_config.hidden_size / num_attention_heads must be even");
    }
    t->head_dim = t->hidden_size / t->num_attention_heads;
    t->num_key_value_heads = t->num_attention_heads;
    VISMOE_RETURN_IF_ERROR(r.Int("num_key_value_heads", &t->num_key_value_heads, false, 1));
    if (t->num_attention_heads % t->num_key_value_heads != 0) {
      return Inconsistent("language_config.num_key_value_heads must divide num_attention_heads");
    }
  }
  VISMOE_RETURN_IF_ERROR(r.Int("moe_intermediate_size", &t->moe_intermediate_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("n_routed_experts", &t->num_experts, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &t->num_experts_per_tok, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("n_shared_experts", &t->n_shared_experts, false, 0));
  VISMOE_RETURN_IF_ERROR(r.Int("first_k_dense_replace", &t->first_k_dense_replace, false, 0));
  t->routed_scaling_factor = 1.0f;
  VISMOE_RETURN_IF_ERROR(r.Float("routed_scaling_factor", &t->routed_scaling_factor, false));
  if (!(t->routed_scaling_factor > 0) || !std::isfinite(t->routed_scaling_factor)) {
    return Inconsistent("language_config.routed_scaling_factor must be a positive number");
  }
  if (t->num_experts_per_tok > t->num_experts) {
    return Inconsistent("language_config.num_experts_per_tok exceeds n_routed_experts");
  }
  int freq = 1;
  VISMOE_RETURN_IF_ERROR(r.Int("moe_layer_freq", &freq, false, 1));
  if (freq != 1) return Inconsistent("language_config.moe_layer_freq must be 1");
  VISMOE_RETURN_IF_ERROR(ParseVl2Routing(r, t));
  VISMOE_RETURN_IF_ERROR(
      r.Int("intermediate_size", &t->intermediate_size, t->first_k_dense_replace > 0, 0));
  VISMOE_RETURN_IF_ERROR(ParseTextCommon(r, t));
  VISMOE_RETURN_IF_ERROR(r.String("hidden_act", &t->hidden_act, false));
  if (t->hidden_act != "silu") {
    return absl::InvalidArgumentError(absl::StrCat("config.json: language_config.hidden_act '",
                                                   t->hidden_act, "' is not supported (silu)"));
  }
  VISMOE_RETURN_IF_ERROR(ParseRope(lc, "language_config", t));
  if (t->longrope.has_value() || !t->mrope_section.empty() || (!use_mla && t->yarn.has_value())) {
    return Inconsistent("language_config rope_scaling must be absent (or yarn with MLA)");
  }
  return absl::OkStatus();
}

// GPT-OSS (top level), as transformers 5 reads it: every layer MoE with
// experts of intermediate_size, layer_types' windows, sinks, the clamped
// SwiGLU, YaRN (the class default when the config has no rope dict).
absl::Status ParseGptOss(const json& root, TextConfig* t) {
  FieldReader r(root, "");
  VISMOE_RETURN_IF_ERROR(ParseTextShape(r, t));
  VISMOE_RETURN_IF_ERROR(r.Int("num_key_value_heads", &t->num_key_value_heads, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("head_dim", &t->head_dim, true, 2));
  VISMOE_RETURN_IF_ERROR(r.Int("intermediate_size", &t->intermediate_size, true, 1));
  t->moe_intermediate_size = t->intermediate_size;
  VISMOE_RETURN_IF_ERROR(r.Int("num_local_experts", &t->num_experts, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &t->num_experts_per_tok, true, 1));
  t->attention_bias = true;  // GptOssConfig's default
  VISMOE_RETURN_IF_ERROR(ParseTextCommon(r, t));
  t->sliding_window = 128;
  VISMOE_RETURN_IF_ERROR(r.Int("sliding_window", &t->sliding_window, false, 1));
  TextConfig::ClampedSwiglu act;
  VISMOE_RETURN_IF_ERROR(r.Float("swiglu_alpha", &act.alpha, false));
  VISMOE_RETURN_IF_ERROR(r.Float("swiglu_limit", &act.limit, false));
  if (!std::isfinite(act.alpha) || !(act.limit > 0) || !std::isfinite(act.limit)) {
    return Inconsistent("swiglu_alpha must be a number and swiglu_limit a positive one");
  }
  t->clamped_swiglu = act;
  t->attention_sinks = true;
  t->norm_topk_prob = true;
  if (r.Has("layer_types")) {
    const json& types = root["layer_types"];
    if (!types.is_array() || static_cast<int>(types.size()) != t->num_hidden_layers) {
      return Inconsistent("layer_types must list one type per layer");
    }
    for (const json& type : types) {
      const std::string s = type.is_string() ? type.get<std::string>() : "";
      if (s != "sliding_attention" && s != "full_attention") {
        return absl::InvalidArgumentError(
            absl::StrCat("config.json: layer_types entry '", type.dump(),
                         "' is not supported (sliding_attention, full_attention)"));
      }
      t->layer_windows.push_back(s == "sliding_attention" ? t->sliding_window : 0);
    }
  } else {  // GptOssConfig: sliding from layer 0, alternating
    for (int l = 0; l < t->num_hidden_layers; ++l) {
      t->layer_windows.push_back(l % 2 == 0 ? t->sliding_window : 0);
    }
  }
  if (r.Has("rope_scaling") || r.Has("rope_parameters")) {
    VISMOE_RETURN_IF_ERROR(ParseRope(root, "", t));
  } else {  // GptOssConfig's default rope_parameters
    t->rope_theta = 150000.0;
    VISMOE_RETURN_IF_ERROR(r.Double("rope_theta", &t->rope_theta, false));
    TextConfig::Yarn y;
    y.factor = 32;
    y.original_max_position_embeddings = 4096;
    y.truncate = false;
    t->yarn = y;
  }
  if (t->num_attention_heads % t->num_key_value_heads != 0 || t->head_dim % 2 != 0 ||
      t->num_experts_per_tok > t->num_experts) {
    return Inconsistent(
        "num_attention_heads must be a multiple of num_key_value_heads, head_dim even and "
        "num_experts_per_tok at most num_local_experts");
  }
  if (t->longrope.has_value() || !t->mrope_section.empty()) {
    return Inconsistent("gpt_oss rope_parameters must be default or yarn");
  }
  return absl::OkStatus();
}

}  // namespace vismoe::config_internal
