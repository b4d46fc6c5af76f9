#include "engine/model/arch_spec.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

// The family table: one row per supported model_type.
struct FamilyRow {
  std::string_view model_type;
  ModelFamily family;
  std::string_view text_prefix;
  std::string_view vision_prefix;
  ExpertStorage expert_storage;
  // transformers' Qwen3-VL-MoE router renormalises whatever norm_topk_prob says.
  bool always_renormalize;
  QkNormScope qk_norm;
  // Mixtral's names of the MoE block and its experts' tensors; empty = the
  // Qwen names (ExpertNaming's defaults).
  std::string_view moe_block = "";
  std::string_view expert_gate = "", expert_up = "", expert_down = "";
  NormKind norm = NormKind::kRms;
  RouterKind router = RouterKind::kSoftmaxTopK;
  std::string_view lm_head = kLmHeadName;
};
constexpr FamilyRow kFamilies[] = {
    {"qwen3_vl_moe", ModelFamily::kQwen3VlMoe, "model.language_model.", "model.visual.",
     ExpertStorage::kFused, true, QkNormScope::kPerHead},
    {"qwen3_moe", ModelFamily::kQwen3Moe, "model.", "", ExpertStorage::kPerExpert, false,
     QkNormScope::kPerHead},
    {"olmoe", ModelFamily::kOlmoe, "model.", "", ExpertStorage::kPerExpert, false,
     QkNormScope::kProjection},
    {"mixtral", ModelFamily::kMixtral, "model.", "", ExpertStorage::kPerExpert, true,
     QkNormScope::kNone, "block_sparse_moe.", "w1.weight", "w3.weight", "w2.weight"},
    {"phimoe", ModelFamily::kPhimoe, "model.", "", ExpertStorage::kPerExpert, false,
     QkNormScope::kNone, "block_sparse_moe.", "w1.weight", "w3.weight", "w2.weight",
     NormKind::kLayerNorm, RouterKind::kSparseMixer},
    {"deepseek_v2", ModelFamily::kDeepseekV2, "model.", "", ExpertStorage::kPerExpert, false,
     QkNormScope::kNone, "", "", "", "", NormKind::kRms, RouterKind::kDeepseekSoftmax},
    {"deepseek_v3", ModelFamily::kDeepseekV3, "model.", "", ExpertStorage::kPerExpert, false,
     QkNormScope::kNone, "", "", "", "", NormKind::kRms, RouterKind::kDeepseekSigmoid},
    {"gpt_oss", ModelFamily::kGptOss, "model.", "", ExpertStorage::kFused, false,
     QkNormScope::kNone, "", "", "", "", NormKind::kRms, RouterKind::kTopKSoftmaxBiased},
    // The router is V3's when the config scores by sigmoid (TextConfig::deepseek_sigmoid).
    {"deepseek_vl_v2", ModelFamily::kDeepseekVl2, "language.model.", "", ExpertStorage::kPerExpert,
     false, QkNormScope::kNone, "", "", "", "", NormKind::kRms, RouterKind::kDeepseekSoftmax,
     "language.lm_head.weight"},
};

absl::Status Positive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " must be > 0, got ", value));
}

absl::Status CheckText(const TextConfig& t) {
  VISMOE_RETURN_IF_ERROR(Positive("text_config.hidden_size", t.hidden_size));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.num_hidden_layers", t.num_hidden_layers));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.num_attention_heads", t.num_attention_heads));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.num_key_value_heads", t.num_key_value_heads));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.head_dim", t.head_dim));
  VISMOE_RETURN_IF_ERROR(Positive("text_config.vocab_size", t.vocab_size));
  bool any_moe = false, any_dense = false;
  for (int l = 0; l < t.num_hidden_layers; ++l) (t.IsMoeLayer(l) ? any_moe : any_dense) = true;
  if (any_moe) {
    VISMOE_RETURN_IF_ERROR(Positive("text_config.num_experts", t.num_experts));
    VISMOE_RETURN_IF_ERROR(Positive("text_config.moe_intermediate_size", t.moe_intermediate_size));
    if (t.num_experts_per_tok < 1 || t.num_experts_per_tok > t.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("text_config.num_experts_per_tok must be in [1, ", t.num_experts, "], got ",
                       t.num_experts_per_tok));
    }
  }
  if (any_dense) {
    VISMOE_RETURN_IF_ERROR(Positive("text_config.intermediate_size", t.intermediate_size));
  }
  return absl::OkStatus();
}

