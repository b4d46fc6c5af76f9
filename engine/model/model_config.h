// ModelConfig: the architecture hyper-parameters of a checkpoint, parsed from
// its Hugging Face config.json. Every shape, eps, rope setting and special
// token id comes from the file; nothing is hard-coded.
#ifndef VISMOE_ENGINE_MODEL_MODEL_CONFIG_H_
#define VISMOE_ENGINE_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/model/vl2_vision_config.h"

namespace vismoe {

// The quantization_config of a fine-grained FP8 checkpoint (transformers'
// FineGrainedFP8Config, as Qwen's and DeepSeek's FP8 checkpoints publish it):
// linear weights stored F8_E4M3 with a `<name>_scale_inv` per block of
// block_rows x block_cols, activations unquantised ("dynamic"). Which weights
// are FP8 is read from each tensor's dtype; modules_to_not_convert is kept
// for messages.
struct Fp8Config {
  QuantBlock block;
  std::vector<std::string> modules_to_not_convert;
};

// The quantization_config of an MXFP4 checkpoint (transformers'
// Mxfp4Config, as openai/gpt-oss publishes it): the routed experts' two
// matrices stored as `<name>_blocks` + `<name>_scales` (Checkpoint::GetMxfp4),
// everything else as loaded. modules_to_not_convert is kept for messages.
struct Mxfp4Config {
  std::vector<std::string> modules_to_not_convert;
};

struct TextConfig {
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;  // dense MLP layers (mlp_only_layers), if any
  int moe_intermediate_size = 0;
  int num_experts = 0;
  int num_experts_per_tok = 0;
  bool norm_topk_prob = true;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  float rms_norm_eps = 1e-6f;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rope_theta = 10000.0;
  // Interleaved M-RoPE: frequency pairs per axis (t, h, w); sums to head_dim/2.
  // Empty for text-only models (plain RoPE).
  std::vector<int> mrope_section;
  bool mrope_interleaved = false;
  bool attention_bias = false;
  // OLMoE: q, k and v are clamped to [-clip_qkv, clip_qkv] after their
  // norms; 0 = no clamp (config null or absent).
  float clip_qkv = 0;
  // Mixtral: a query attends to the last sliding_window positions, itself
  // included; 0 = every earlier position (config null or absent).
  int sliding_window = 0;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  // PhiMoE: lm_head has a bias.
  bool lm_head_bias = false;
  // PhiMoE's sparsemixer (ArchSpec::router): a candidate expert is masked out
  // of a pick's softmax when (max - logit) / max(|logit|, max) > 2 * this.
  float router_jitter_noise = 0;
  // LongRoPE (rope_type "longrope", Phi-3.5-MoE), as transformers' PhiMoE
  // computes it: inv_freq[j] = 1 / (short_factor[j] * theta^(2j / head_dim))
  // (its forward never switches to long_factor), and cos / sin scaled by
  // long_mscale when the step's last position + 1 exceeds
  // original_max_position_embeddings, else by short_mscale.
  struct LongRope {
    std::vector<float> short_factor, long_factor;  // head_dim / 2 each
    double short_mscale = 1, long_mscale = 1;
    int original_max_position_embeddings = 0;
  };
  std::optional<LongRope> longrope;
  // YaRN (rope_type "yarn", DeepSeek-V2/V3), as transformers'
  // _compute_yarn_parameters: inv_freq blends theta^(-2j/d) and that over
  // `factor` along a linear ramp between the correction dims of beta_fast and
  // beta_slow, and cos / sin are scaled by attention_factor (given, or
  // mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are
  // set, else mscale(factor, 1); mscale(s, m) = 0.1 m ln s + 1 for s > 1).
  struct Yarn {
    double factor = 1;
    int original_max_position_embeddings = 0;
    double beta_fast = 32, beta_slow = 1;
    double mscale = 0, mscale_all_dim = 0;  // 0: absent
    std::optional<double> attention_factor;
    bool truncate = true;
  };
  std::optional<Yarn> yarn;

  // DeepSeek-V2/V3 multi-head latent attention (transformers'
  // DeepseekV2Attention): q from q_proj, or q_a_proj -> RMSNorm -> q_b_proj
  // when q_lora_rank > 0; kv_a_proj_with_mqa gives a latent of kv_lora_rank
  // (RMSNorm'd) and one rope key of qk_rope_head_dim shared by the heads;
  // kv_b_proj expands the latent into each head's nope key and value. The KV
  // cache keeps the normed latent and the rotated rope key of each token, not
  // the expanded keys and values. head_dim is qk_rope_head_dim then (the
  // rotary table's width), num_key_value_heads num_attention_heads.
  struct Mla {
    int q_lora_rank = 0;  // 0: one q_proj
    int kv_lora_rank = 0;
    int qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
    // RoPE on pairs (2i, 2i+1) (DeepSeek-V2 always, V3 unless
    // rope_interleave is false; q . k equals that of V3's de-interleaved
    // output), else rotate_half.
    bool rope_interleave = true;
    int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  };
  std::optional<Mla> mla;

