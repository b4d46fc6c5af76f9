#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/config_fields.h"
#include "nlohmann/json.hpp"

namespace vismoe {

namespace config_internal {
namespace {

// rope_type "yarn": `r` reads the text config, `rr` its rope object.
absl::Status ParseYarn(const FieldReader& r, const FieldReader& rr, TextConfig* t) {
  TextConfig::Yarn y;
  int max_pos = 0;
  VISMOE_RETURN_IF_ERROR(r.Int("max_position_embeddings", &max_pos, false, 1));
  // transformers 5 fills original_max_position_embeddings in from
  // max_position_embeddings for a legacy rope_scaling without it.
  y.original_max_position_embeddings = max_pos;
  VISMOE_RETURN_IF_ERROR(
      rr.Int("original_max_position_embeddings", &y.original_max_position_embeddings, false, 1));
  if (y.original_max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: required field '",
                                                   rr.Path("original_max_position_embeddings"),
                                                   "' is missing (yarn)"));
  }
  y.factor = static_cast<double>(max_pos) / y.original_max_position_embeddings;
  VISMOE_RETURN_IF_ERROR(rr.Double("factor", &y.factor, false));
  VISMOE_RETURN_IF_ERROR(rr.Double("mscale", &y.mscale, false));
  VISMOE_RETURN_IF_ERROR(rr.Double("mscale_all_dim", &y.mscale_all_dim, false));
  // transformers: `beta_fast or 32`, so 0 means the default too.
  VISMOE_RETURN_IF_ERROR(rr.Double("beta_fast", &y.beta_fast, false));
  VISMOE_RETURN_IF_ERROR(rr.Double("beta_slow", &y.beta_slow, false));
  if (y.beta_fast == 0) y.beta_fast = 32;
  if (y.beta_slow == 0) y.beta_slow = 1;
  if (rr.Has("attention_factor")) {
    double a = 0;
    VISMOE_RETURN_IF_ERROR(rr.Double("attention_factor", &a, true));
    y.attention_factor = a;
  }
  VISMOE_RETURN_IF_ERROR(rr.Bool("truncate", &y.truncate, false));
  for (const auto& [name, v] : {std::pair{"factor", y.factor}, std::pair{"beta_fast", y.beta_fast},
                                std::pair{"beta_slow", y.beta_slow}}) {
    if (!(v > 0) || !std::isfinite(v)) {
      return Inconsistent(absl::StrCat(rr.Path(name), " must be a positive number"));
    }
  }
  for (const auto& [name, v] :
       {std::pair{"mscale", y.mscale}, std::pair{"mscale_all_dim", y.mscale_all_dim},
        std::pair{"attention_factor", y.attention_factor.value_or(1)}}) {
    if (!std::isfinite(v) || v < 0 || v > 1e3) {
      return Inconsistent(absl::StrCat(rr.Path(name), " must be a number in [0, 1000]"));
    }
  }
  t->yarn = y;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseTextShape(const FieldReader& r, TextConfig* t) {
  VISMOE_RETURN_IF_ERROR(r.Int("hidden_size", &t->hidden_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_hidden_layers", &t->num_hidden_layers, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_attention_heads", &t->num_attention_heads, true, 1));
  return absl::OkStatus();
}

absl::Status ParseTextCommon(const FieldReader& r, TextConfig* t) {
  VISMOE_RETURN_IF_ERROR(r.Float("rms_norm_eps", &t->rms_norm_eps, true));
  VISMOE_RETURN_IF_ERROR(r.Int("vocab_size", &t->vocab_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("max_position_embeddings", &t->max_position_embeddings, false, 1));
  VISMOE_RETURN_IF_ERROR(r.Bool("attention_bias", &t->attention_bias, false));
  VISMOE_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &t->tie_word_embeddings, false));
  return absl::OkStatus();
}

absl::Status ParseRope(const json& tc, const std::string& prefix, TextConfig* t) {
  FieldReader r(tc, prefix);
  VISMOE_RETURN_IF_ERROR(r.Double("rope_theta", &t->rope_theta, false));
  // transformers v4 writes rope_scaling, v5 writes rope_parameters.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!r.Has(key)) continue;
    if (!tc[key].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: field '", r.Path(key), "' must be an object"));
    }
    FieldReader rr(tc[key], r.Path(key));
    std::string type;
    VISMOE_RETURN_IF_ERROR(rr.String("rope_type", &type, false));
    if (type.empty()) VISMOE_RETURN_IF_ERROR(rr.String("type", &type, false));
    if (type == "longrope" || type == "su") {  // "su": the name Phi-3 configs first used
      TextConfig::LongRope lr;
      VISMOE_RETURN_IF_ERROR(rr.FloatList("short_factor", &lr.short_factor, true));
      VISMOE_RETURN_IF_ERROR(rr.FloatList("long_factor", &lr.long_factor, true));
      VISMOE_RETURN_IF_ERROR(rr.Double("short_mscale", &lr.short_mscale, true));
      VISMOE_RETURN_IF_ERROR(rr.Double("long_mscale", &lr.long_mscale, true));
      VISMOE_RETURN_IF_ERROR(r.Int("original_max_position_embeddings",
                                   &lr.original_max_position_embeddings, false, 1));
      VISMOE_RETURN_IF_ERROR(rr.Int("original_max_position_embeddings",
                                    &lr.original_max_position_embeddings, false, 1));
      if (lr.original_max_position_embeddings <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("config.json: required field '",
                                                       rr.Path("original_max_position_embeddings"),
                                                       "' is missing (longrope)"));
      }
      for (const auto& [name, f] : {std::pair{"short_factor", &lr.short_factor},
                                    std::pair{"long_factor", &lr.long_factor}}) {
        for (float x : *f) {
          if (!(x > 0)) return Inconsistent(absl::StrCat(rr.Path(name), " must be positive"));
        }
      }
      for (double m : {lr.short_mscale, lr.long_mscale}) {
        if (!(m > 0) || !std::isfinite(m)) {
          return Inconsistent(
              absl::StrCat(rr.Path("short_mscale"), " / long_mscale must be positive"));
        }
      }
      t->longrope = std::move(lr);
    } else if (type == "yarn") {
      VISMOE_RETURN_IF_ERROR(ParseYarn(r, rr, t));
    } else if (!type.empty() && type != "default" && type != "mrope") {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", rr.Path("rope_type"), " '", type, "' is not supported"));
    }
    VISMOE_RETURN_IF_ERROR(rr.Double("rope_theta", &t->rope_theta, false));
    VISMOE_RETURN_IF_ERROR(rr.IntList("mrope_section", &t->mrope_section, false));
    VISMOE_RETURN_IF_ERROR(rr.Bool("mrope_interleaved", &t->mrope_interleaved, false));
  }
  if (!(t->rope_theta > 0)) return Inconsistent(absl::StrCat(prefix, ".rope_theta must be > 0"));
  return absl::OkStatus();
}

}  // namespace config_internal

