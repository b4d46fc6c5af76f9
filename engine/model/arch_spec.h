// ArchSpec: what one model family's checkpoint holds, written once.
//
// Every place that needs a tensor name, a shape, a layer kind or a family quirk
// reads it from here: the text weight loader (engine/model/text_weights.h,
// shared by every backend), the expert providers and memory plan (the routed
// expert tensors), the vision towers and the synthetic weights. Adding a
// weight or a layer kind touches this file (and the backend op that computes
// with it); adding a family adds one row to the family table in arch_spec.cc
// and its tensor list.
//
// Families (model_type in config.json):
//   qwen3_vl_moe  Qwen3-VL-MoE: text under "model.language_model.", routed
//                 experts fused as published (gate_up_proj [E,H,2I], down_proj
//                 [E,I,H]), the router always renormalises its top-k, a vision
//                 tower under "model.visual." with DeepStack mergers.
//   qwen3_moe     Qwen3-MoE text: under "model.", experts one tensor each
//                 (experts.N.{gate,up,down}_proj.weight), top-k renormalised
//                 only with norm_topk_prob.
//   olmoe         OLMoE text: as qwen3_moe, but q_norm / k_norm normalise the
//                 whole q / k projection (weights [heads * head_dim]) and
//                 clip_qkv may clamp q, k, v (TextConfig::clip_qkv).
//   mixtral       Mixtral text: under "model.", the MoE block is
//                 "block_sparse_moe." (router gate.weight, experts.N.{w1,w3,w2}
//                 .weight = gate, up, down), no q/k norms, top-k always
//                 renormalised, optional sliding window
//                 (TextConfig::sliding_window).
//   phimoe        Phi-3.5-MoE: Mixtral's names, but LayerNorms with biases
//                 (NormKind::kLayerNorm: input, post-attention and final),
//                 attention and lm_head biases, the sparsemixer router
//                 (RouterKind::kSparseMixer, top-2), LongRoPE
//                 (TextConfig::longrope).
//   deepseek_v2   DeepSeek-V2 text: multi-head latent attention
//                 (TextConfig::mla: q_proj or q_a_proj + q_a_layernorm +
//                 q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj),
//                 experts one tensor each under "mlp.", shared experts
//                 (mlp.shared_experts.{gate,up,down}_proj), dense first
//                 layers, softmax routing (RouterKind::kDeepseekSoftmax).
//   deepseek_v3   DeepSeek-V3 text: as deepseek_v2, with sigmoid routing and
//                 mlp.gate.e_score_correction_bias (kDeepseekSigmoid).
//   gpt_oss       GPT-OSS in its dequantized layout: fused experts as
//                 Qwen3-VL-MoE's with gate/up interleaved and biases
//                 (experts.{gate_up,down}_proj_bias, resident), the router
//                 mlp.router.{weight,bias} (kTopKSoftmaxBiased), attention
//                 biases and sinks, per-layer windows (engine/model/gpt_oss.md).
// Layer kinds come from the config: a decoder layer is MoE unless it is in
// mlp_only_layers or off the decoder_sparse_step grid (TextConfig::IsMoeLayer).
//
// Thread safety: plain values and free functions.
#ifndef VISMOE_ENGINE_MODEL_ARCH_SPEC_H_
#define VISMOE_ENGINE_MODEL_ARCH_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/model/model_config.h"