absl::Status CheckVision(const VisionConfig& v) {
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.depth", v.depth));
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.hidden_size", v.hidden_size));
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.num_heads", v.num_heads));
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.intermediate_size", v.intermediate_size));
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.in_channels", v.in_channels));
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.patch_size", v.patch_size));
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.temporal_patch_size", v.temporal_patch_size));
  VISMOE_RETURN_IF_ERROR(Positive("vision_config.spatial_merge_size", v.spatial_merge_size));
  VISMOE_RETURN_IF_ERROR(
      Positive("vision_config.num_position_embeddings", v.num_position_embeddings));
  return Positive("vision_config.out_hidden_size", v.out_hidden_size);
}

// Appends specs; a small builder so the lists below read like a checkpoint listing.
class SpecList {
 public:
  using Init = TensorSpec::Init;
  TensorSpec& Add(std::string name, Shape shape, WeightRole role, int layer = -1,
                  Init init = Init::kNormal) {
    TensorSpec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.role = role;
    s.layer = layer;
    s.init = init;
    specs_.push_back(std::move(s));
    return specs_.back();
  }
  void Ones(std::string name, Shape shape, WeightRole role, int layer = -1) {
    Add(std::move(name), std::move(shape), role, layer, Init::kOnes);
  }
  TensorSpec& Zeros(std::string name, Shape shape, WeightRole role, int layer) {
    return Add(std::move(name), std::move(shape), role, layer, Init::kZeros);
  }
  std::vector<TensorSpec> Take() { return std::move(specs_); }

 private:
  std::vector<TensorSpec> specs_;
};

// DeepSeek's multi-head latent attention (TextConfig::Mla).
void AddLatentAttention(const TextConfig& c, const std::string& ap, int l, SpecList* out) {
  using R = WeightRole;
  const TextConfig::Mla& m = *c.mla;
  const int64_t h = c.hidden_size, nh = c.num_attention_heads;
  const int64_t r = m.kv_lora_rank, dr = m.qk_rope_head_dim;
  if (m.q_lora_rank > 0) {
    out->Add(ap + "q_a_proj.weight", {m.q_lora_rank, h}, R::kQA, l);
    if (c.attention_bias) out->Add(ap + "q_a_proj.bias", {m.q_lora_rank}, R::kQABias, l);
    out->Ones(ap + "q_a_layernorm.weight", {m.q_lora_rank}, R::kQANorm, l);
    out->Add(ap + "q_b_proj.weight", {nh * m.qk_head_dim(), m.q_lora_rank}, R::kQ, l);
  } else {
    out->Add(ap + "q_proj.weight", {nh * m.qk_head_dim(), h}, R::kQ, l);
  }
  out->Add(ap + "kv_a_proj_with_mqa.weight", {r + dr, h}, R::kKvA, l);
  if (c.attention_bias) out->Add(ap + "kv_a_proj_with_mqa.bias", {r + dr}, R::kKvABias, l);
  out->Ones(ap + "kv_a_layernorm.weight", {r}, R::kKvANorm, l);
  out->Add(ap + "kv_b_proj.weight", {nh * (m.qk_nope_head_dim + m.v_head_dim), r}, R::kKvB, l);
  out->Add(ap + "o_proj.weight", {h, nh * m.v_head_dim}, R::kO, l);
  if (c.attention_bias) out->Add(ap + "o_proj.bias", {h}, R::kOBias, l);
}