namespace {

using config_internal::FieldReader;
using config_internal::Inconsistent;
using config_internal::json;
using config_internal::ParseRope;
using config_internal::ParseTextCommon;
using config_internal::ParseTextShape;

// The families whose text config.json differs from Qwen3's.
enum class TextFields {
  kQwen3,
  // OLMoE: experts of intermediate_size (no moe_intermediate_size),
  // norm_topk_prob off unless set, clip_qkv.
  kOlmoe,
  // Mixtral: experts of intermediate_size, num_local_experts,
  // sliding_window.
  kMixtral,
  // PhiMoE: as Mixtral, plus router_jitter_noise (sparsemixer, top-2 only),
  // lm_head_bias and LongRoPE.
  kPhimoe,
};

// PhiMoE's fields beside Mixtral's: the sparsemixer's router_jitter_noise
// (PhimoeConfig's default 0.01) and lm_head_bias.
absl::Status ParsePhimoe(const FieldReader& r, TextConfig* t) {
  t->router_jitter_noise = 0.01f;  // PhimoeConfig's default
  VISMOE_RETURN_IF_ERROR(r.Float("router_jitter_noise", &t->router_jitter_noise, false));
  if (!(t->router_jitter_noise >= 0) || !std::isfinite(t->router_jitter_noise)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: field '", r.Path("router_jitter_noise"), "' must be a number >= 0"));
  }
  VISMOE_RETURN_IF_ERROR(r.Bool("lm_head_bias", &t->lm_head_bias, false));
  return absl::OkStatus();
}

absl::Status ParseText(const json& tc, const std::string& prefix, TextFields fields,
                       TextConfig* t) {
  const bool olmoe = fields == TextFields::kOlmoe, phimoe = fields == TextFields::kPhimoe;
  const bool mixtral = fields == TextFields::kMixtral || phimoe;
  FieldReader r(tc, prefix);
  VISMOE_RETURN_IF_ERROR(ParseTextShape(r, t));
  t->num_key_value_heads = t->num_attention_heads;
  VISMOE_RETURN_IF_ERROR(r.Int("num_key_value_heads", &t->num_key_value_heads, false, 1));
  t->head_dim = t->hidden_size / t->num_attention_heads;
  VISMOE_RETURN_IF_ERROR(r.Int("head_dim", &t->head_dim, false, 2));
  VISMOE_RETURN_IF_ERROR(r.Int("intermediate_size", &t->intermediate_size, olmoe || mixtral,
                               olmoe || mixtral ? 1 : 0));
  if (mixtral) {
    t->moe_intermediate_size = t->intermediate_size;  // every layer is MoE
    VISMOE_RETURN_IF_ERROR(r.Int("sliding_window", &t->sliding_window, false, 1));
    if (phimoe) VISMOE_RETURN_IF_ERROR(ParsePhimoe(r, t));
  } else if (olmoe) {
    t->moe_intermediate_size = t->intermediate_size;  // every layer is MoE
    t->norm_topk_prob = false;                        // OlmoeConfig's default
    double clip = 0;
    VISMOE_RETURN_IF_ERROR(r.Double("clip_qkv", &clip, false));
    if (!(clip >= 0) || clip > 3.0e38) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: field '", r.Path("clip_qkv"),
                                                     "' must be a positive number or null"));
    }
    t->clip_qkv = static_cast<float>(clip);
  } else {
    VISMOE_RETURN_IF_ERROR(r.Int("moe_intermediate_size", &t->moe_intermediate_size, true, 1));
  }
  VISMOE_RETURN_IF_ERROR(
      r.Int(mixtral ? "num_local_experts" : "num_experts", &t->num_experts, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &t->num_experts_per_tok, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Bool("norm_topk_prob", &t->norm_topk_prob, false));
  VISMOE_RETURN_IF_ERROR(r.Int("decoder_sparse_step", &t->decoder_sparse_step, false, 1));
  VISMOE_RETURN_IF_ERROR(r.IntList("mlp_only_layers", &t->mlp_only_layers, false));
  VISMOE_RETURN_IF_ERROR(ParseTextCommon(r, t));
  VISMOE_RETURN_IF_ERROR(r.String("hidden_act", &t->hidden_act, false));
  VISMOE_RETURN_IF_ERROR(ParseRope(tc, prefix, t));
  if (t->yarn.has_value()) {  // built and checked for DeepSeek and GPT-OSS only
    return absl::InvalidArgumentError(
        "config.json: rope_type 'yarn' is not supported for this model_type (deepseek_v2, "
        "deepseek_v3, gpt_oss)");
  }

  if (t->hidden_act != "silu") {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", r.Path("hidden_act"), " '",
                                                   t->hidden_act, "' is not supported (silu)"));
  }
  if (t->num_attention_heads % t->num_key_value_heads != 0) {
    return Inconsistent(absl::StrCat(prefix, ".num_attention_heads (", t->num_attention_heads,
                                     ") is not a multiple of num_key_value_heads (",
                                     t->num_key_value_heads, ")"));
  }
  if (t->head_dim % 2 != 0) return Inconsistent(prefix + ".head_dim must be even");
  if (phimoe && t->num_experts_per_tok != 2) {
    return Inconsistent(absl::StrCat(prefix, "num_experts_per_tok is ", t->num_experts_per_tok,
                                     ": phimoe's sparsemixer routes exactly 2 experts"));
  }
  if (t->longrope.has_value()) {
    for (const std::vector<float>* f : {&t->longrope->short_factor, &t->longrope->long_factor}) {
      if (static_cast<int>(f->size()) != t->head_dim / 2) {
        return Inconsistent(
            absl::StrCat(prefix, "rope_scaling's short_factor and long_factor need ",
                         t->head_dim / 2, " entries (head_dim / 2), got ", f->size()));
      }
    }
    if (!t->mrope_section.empty()) return Inconsistent("longrope and mrope_section together");
  }
  if (t->num_experts_per_tok > t->num_experts) {
    return Inconsistent(absl::StrCat(prefix, ".num_experts_per_tok (", t->num_experts_per_tok,
                                     ") exceeds num_experts (", t->num_experts, ")"));
  }
  for (int l : t->mlp_only_layers) {
    if (l < 0 || l >= t->num_hidden_layers) {
      return Inconsistent(absl::StrCat(prefix, ".mlp_only_layers names layer ", l, " outside 0..",
                                       t->num_hidden_layers - 1));
    }
  }
  bool any_dense = !t->mlp_only_layers.empty() || t->decoder_sparse_step != 1;
  if (any_dense && t->intermediate_size <= 0) {
    return Inconsistent(prefix + ".intermediate_size is required when some layers are dense");
  }
  if (!t->mrope_section.empty()) {
    const int sum = std::accumulate(t->mrope_section.begin(), t->mrope_section.end(), 0);
    if (t->mrope_section.size() != 3 || sum != t->head_dim / 2) {
      return Inconsistent(absl::StrCat(prefix, ".mrope_section must have 3 entries summing to ",
                                       "head_dim/2 = ", t->head_dim / 2, " (sum is ", sum, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseVision(const json& vc, VisionConfig* v) {
  FieldReader r(vc, "vision_config");
  VISMOE_RETURN_IF_ERROR(r.Int("depth", &v->depth, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("hidden_size", &v->hidden_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_heads", &v->num_heads, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("intermediate_size", &v->intermediate_size, true, 1));
  v->hidden_act = "gelu_pytorch_tanh";
  VISMOE_RETURN_IF_ERROR(r.String("hidden_act", &v->hidden_act, false));
  VISMOE_RETURN_IF_ERROR(r.Int("in_channels", &v->in_channels, false, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("patch_size", &v->patch_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("temporal_patch_size", &v->temporal_patch_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("spatial_merge_size", &v->spatial_merge_size, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("num_position_embeddings", &v->num_position_embeddings, true, 1));
  VISMOE_RETURN_IF_ERROR(r.Int("out_hidden_size", &v->out_hidden_size, true, 1));
  VISMOE_RETURN_IF_ERROR(
      r.IntList("deepstack_visual_indexes", &v->deepstack_visual_indexes, false));
  if (v->hidden_act != "gelu_pytorch_tanh" && v->hidden_act != "gelu") {
    return absl::InvalidArgumentError(absl::StrCat("config.json: vision_config.hidden_act '",
                                                   v->hidden_act, "' is not supported"));
  }
  if (v->hidden_size % v->num_heads != 0) {
    return Inconsistent("vision_config.hidden_size is not a multiple of num_heads");
  }
  const int side = static_cast<int>(std::lround(std::sqrt(v->num_position_embeddings)));
  if (side * side != v->num_position_embeddings) {
    return Inconsistent("vision_config.num_position_embeddings must be a perfect square");
  }
  for (int idx : v->deepstack_visual_indexes) {
    if (idx < 0 || idx >= v->depth) {
      return Inconsistent(absl::StrCat("vision_config.deepstack_visual_indexes names block ", idx,
                                       " outside 0..", v->depth - 1));
    }
  }
  return absl::OkStatus();
}

// quantization_config.modules_to_not_convert: a list of strings, or absent.
absl::Status ParseModulesToNotConvert(const json& q, std::vector<std::string>* out) {
  if (!q.contains("modules_to_not_convert")) return absl::OkStatus();
  const json& m = q["modules_to_not_convert"];
  const absl::Status bad = absl::InvalidArgumentError(
      "config.json: field 'quantization_config.modules_to_not_convert' must be a list of strings");
  if (!m.is_array()) return bad;
  for (const json& e : m) {
    if (!e.is_string()) return bad;
    out->push_back(e.get<std::string>());
  }
  return absl::OkStatus();
}

// quantization_config: fine-grained FP8 (e4m3 weights, dynamic activations,
// block scales whose column size the CPU kernels can step by), or MXFP4
// experts (GPT-OSS only: the caller checks the family).
absl::Status ParseQuantization(const json& q, TextConfig* text) {
  const std::string prefix = "quantization_config";
  if (!q.is_object()) {
    return absl::InvalidArgumentError("config.json: field 'quantization_config' must be an object");
  }
  FieldReader r(q, prefix);
  auto unsupported = [&](const char* key, const std::string& value, const char* supported) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", r.Path(key), " '", value,
                                                   "' is not supported (", supported, ")"));
  };
  std::string method, fmt = "e4m3", activation = "dynamic", scale_fmt = "float";
  VISMOE_RETURN_IF_ERROR(r.String("quant_method", &method, true));
  if (method == "mxfp4") {
    bool dequantize = false;
    VISMOE_RETURN_IF_ERROR(r.Bool("dequantize", &dequantize, false));
    if (dequantize) {
      return absl::InvalidArgumentError(
          "config.json: quantization_config.dequantize true is not supported (a checkpoint "
          "saved dequantized carries no quantization_config)");
    }
    Mxfp4Config m;
    VISMOE_RETURN_IF_ERROR(ParseModulesToNotConvert(q, &m.modules_to_not_convert));
    text->mxfp4 = std::move(m);
    return absl::OkStatus();
  }
  if (method != "fp8") return unsupported("quant_method", method, "fp8, mxfp4");
  VISMOE_RETURN_IF_ERROR(r.String("fmt", &fmt, false));
  if (fmt != "e4m3") return unsupported("fmt", fmt, "e4m3");
  VISMOE_RETURN_IF_ERROR(r.String("activation_scheme", &activation, false));
  if (absl::AsciiStrToLower(activation) != "dynamic") {
    return unsupported("activation_scheme", activation, "dynamic");
  }
  VISMOE_RETURN_IF_ERROR(r.String("scale_fmt", &scale_fmt, false));
  if (scale_fmt != "float") return unsupported("scale_fmt", scale_fmt, "float");
  Fp8Config c;
  if (q.contains("weight_block_size") && q["weight_block_size"].is_null()) {
    return absl::InvalidArgumentError(
        "config.json: quantization_config.weight_block_size is null (per-tensor FP8 scales are "
        "not supported, only [rows, cols] blocks)");
  }
  std::vector<int> block = {128, 128};  // FineGrainedFP8Config's default
  VISMOE_RETURN_IF_ERROR(r.IntList("weight_block_size", &block, false));
  if (block.size() != 2 || block[0] < 1 || block[1] < 16 || block[1] % 16 != 0) {
    return absl::InvalidArgumentError(
        "config.json: quantization_config.weight_block_size must be [rows, cols] with rows >= 1 "
        "and cols a positive multiple of 16 (the published [128, 128] is)");
  }
  c.block = {block[0], block[1]};
  VISMOE_RETURN_IF_ERROR(ParseModulesToNotConvert(q, &c.modules_to_not_convert));
  text->fp8 = std::move(c);
  return absl::OkStatus();
}

}  // namespace

double YarnMscale(double scale, double m) {
  return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

double YarnAttentionFactor(const TextConfig::Yarn& y) {
  if (y.attention_factor.has_value()) return *y.attention_factor;
  if (y.mscale != 0 && y.mscale_all_dim != 0) {
    return YarnMscale(y.factor, y.mscale) / YarnMscale(y.factor, y.mscale_all_dim);
  }
  return YarnMscale(y.factor, 1.0);
}

bool TextConfig::IsMoeLayer(int layer) const {
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return num_experts > 0 && layer >= first_k_dense_replace &&
         (layer + 1) % decoder_sparse_step == 0;
}

int64_t TextConfig::KvRowElems() const {
  if (mla.has_value()) return int64_t{mla->kv_lora_rank} + mla->qk_rope_head_dim;
  return int64_t{num_key_value_heads} * head_dim;
}

double TextConfig::AttentionScale() const {
  if (!mla.has_value()) return 1.0 / std::sqrt(static_cast<double>(head_dim));
  double scale = 1.0 / std::sqrt(static_cast<double>(mla->qk_head_dim()));
  if (yarn.has_value() && yarn->mscale_all_dim != 0) {
    const double m = YarnMscale(yarn->factor, yarn->mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

absl::StatusOr<ModelConfig> ModelConfig::Parse(std::string_view json_text) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("config.json: not valid JSON");
  if (!root.is_object())
    return absl::InvalidArgumentError("config.json: top level is not an object");
  ModelConfig c;
  FieldReader top(root, "");
  VISMOE_RETURN_IF_ERROR(top.String("model_type", &c.model_type, true));
  if (c.model_type == "qwen3_vl_moe") {
    if (!root.contains("text_config") || !root["text_config"].is_object()) {
      return absl::InvalidArgumentError("config.json: required object 'text_config' is missing");
    }
    if (!root.contains("vision_config") || !root["vision_config"].is_object()) {
      return absl::InvalidArgumentError("config.json: required object 'vision_config' is missing");
    }
    VISMOE_RETURN_IF_ERROR(
        ParseText(root["text_config"], "text_config", TextFields::kQwen3, &c.text));
    VISMOE_RETURN_IF_ERROR(ParseVision(root["vision_config"], &c.vision));
    c.has_vision = true;
    VISMOE_RETURN_IF_ERROR(top.Int("image_token_id", &c.image_token_id, true));
    VISMOE_RETURN_IF_ERROR(top.Int("video_token_id", &c.video_token_id, false));
    VISMOE_RETURN_IF_ERROR(top.Int("vision_start_token_id", &c.vision_start_token_id, true));
    VISMOE_RETURN_IF_ERROR(top.Int("vision_end_token_id", &c.vision_end_token_id, true));
    // tie_word_embeddings lives at the top level for the VL model.
    VISMOE_RETURN_IF_ERROR(top.Bool("tie_word_embeddings", &c.text.tie_word_embeddings, false));
    if (c.vision.out_hidden_size != c.text.hidden_size) {
      return Inconsistent(absl::StrCat("vision_config.out_hidden_size (", c.vision.out_hidden_size,
                                       ") != text_config.hidden_size (", c.text.hidden_size, ")"));
    }
    for (int id : {c.image_token_id, c.vision_start_token_id, c.vision_end_token_id}) {
      if (id >= c.text.vocab_size) {
        return Inconsistent(absl::StrCat("special token id ", id, " >= text_config.vocab_size (",
                                         c.text.vocab_size, ")"));
      }
    }
  } else if (c.model_type == "qwen3_moe" || c.model_type == "olmoe" || c.model_type == "mixtral" ||
             c.model_type == "phimoe") {
    const TextFields fields = c.model_type == "olmoe"     ? TextFields::kOlmoe
                              : c.model_type == "mixtral" ? TextFields::kMixtral
                              : c.model_type == "phimoe"  ? TextFields::kPhimoe
                                                          : TextFields::kQwen3;
    VISMOE_RETURN_IF_ERROR(ParseText(root, "", fields, &c.text));
    if (c.model_type == "olmoe" &&
        c.text.head_dim * c.text.num_attention_heads != c.text.hidden_size) {
      // Its q_norm spans hidden_size values: the whole q projection.
      return Inconsistent("olmoe needs head_dim * num_attention_heads == hidden_size");
    }
  } else if (c.model_type == "deepseek_v2" || c.model_type == "deepseek_v3") {
    VISMOE_RETURN_IF_ERROR(
        config_internal::ParseDeepseek(root, c.model_type == "deepseek_v3", &c.text));
  } else if (c.model_type == "gpt_oss") {
    VISMOE_RETURN_IF_ERROR(config_internal::ParseGptOss(root, &c.text));
  } else if (c.model_type == "deepseek_vl_v2") {
    VISMOE_RETURN_IF_ERROR(config_internal::ParseDeepseekVl2(root, &c.text));
    // Its image token is the tokenizer's "<image>" (the engine reads it).
    VISMOE_ASSIGN_OR_RETURN(c.vl2_vision, Vl2VisionConfig::Parse(std::string(json_text)));
    c.has_vision = true;
    if (c.vl2_vision->n_embed != c.text.hidden_size) {
      return Inconsistent(absl::StrCat("projector_config.n_embed (", c.vl2_vision->n_embed,
                                       ") != language_config.hidden_size (", c.text.hidden_size,
                                       ")"));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: model_type '", c.model_type,
        "' is not supported (qwen3_vl_moe, qwen3_moe, olmoe, mixtral, phimoe, deepseek_v2, "
        "deepseek_v3, gpt_oss, deepseek_vl_v2)"));
  }
  if (top.Has("quantization_config")) {
    VISMOE_RETURN_IF_ERROR(ParseQuantization(root["quantization_config"], &c.text));
    if (c.text.mxfp4.has_value() && c.model_type != "gpt_oss") {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: quantization_config.quant_method 'mxfp4' is supported for gpt_oss only, "
          "not ",
          c.model_type));
    }
  }
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::Load(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto config = Parse(ss.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace vismoe