namespace vismoe {

enum class ModelFamily {
  kQwen3VlMoe,
  kQwen3Moe,
  kOlmoe,
  kMixtral,
  kPhimoe,
  kDeepseekV2,
  kDeepseekV3,
  kGptOss,
  kDeepseekVl2,  // DeepSeek-VL2's language model (its vision path: arch/deepseek_vl2_vision.h)
};

// The decoder's norms: RMSNorm with a weight, or LayerNorm with weight and
// bias (torch.nn.LayerNorm over the hidden size, eps = rms_norm_eps).
enum class NormKind { kRms, kLayerNorm };

// How a MoE layer's router turns logits into experts and combine weights:
// softmax then top-k (renormalised per ArchSpec::renormalize_topk), PhiMoE's
// sparsemixer (two masked-softmax picks, engine/ops/cpu/moe.h), DeepSeek-V2's
// softmax top-k (optionally group-limited, times routed_scaling_factor) or
// DeepSeek-V3's sigmoid with a selection bias (engine/ops/cpu/group_router.h), or
// GPT-OSS's top-k of the biased logits with a softmax over those k.
enum class RouterKind {
  kSoftmaxTopK,
  kSparseMixer,
  kDeepseekSoftmax,
  kDeepseekSigmoid,
  kTopKSoftmaxBiased
};

// What q_norm / k_norm normalise: each head's head_dim values (Qwen3), the
// whole projection of a row, all heads together (OLMoE), or nothing: the
// family has no q/k norms (Mixtral).
enum class QkNormScope { kPerHead, kProjection, kNone };

// How a MoE layer's routed experts are stored in the checkpoint.
enum class ExpertStorage {
  kFused,      // P layers.N.mlp.experts.gate_up_proj [E,H,2I] and down_proj [E,I,H]
  kPerExpert,  // P layers.N.mlp.experts.E.{gate,up}_proj.weight [I,H], down_proj.weight [H,I]
};

// What a tensor is to the model (the loaders dispatch on it).
// clang-format off
enum class WeightRole {
  kEmbed, kFinalNorm, kLmHead, kFinalNormBias, kLmHeadBias,
  // Per decoder layer (TensorSpec::layer).
  kInputNorm, kPostNorm, kInputNormBias, kPostNormBias, kQ, kK, kV, kO, kQBias, kKBias, kVBias, kOBias, kQNorm, kKNorm,
  kRouter,                              // MoE layers
  // Multi-head latent attention (TextConfig::mla); kQ is q_proj or q_b_proj.
  kQA, kQABias, kQANorm, kKvA, kKvABias, kKvANorm, kKvB,
  kSharedGate, kSharedUp, kSharedDown,  // shared experts (DeepSeek MoE layers)
  kRouterBias,  // [E]: DeepSeek-V3's e_score_correction_bias, GPT-OSS's router bias
  kSinks,       // GPT-OSS: self_attn.sinks [heads]
  kExpertsGateUpBias, kExpertsDownBias,  // GPT-OSS: [E, 2I], [E, H] (resident)
  kMlpGate, kMlpUp, kMlpDown,           // dense (mlp_only) layers
  kExpertsGateUp, kExpertsDown,         // routed experts, kFused (all experts of a layer)
  kExpertGate, kExpertUp, kExpertDown,  // routed experts, kPerExpert (one expert)
  // The vision tower: TensorSpec::layer is the block of the kBlock* roles and
  // the merger of the kMerger* roles (-1 the final merger, k DeepStack merger k).
  kPatchEmbedWeight, kPatchEmbedBias, kPosEmbed,
  kBlockNorm1Weight, kBlockNorm1Bias, kBlockNorm2Weight, kBlockNorm2Bias,
  kBlockQkvWeight, kBlockQkvBias, kBlockProjWeight, kBlockProjBias,
  kBlockFc1Weight, kBlockFc1Bias, kBlockFc2Weight, kBlockFc2Bias,
  kMergerNormWeight, kMergerNormBias, kMergerFc1Weight, kMergerFc1Bias,
  kMergerFc2Weight, kMergerFc2Bias,
  // DeepSeek-VL2's layout rows (its tower's other tensors take the roles above:
  // the projector's first layer kMergerFc1*, its later ones kMergerFc2* with
  // TensorSpec::layer their index).
  kImageNewline, kViewSeparator,
};
// clang-format on

// True for the vision tower's roles.
bool IsVisionRole(WeightRole role);

// One tensor of the model.
struct TensorSpec {
  enum class Init { kNormal, kOnes, kZeros };  // synthetic weights' fill