void AddAttention(const ArchSpec& spec, const TextConfig& c, const std::string& lp, int l,
                  SpecList* out) {
  using R = WeightRole;
  const std::string ap = lp + "self_attn.";
  if (c.mla.has_value()) return AddLatentAttention(c, ap, l, out);
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t qd = int64_t{c.num_attention_heads} * hd, kvd = int64_t{c.num_key_value_heads} * hd;
  out->Add(ap + "q_proj.weight", {qd, h}, R::kQ, l);
  out->Add(ap + "k_proj.weight", {kvd, h}, R::kK, l);
  out->Add(ap + "v_proj.weight", {kvd, h}, R::kV, l);
  out->Add(ap + "o_proj.weight", {h, qd}, R::kO, l);
  if (c.attention_bias) {
    out->Add(ap + "q_proj.bias", {qd}, R::kQBias, l);
    out->Add(ap + "k_proj.bias", {kvd}, R::kKBias, l);
    out->Add(ap + "v_proj.bias", {kvd}, R::kVBias, l);
    out->Add(ap + "o_proj.bias", {h}, R::kOBias, l);
  }
  if (c.attention_sinks) out->Add(ap + "sinks", {c.num_attention_heads}, R::kSinks, l);
  if (spec.qk_norm == QkNormScope::kNone) return;
  const bool whole = spec.qk_norm == QkNormScope::kProjection;
  out->Ones(ap + "q_norm.weight", {whole ? qd : hd}, R::kQNorm, l);
  out->Ones(ap + "k_norm.weight", {whole ? kvd : hd}, R::kKNorm, l);
}

void AddExperts(const ArchSpec& spec, const TextConfig& c, int l, SpecList* out) {
  using R = WeightRole;
  const int64_t h = c.hidden_size, e = c.num_experts, i = c.moe_intermediate_size;
  const std::string xp = spec.ExpertPrefix(l);
  if (spec.expert_storage == ExpertStorage::kFused) {
    out->Add(xp + kFusedGateUpName, {e, h, 2 * i}, R::kExpertsGateUp, l).routed_expert = true;
    out->Add(xp + kFusedDownName, {e, i, h}, R::kExpertsDown, l).routed_expert = true;
    return;
  }
  for (int x = 0; x < e; ++x) {
    const std::string eb = absl::StrCat(xp, x, ".");
    const ExpertNaming& n = spec.experts;
    for (auto [name, shape, role] : {std::tuple{n.gate, Shape{i, h}, R::kExpertGate},
                                     std::tuple{n.up, Shape{i, h}, R::kExpertUp},
                                     std::tuple{n.down, Shape{h, i}, R::kExpertDown}}) {
      TensorSpec& s = out->Add(eb + name, shape, role, l);
      s.expert = x;
      s.routed_expert = true;
    }
  }
}