  // DeepSeek MoE blocks: shared experts (one MLP of n_shared_experts *
  // moe_intermediate_size, every token, weight 1), the first
  // first_k_dense_replace layers dense, routed weights times
  // routed_scaling_factor, and group-limited selection: the experts in
  // n_group groups, only the topk_group best groups eligible (DeepSeek-V2's
  // topk_method group_limited_greedy; DeepSeek-V3 always).
  int n_shared_experts = 0;
  int first_k_dense_replace = 0;
  float routed_scaling_factor = 1;
  int n_group = 1, topk_group = 1;
  bool group_limited = false;

  // GPT-OSS: each layer's attention window from layer_types
  // ("sliding_attention": sliding_window, "full_attention": 0); empty = every
  // layer takes sliding_window.
  std::vector<int> layer_windows;
  // GPT-OSS: one learned logit per head in each attention softmax's
  // denominator (self_attn.sinks), with no value.
  bool attention_sinks = false;
  // GPT-OSS's experts: biases on gate_up and down, gate and up interleaved
  // (even and odd columns), gate = min(gate, limit), up = clamp(up, +-limit),
  // out = (up + 1) * gate * sigmoid(alpha * gate).
  struct ClampedSwiglu {
    float alpha = 1.702f;
    float limit = 7.0f;
  };
  std::optional<ClampedSwiglu> clamped_swiglu;

  // DeepSeek-VL2's language model routing as its published MoEGate does with
  // scoring_func sigmoid / topk_method noaux_tc: V3's biased sigmoid router
  // (RouterKind::kDeepseekSigmoid) in a deepseek_vl_v2 checkpoint.
  bool deepseek_sigmoid = false;

  // Set for an FP8 checkpoint (the top-level quantization_config).
  std::optional<Fp8Config> fp8;
  // Set for an MXFP4 checkpoint (gpt_oss only).
  std::optional<Mxfp4Config> mxfp4;

  // True when decoder layer `layer` has a sparse MoE block.
  bool IsMoeLayer(int layer) const;
  // The attention window of `layer` (0: every earlier position).
  int LayerWindow(int layer) const {
    return layer_windows.empty() ? sliding_window : layer_windows[layer];
  }
  // One token's KV cache row of one layer, and how many such planes a layer
  // keeps: keys and values (2 planes of num_key_value_heads * head_dim), or
  // MLA's latent and rope key in one plane (kv_lora_rank + qk_rope_head_dim).
  int64_t KvRowElems() const;
  int KvPlanes() const { return mla.has_value() ? 1 : 2; }
  // The attention softmax scale: head_dim^-0.5, or MLA's qk_head_dim^-0.5
  // times mscale(factor, mscale_all_dim)^2 under YaRN.
  double AttentionScale() const;
};

// YaRN's mscale(s, m): 0.1 m ln s + 1 for s > 1, else 1.
double YarnMscale(double scale, double m);
// The factor YaRN scales cos and sin by (TextConfig::Yarn).
double YarnAttentionFactor(const TextConfig::Yarn& yarn);

// The weight block size of an FP8 checkpoint; unset otherwise.
inline std::optional<QuantBlock> Fp8Block(const TextConfig& c) {
  return c.fp8.has_value() ? std::optional<QuantBlock>(c.fp8->block) : std::nullopt;
}

struct VisionConfig {
  int depth = 0;
  int hidden_size = 0;
  int num_heads = 0;
  int intermediate_size = 0;
  std::string hidden_act;  // "gelu_pytorch_tanh" for Qwen3-VL
  int in_channels = 3;
  int patch_size = 0;
  int temporal_patch_size = 0;
  int spatial_merge_size = 0;
  int num_position_embeddings = 0;
  int out_hidden_size = 0;
  std::vector<int> deepstack_visual_indexes;
  float layer_norm_eps = 1e-6f;
};

struct ModelConfig {
  std::string
      model_type;  // "qwen3_vl_moe", or a text MoE: "qwen3_moe", "olmoe", "deepseek_v2", ...
  TextConfig text;
  bool has_vision =
      false;  // takes images: Qwen3-VL's tower (vision) or DeepSeek-VL2's (vl2_vision)
  VisionConfig vision;
  // DeepSeek-VL2's tiling, SigLIP tower and projector (deepseek_vl_v2 only).
  std::optional<Vl2VisionConfig> vl2_vision;
  int image_token_id = -1;
  int video_token_id = -1;
  int vision_start_token_id = -1;
  int vision_end_token_id = -1;

  // Parses config.json text. Errors name the offending field.
  static absl::StatusOr<ModelConfig> Parse(std::string_view json_text);
  // Reads and parses `<dir>/config.json`.
  static absl::StatusOr<ModelConfig> Load(const std::string& checkpoint_dir);
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_MODEL_CONFIG_H_