  std::string name;
  DType dtype = DType::kBF16;  // synthetic weights' dtype (files may hold BF16/F16/F32)
  Shape shape;
  Init init = Init::kNormal;
  WeightRole role = WeightRole::kEmbed;
  int layer = -1;              // decoder layer, vision block or merger (see WeightRole), else -1
  int expert = -1;             // kPerExpert expert tensors, else -1
  bool routed_expert = false;  // part of a routed expert (what the offload runtime moves)

  int64_t numel() const;
  int64_t nbytes() const { return static_cast<int64_t>(DTypeBytes(dtype, numel())); }
};

// Where a MoE layer's router and routed experts live, and the per-expert
// tensor names (ExpertStorage::kPerExpert):
//   <text_prefix>layers.<layer>.<block>gate.weight                  router [E,H]
//   <text_prefix>layers.<layer>.<block>experts.<e>.<gate|up|down>   one expert
//   <text_prefix>layers.<layer>.<block>experts.{gate_up_proj,down_proj}  kFused
// Built implicitly from a text prefix it names the Qwen families' tensors
// (block "mlp.", gate_proj / up_proj / down_proj); ArchSpec::experts() gives
// every family's.
struct ExpertNaming {
  ExpertNaming(std::string prefix)  // NOLINT: implicit, the Qwen names
      : text_prefix(std::move(prefix)) {}
  ExpertNaming(const char* prefix) : ExpertNaming(std::string(prefix)) {}  // NOLINT

  std::string text_prefix;
  std::string block = "mlp.";
  std::string gate = "gate_proj.weight";  // [I,H]
  std::string up = "up_proj.weight";      // [I,H]
  std::string down = "down_proj.weight";  // [H,I]
  std::string router = "gate.weight";     // [E,H], in the block

  // "<text_prefix>layers.<layer>.<block>experts.": every routed expert tensor
  // of the layer starts with it.
  std::string LayerPrefix(int layer) const;
  std::string RouterName(int layer) const;
  // "<text_prefix>layers.<layer>.<block>": the MoE block's tensors start with it.
  std::string BlockPrefix(int layer) const;
};
inline constexpr char kFusedGateUpName[] = "gate_up_proj";
inline constexpr char kFusedDownName[] = "down_proj";

// The output projection. A tied checkpoint (tie_word_embeddings) may omit it:
// the embedding is the projection then (ExpectedTensors lists it only untied).
inline constexpr char kLmHeadName[] = "lm_head.weight";

struct ArchSpec {
  ModelFamily family = ModelFamily::kQwen3VlMoe;
  std::string text_prefix;    // where the text weights live ("model.language_model.")
  std::string vision_prefix;  // "model.visual.", or empty without a vision tower
  ExpertStorage expert_storage = ExpertStorage::kFused;
  // The router renormalises the top-k probabilities to sum to 1.
  bool renormalize_topk = true;
  QkNormScope qk_norm = QkNormScope::kPerHead;
  NormKind norm = NormKind::kRms;
  RouterKind router = RouterKind::kSoftmaxTopK;
  ExpertNaming experts{""};           // text_prefix is text_prefix's
  std::string lm_head = kLmHeadName;  // the output projection (DeepSeek-VL2: under language.)

  // The spec of `config`'s family. InvalidArgument naming the model_type when
  // it is not supported.
  static absl::StatusOr<ArchSpec> For(const ModelConfig& config);

  std::string ExpertPrefix(int layer) const { return experts.LayerPrefix(layer); }
};

// The supported model_types, for messages: "qwen3_vl_moe, qwen3_moe".
std::string SupportedModelTypes();

// Every tensor of `config`'s model in a fixed order: text (embedding, final
// norm, lm_head unless tied, then layer by layer), then the vision tower's.
// Shapes follow the config. InvalidArgument naming the field for a config
// with a zero/negative size or an unsupported model_type.
absl::StatusOr<std::vector<TensorSpec>> ExpectedTensors(const ModelConfig& config);

// The entry of `specs` with `role` at decoder `layer` (-1 for model-wide
// tensors); null when there is none (e.g. a router of a dense layer).
const TensorSpec* FindTensor(const std::vector<TensorSpec>& specs, WeightRole role, int layer = -1);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_ARCH_SPEC_H_