void AddText(const ArchSpec& spec, const TextConfig& c, SpecList* out) {
  using R = WeightRole;
  const std::string& p = spec.text_prefix;
  const int64_t h = c.hidden_size;
  const bool layer_norm = spec.norm == NormKind::kLayerNorm;
  out->Add(p + "embed_tokens.weight", {c.vocab_size, h}, R::kEmbed);
  out->Ones(p + "norm.weight", {h}, R::kFinalNorm);
  if (layer_norm) out->Zeros(p + "norm.bias", {h}, R::kFinalNormBias, -1);
  if (!c.tie_word_embeddings) out->Add(spec.lm_head, {c.vocab_size, h}, R::kLmHead);
  if (c.lm_head_bias) out->Zeros("lm_head.bias", {c.vocab_size}, R::kLmHeadBias, -1);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string lp = absl::StrCat(p, "layers.", l, ".");
    out->Ones(lp + "input_layernorm.weight", {h}, R::kInputNorm, l);
    out->Ones(lp + "post_attention_layernorm.weight", {h}, R::kPostNorm, l);
    if (layer_norm) {
      out->Zeros(lp + "input_layernorm.bias", {h}, R::kInputNormBias, l);
      out->Zeros(lp + "post_attention_layernorm.bias", {h}, R::kPostNormBias, l);
    }
    AddAttention(spec, c, lp, l, out);
    if (!c.IsMoeLayer(l)) {
      const int64_t in = c.intermediate_size;
      out->Add(lp + "mlp.gate_proj.weight", {in, h}, R::kMlpGate, l);
      out->Add(lp + "mlp.up_proj.weight", {in, h}, R::kMlpUp, l);
      out->Add(lp + "mlp.down_proj.weight", {h, in}, R::kMlpDown, l);
      continue;
    }
    out->Add(spec.experts.RouterName(l), {c.num_experts, h}, R::kRouter, l);
    if (spec.router == RouterKind::kDeepseekSigmoid) {
      out->Zeros(lp + "mlp.gate.e_score_correction_bias", {c.num_experts}, R::kRouterBias, l)
          .dtype = DType::kF32;
    } else if (spec.router == RouterKind::kTopKSoftmaxBiased) {
      out->Add(spec.experts.BlockPrefix(l) + "router.bias", {c.num_experts}, R::kRouterBias, l);
    }
    AddExperts(spec, c, l, out);
    if (c.clamped_swiglu.has_value()) {  // per-expert biases, kept resident
      const std::string xp = spec.ExpertPrefix(l);
      const int64_t e = c.num_experts, i = c.moe_intermediate_size;
      out->Add(xp + "gate_up_proj_bias", {e, 2 * i}, R::kExpertsGateUpBias, l);
      out->Add(xp + "down_proj_bias", {e, h}, R::kExpertsDownBias, l);
    }
    if (c.n_shared_experts > 0) {
      const int64_t si = int64_t{c.n_shared_experts} * c.moe_intermediate_size;
      const std::string sp = lp + "mlp.shared_experts.";
      out->Add(sp + "gate_proj.weight", {si, h}, R::kSharedGate, l);
      out->Add(sp + "up_proj.weight", {si, h}, R::kSharedUp, l);
      out->Add(sp + "down_proj.weight", {h, si}, R::kSharedDown, l);
    }
  }
}

