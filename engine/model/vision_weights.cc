#include "engine/model/vision_weights.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_spec.h"

namespace vismoe {
namespace {

TensorView* BlockSlot(VisionBlockWeights& b, WeightRole role) {
  switch (role) {
    case WeightRole::kBlockNorm1Weight:
      return &b.norm1_w;
    case WeightRole::kBlockNorm1Bias:
      return &b.norm1_b;
    case WeightRole::kBlockNorm2Weight:
      return &b.norm2_w;
    case WeightRole::kBlockNorm2Bias:
      return &b.norm2_b;
    case WeightRole::kBlockQkvWeight:
      return &b.qkv_w;
    case WeightRole::kBlockQkvBias:
      return &b.qkv_b;
    case WeightRole::kBlockProjWeight:
      return &b.proj_w;
    case WeightRole::kBlockProjBias:
      return &b.proj_b;
    case WeightRole::kBlockFc1Weight:
      return &b.fc1_w;
    case WeightRole::kBlockFc1Bias:
      return &b.fc1_b;
    case WeightRole::kBlockFc2Weight:
      return &b.fc2_w;
    case WeightRole::kBlockFc2Bias:
      return &b.fc2_b;
    default:
      return nullptr;
  }
}

TensorView* MergerSlot(VisionMergerWeights& m, WeightRole role) {
  switch (role) {
    case WeightRole::kMergerNormWeight:
      return &m.norm_w;
    case WeightRole::kMergerNormBias:
      return &m.norm_b;
    case WeightRole::kMergerFc1Weight:
      return &m.fc1_w;
    case WeightRole::kMergerFc1Bias:
      return &m.fc1_b;
    case WeightRole::kMergerFc2Weight:
      return &m.fc2_w;
    case WeightRole::kMergerFc2Bias:
      return &m.fc2_b;
    default:
      return nullptr;
  }
}

TensorView* Slot(VisionWeights& w, const TensorSpec& s) {
  switch (s.role) {
    case WeightRole::kPatchEmbedWeight:
      return &w.patch_w;
    case WeightRole::kPatchEmbedBias:
      return &w.patch_b;
    case WeightRole::kPosEmbed:
      return &w.pos_embed;
    default:
      break;
  }
  if (TensorView* b = s.layer >= 0 && s.layer < static_cast<int>(w.blocks.size())
                          ? BlockSlot(w.blocks[s.layer], s.role)
                          : nullptr) {
    return b;
  }
  if (s.layer == -1) return MergerSlot(w.merger, s.role);
  if (s.layer < static_cast<int>(w.deepstack.size())) {
    return MergerSlot(w.deepstack[s.layer], s.role);
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<VisionWeights> VisionWeights::Load(const ModelConfig& config,
                                                  const Checkpoint& checkpoint) {
  VISMOE_ASSIGN_OR_RETURN(const std::vector<TensorSpec> specs, ExpectedTensors(config));
  VisionWeights w;
  w.blocks.resize(config.vision.depth);
  w.deepstack.resize(config.vision.deepstack_visual_indexes.size());
  for (const TensorSpec& s : specs) {
    if (!IsVisionRole(s.role)) continue;
    TensorView* slot = Slot(w, s);
    if (slot == nullptr) {
      return absl::InternalError(absl::StrCat("tensor list: no vision slot for ", s.name));
    }
    VISMOE_ASSIGN_OR_RETURN(*slot, checkpoint.Get(s.name, s.shape));
    VISMOE_RETURN_IF_ERROR(CheckFinite(checkpoint, s.name, *slot));
  }
  return w;
}

}  // namespace vismoe
