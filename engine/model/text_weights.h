// TextWeights: the text decoder's non-expert tensors of a checkpoint, as views,
// found through the family's tensor list (engine/model/arch_spec.h) and
// shape-checked. Every backend loads its decoder from this one struct: the CPU
// backend computes on the views, the CUDA backend converts and uploads them.
// Routed experts are not here: they reach the decoder through an
// ExpertProvider (engine/offload/expert_provider.h).
//
// Thread safety: plain views. Ownership: the views point into the Checkpoint,
// which must outlive them.
#ifndef VISMOE_ENGINE_MODEL_TEXT_WEIGHTS_H_
#define VISMOE_ENGINE_MODEL_TEXT_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"

namespace vismoe {

struct DecoderLayerWeights {
  TensorView input_norm, post_norm;
  TensorView input_norm_bias, post_norm_bias;  // empty unless NormKind::kLayerNorm
  TensorView q, k, v, o;
  TensorView q_bias, k_bias, v_bias, o_bias;  // empty unless attention_bias
  TensorView q_norm, k_norm;
  // Multi-head latent attention (TextConfig::mla); q is q_proj or q_b_proj.
  TensorView q_a, q_a_bias, q_a_norm, kv_a, kv_a_bias, kv_a_norm, kv_b;
  bool moe = false;
  TensorView router;                         // [E, H], MoE layers
  TensorView router_bias;  // [E]: kDeepseekSigmoid's selection bias, kTopKSoftmaxBiased's bias
  TensorView sinks;        // [heads], TextConfig::attention_sinks
  TensorView experts_gate_up_bias, experts_down_bias;  // [E, 2I], [E, H]: clamped_swiglu
  TensorView shared_gate, shared_up, shared_down;  // shared experts, if any
  TensorView gate_proj, up_proj, down_proj;  // dense (mlp_only) layers
};

struct TextWeights {
  ArchSpec spec;
  TensorView embed;       // [vocab, H]
  TensorView final_norm;  // [H]
  TensorView final_norm_bias;  // [H], NormKind::kLayerNorm only
  TensorView lm_head;          // [vocab, H]; the embedding when tied and absent
  TensorView lm_head_bias;     // [vocab], TextConfig::lm_head_bias only
  std::vector<DecoderLayerWeights> layers;

  // Reads every non-expert text tensor ExpectedTensors(config) lists. Errors
  // name the tensor (missing, wrong shape) or the config field.
  static absl::StatusOr<TextWeights> Load(const ModelConfig& config, const Checkpoint& checkpoint);
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_TEXT_WEIGHTS_H_
