// VisionWeights: the vision tower's tensors of a checkpoint, as views, found
// through the family's tensor list (engine/model/arch_spec.h) and
// shape-checked. Both towers (backends/cpu, backends/cuda) load from it.
//
// Thread safety: plain views. Ownership: the views point into the Checkpoint,
// which must outlive them.
#ifndef VISMOE_ENGINE_MODEL_VISION_WEIGHTS_H_
#define VISMOE_ENGINE_MODEL_VISION_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"

namespace vismoe {

struct VisionBlockWeights {
  TensorView norm1_w, norm1_b, norm2_w, norm2_b;
  TensorView qkv_w, qkv_b, proj_w, proj_b;
  TensorView fc1_w, fc1_b, fc2_w, fc2_b;
};

struct VisionMergerWeights {
  TensorView norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

struct VisionWeights {
  // [hidden, in_channels, temporal_patch, patch, patch] as stored (a Conv3d).
  TensorView patch_w;
  TensorView patch_b;
  TensorView pos_embed;  // [num_position_embeddings, hidden]
  std::vector<VisionBlockWeights> blocks;
  VisionMergerWeights merger;
  std::vector<VisionMergerWeights> deepstack;  // one per deepstack_visual_indexes entry

  // Reads every vision tensor ExpectedTensors(config) lists, in its order.
  // Errors name the tensor (missing, wrong shape) or the config field.
  // REQUIRES: config.has_vision.
  static absl::StatusOr<VisionWeights> Load(const ModelConfig& config,
                                            const Checkpoint& checkpoint);
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_VISION_WEIGHTS_H_