void AddVision(const std::string& p, const VisionConfig& vc, SpecList* out) {
  using R = WeightRole;
  const int64_t hd = vc.hidden_size, inter = vc.intermediate_size;
  const int64_t mh = hd * vc.spatial_merge_size * vc.spatial_merge_size;
  const int64_t o = vc.out_hidden_size;
  out->Add(p + "patch_embed.proj.weight",
           {hd, vc.in_channels, vc.temporal_patch_size, vc.patch_size, vc.patch_size},
           R::kPatchEmbedWeight);
  out->Add(p + "patch_embed.proj.bias", {hd}, R::kPatchEmbedBias);
  out->Add(p + "pos_embed.weight", {vc.num_position_embeddings, hd}, R::kPosEmbed);
  for (int b = 0; b < vc.depth; ++b) {
    const std::string bp = absl::StrCat(p, "blocks.", b, ".");
    out->Ones(bp + "norm1.weight", {hd}, R::kBlockNorm1Weight, b);
    out->Zeros(bp + "norm1.bias", {hd}, R::kBlockNorm1Bias, b);
    out->Ones(bp + "norm2.weight", {hd}, R::kBlockNorm2Weight, b);
    out->Zeros(bp + "norm2.bias", {hd}, R::kBlockNorm2Bias, b);
    out->Add(bp + "attn.qkv.weight", {3 * hd, hd}, R::kBlockQkvWeight, b);
    out->Add(bp + "attn.qkv.bias", {3 * hd}, R::kBlockQkvBias, b);
    out->Add(bp + "attn.proj.weight", {hd, hd}, R::kBlockProjWeight, b);
    out->Add(bp + "attn.proj.bias", {hd}, R::kBlockProjBias, b);
    out->Add(bp + "mlp.linear_fc1.weight", {inter, hd}, R::kBlockFc1Weight, b);
    out->Add(bp + "mlp.linear_fc1.bias", {inter}, R::kBlockFc1Bias, b);
    out->Add(bp + "mlp.linear_fc2.weight", {hd, inter}, R::kBlockFc2Weight, b);
    out->Add(bp + "mlp.linear_fc2.bias", {hd}, R::kBlockFc2Bias, b);
  }
  // The final merger normalises before the spatial shuffle (hidden), the
  // DeepStack mergers after it (hidden * merge^2).
  auto merger = [&](const std::string& mp, int64_t norm_dim, int index) {
    out->Ones(mp + "norm.weight", {norm_dim}, R::kMergerNormWeight, index);
    out->Zeros(mp + "norm.bias", {norm_dim}, R::kMergerNormBias, index);
    out->Add(mp + "linear_fc1.weight", {mh, mh}, R::kMergerFc1Weight, index);
    out->Add(mp + "linear_fc1.bias", {mh}, R::kMergerFc1Bias, index);
    out->Add(mp + "linear_fc2.weight", {o, mh}, R::kMergerFc2Weight, index);
    out->Add(mp + "linear_fc2.bias", {o}, R::kMergerFc2Bias, index);
  };
  merger(p + "merger.", hd, -1);
  for (size_t k = 0; k < vc.deepstack_visual_indexes.size(); ++k) {
    merger(absl::StrCat(p, "deepstack_merger_list.", k, "."), mh, static_cast<int>(k));
  }
}

