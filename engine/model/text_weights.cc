#include "engine/model/text_weights.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

// Where a per-layer tensor of `role` goes; null for roles this struct does not hold.
TensorView* LayerSlot(DecoderLayerWeights& w, WeightRole role) {
  switch (role) {
    case WeightRole::kInputNorm:
      return &w.input_norm;
    case WeightRole::kPostNorm:
      return &w.post_norm;
    case WeightRole::kInputNormBias:
      return &w.input_norm_bias;
    case WeightRole::kPostNormBias:
      return &w.post_norm_bias;
    case WeightRole::kQ:
      return &w.q;
    case WeightRole::kK:
      return &w.k;
    case WeightRole::kV:
      return &w.v;
    case WeightRole::kO:
      return &w.o;
    case WeightRole::kQBias:
      return &w.q_bias;
    case WeightRole::kKBias:
      return &w.k_bias;
    case WeightRole::kVBias:
      return &w.v_bias;
    case WeightRole::kOBias:
      return &w.o_bias;
    case WeightRole::kQNorm:
      return &w.q_norm;
    case WeightRole::kKNorm:
      return &w.k_norm;
    case WeightRole::kRouter:
      return &w.router;
    case WeightRole::kMlpGate:
      return &w.gate_proj;
    case WeightRole::kMlpUp:
      return &w.up_proj;
    case WeightRole::kMlpDown:
      return &w.down_proj;
    case WeightRole::kQA:
      return &w.q_a;
    case WeightRole::kQABias:
      return &w.q_a_bias;
    case WeightRole::kQANorm:
      return &w.q_a_norm;
    case WeightRole::kKvA:
      return &w.kv_a;
    case WeightRole::kKvABias:
      return &w.kv_a_bias;
    case WeightRole::kKvANorm:
      return &w.kv_a_norm;
    case WeightRole::kKvB:
      return &w.kv_b;
    case WeightRole::kRouterBias:
      return &w.router_bias;
    case WeightRole::kSharedGate:
      return &w.shared_gate;
    case WeightRole::kSharedUp:
      return &w.shared_up;
    case WeightRole::kSharedDown:
      return &w.shared_down;
    case WeightRole::kSinks:
      return &w.sinks;
    case WeightRole::kExpertsGateUpBias:
      return &w.experts_gate_up_bias;
    case WeightRole::kExpertsDownBias:
      return &w.experts_down_bias;
    default:
      return nullptr;
  }
}

TensorView* Slot(TextWeights& w, const TensorSpec& s) {
  switch (s.role) {
    case WeightRole::kEmbed:
      return &w.embed;
    case WeightRole::kFinalNorm:
      return &w.final_norm;
    case WeightRole::kLmHead:
      return &w.lm_head;
    case WeightRole::kFinalNormBias:
      return &w.final_norm_bias;
    case WeightRole::kLmHeadBias:
      return &w.lm_head_bias;
    default:
      return s.layer >= 0 && s.layer < static_cast<int>(w.layers.size())
                 ? LayerSlot(w.layers[s.layer], s.role)
                 : nullptr;
  }
}

// Roles computed only through cpu::Linear-style products, so they may be
// block-quantised (F8_E4M3 + scales) in an FP8 checkpoint.
bool IsLinearRole(WeightRole role) {
  switch (role) {
    case WeightRole::kQ:
    case WeightRole::kK:
    case WeightRole::kV:
    case WeightRole::kO:
    case WeightRole::kRouter:
    case WeightRole::kMlpGate:
    case WeightRole::kMlpUp:
    case WeightRole::kMlpDown:
    case WeightRole::kLmHead:
    case WeightRole::kQA:
    case WeightRole::kKvA:
    case WeightRole::kKvB:
    case WeightRole::kSharedGate:
    case WeightRole::kSharedUp:
    case WeightRole::kSharedDown:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<TextWeights> TextWeights::Load(const ModelConfig& config,
                                              const Checkpoint& checkpoint) {
  TextWeights w;
  VISMOE_ASSIGN_OR_RETURN(w.spec, ArchSpec::For(config));
  VISMOE_ASSIGN_OR_RETURN(const std::vector<TensorSpec> specs, ExpectedTensors(config));
  w.layers.resize(config.text.num_hidden_layers);
  for (int l = 0; l < config.text.num_hidden_layers; ++l) {
    w.layers[l].moe = config.text.IsMoeLayer(l);
  }
  for (const TensorSpec& s : specs) {
    if (s.routed_expert || IsVisionRole(s.role)) continue;
    TensorView* slot = Slot(w, s);
    if (slot == nullptr) {
      return absl::InternalError(absl::StrCat("tensor list: no slot for ", s.name));
    }
    if (IsLinearRole(s.role)) {
      VISMOE_ASSIGN_OR_RETURN(*slot, checkpoint.GetLinear(s.name, s.shape, Fp8Block(config.text)));
    } else {
      VISMOE_ASSIGN_OR_RETURN(*slot, checkpoint.Get(s.name, s.shape));
    }
    VISMOE_RETURN_IF_ERROR(CheckFinite(checkpoint, s.name, *slot));
  }
  if (w.lm_head.empty()) {  // tied: a checkpoint may still carry the projection
    const TextConfig& c = config.text;
    if (checkpoint.Has(w.spec.lm_head)) {
      VISMOE_ASSIGN_OR_RETURN(w.lm_head,
                              checkpoint.GetLinear(w.spec.lm_head, {c.vocab_size, c.hidden_size},
                                                   Fp8Block(config.text)));
    } else {
      w.lm_head = w.embed;
    }
  }
  return w;
}

}  // namespace vismoe