// DeepSeek-VL2's tower as DeepseekVl2Vision reads it (engine/model/deepseek_vl2.md;
// the unused attention-pool head is left out).
void AddVl2Vision(const Vl2VisionConfig& c, SpecList* out) {
  using R = WeightRole;
  const int64_t w = c.width, f = c.mlp_dim, p = c.patch_size, g = c.grid();
  out->Add("vision.patch_embed.proj.weight", {w, 3, p, p}, R::kPatchEmbedWeight);
  out->Zeros("vision.patch_embed.proj.bias", {w}, R::kPatchEmbedBias, -1);
  out->Add("vision.pos_embed", {1, g * g, w}, R::kPosEmbed);
  for (int b = 0; b < c.layers; ++b) {
    const std::string bp = absl::StrCat("vision.blocks.", b, ".");
    out->Ones(bp + "norm1.weight", {w}, R::kBlockNorm1Weight, b);
    out->Zeros(bp + "norm1.bias", {w}, R::kBlockNorm1Bias, b);
    out->Ones(bp + "norm2.weight", {w}, R::kBlockNorm2Weight, b);
    out->Zeros(bp + "norm2.bias", {w}, R::kBlockNorm2Bias, b);
    out->Add(bp + "attn.qkv.weight", {3 * w, w}, R::kBlockQkvWeight, b);
    out->Zeros(bp + "attn.qkv.bias", {3 * w}, R::kBlockQkvBias, b);
    out->Add(bp + "attn.proj.weight", {w, w}, R::kBlockProjWeight, b);
    out->Zeros(bp + "attn.proj.bias", {w}, R::kBlockProjBias, b);
    out->Add(bp + "mlp.fc1.weight", {f, w}, R::kBlockFc1Weight, b);
    out->Zeros(bp + "mlp.fc1.bias", {f}, R::kBlockFc1Bias, b);
    out->Add(bp + "mlp.fc2.weight", {w, f}, R::kBlockFc2Weight, b);
    out->Zeros(bp + "mlp.fc2.bias", {w}, R::kBlockFc2Bias, b);
  }
  out->Ones("vision.norm.weight", {w}, R::kMergerNormWeight, -1);
  out->Zeros("vision.norm.bias", {w}, R::kMergerNormBias, -1);
  int64_t in = w * c.downsample * c.downsample;
  for (int i = 0; i < c.projector_depth; ++i) {
    const std::string name = absl::StrCat("projector.layers.", 2 * i);
    out->Add(name + ".weight", {c.n_embed, in}, i == 0 ? R::kMergerFc1Weight : R::kMergerFc2Weight,
             i);
    out->Zeros(name + ".bias", {c.n_embed}, i == 0 ? R::kMergerFc1Bias : R::kMergerFc2Bias, i);
    in = c.n_embed;
  }
  out->Add("image_newline", {c.n_embed}, R::kImageNewline);
  out->Add("view_seperator", {c.n_embed}, R::kViewSeparator);
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SupportedModelTypes() {
  std::vector<std::string> names;
  for (const FamilyRow& f : kFamilies) names.emplace_back(f.model_type);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<ArchSpec> ArchSpec::For(const ModelConfig& config) {
  for (const FamilyRow& f : kFamilies) {
    if (config.model_type != f.model_type) continue;
    ArchSpec s;
    s.family = f.family;
    s.text_prefix = std::string(f.text_prefix);
    s.vision_prefix =
        config.has_vision && !config.vl2_vision.has_value() ? std::string(f.vision_prefix) : "";
    s.expert_storage = f.expert_storage;
    s.renormalize_topk = f.always_renormalize || config.text.norm_topk_prob;
    s.qk_norm = f.qk_norm;
    s.norm = f.norm;
    s.router = f.router;
    if (config.text.deepseek_sigmoid) s.router = RouterKind::kDeepseekSigmoid;
    s.lm_head = std::string(f.lm_head);
    s.experts = ExpertNaming(s.text_prefix);
    if (f.router == RouterKind::kTopKSoftmaxBiased) s.experts.router = "router.weight";
    if (!f.moe_block.empty()) {
      s.experts.block = std::string(f.moe_block);
      s.experts.gate = std::string(f.expert_gate);
      s.experts.up = std::string(f.expert_up);
      s.experts.down = std::string(f.expert_down);
    }
    return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model_type '", config.model_type, "' is not supported (", SupportedModelTypes(), ")"));
}

std::string ExpertNaming::LayerPrefix(int layer) const {
  return absl::StrCat(text_prefix, "layers.", layer, ".", block, "experts.");
}

std::string ExpertNaming::RouterName(int layer) const { return BlockPrefix(layer) + router; }

std::string ExpertNaming::BlockPrefix(int layer) const {
  return absl::StrCat(text_prefix, "layers.", layer, ".", block);
}

absl::StatusOr<std::vector<TensorSpec>> ExpectedTensors(const ModelConfig& config) {
  VISMOE_ASSIGN_OR_RETURN(const ArchSpec spec, ArchSpec::For(config));
  VISMOE_RETURN_IF_ERROR(CheckText(config.text));
  SpecList list;
  AddText(spec, config.text, &list);
  if (config.vl2_vision.has_value()) {
    AddVl2Vision(*config.vl2_vision, &list);
  } else if (config.has_vision) {
    VISMOE_RETURN_IF_ERROR(CheckVision(config.vision));
    AddVision(spec.vision_prefix, config.vision, &list);
  }
  return list.Take();
}

bool IsVisionRole(WeightRole role) {
  return static_cast<int>(role) >= static_cast<int>(WeightRole::kPatchEmbedWeight);
}

const TensorSpec* FindTensor(const std::vector<TensorSpec>& specs, WeightRole role, int layer) {
  for (const TensorSpec& s : specs) {
    if (s.role == role && s.layer == layer) return &s;
  }
  return nullptr;
}

}  // namespace vismoe
