// Qwen3VlVisionModel: the Qwen3-VL vision tower, written once over a
// backend's VisionOps (engine/backend/vision_ops.h), matching transformers'
// Qwen3VLMoeVisionModel:
//   patch embed (Conv3d == one Linear over the flattened patch) + bilinear
//   (align_corners) resampled learned position table, in merge-block order;
//   `depth` blocks of LayerNorm -> qkv -> 2-D rotary -> bidirectional attention
//   within each frame -> proj, LayerNorm -> fc1 -> GELU -> fc2 (pre-norm,
//   residual); merger (LayerNorm, 2x2 merge, fc1, erf GELU, fc2); DeepStack
//   mergers on the outputs of deepstack_visual_indexes blocks (merge first,
//   then LayerNorm over the merged row).
// Also returns a per-merged-token saliency for token compression: the
// attention each patch receives in the last block, averaged over heads and
// query patches of its frame, then over the merge x merge patches of a token.
// This class owns what is the same on every backend: input checks, the
// position and rotary tables (qwen3_vl_vision_tables.h), the block loop,
// which merger runs when, the saliency reduction and the output layout.
//
// Thread safety: immutable after Create(); Forward() may run concurrently (as
// far as the ops allow: see the backend).
// Ownership: owns its ops.
#ifndef VISMOE_ENGINE_ARCH_QWEN3_VL_VISION_H_
#define VISMOE_ENGINE_ARCH_QWEN3_VL_VISION_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/arch/vision_tower.h"
#include "engine/backend/vision_ops.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/grid_thw.h"
#include "engine/model/model_config.h"

namespace vismoe {

class Qwen3VlVisionModel final : public VisionTower {
 public:
  // The tower over `ops` (which hold the weights). InvalidArgument for a
  // config without a usable vision_config.
  static absl::StatusOr<std::unique_ptr<Qwen3VlVisionModel>> Create(const ModelConfig& config,
                                                                    std::unique_ptr<VisionOps> ops);
  // On the CPU reference backend, weights read from `checkpoint` (errors name
  // the tensor); `pool` may be null.
  static absl::StatusOr<std::unique_ptr<Qwen3VlVisionModel>> Create(const ModelConfig& config,
                                                                    const Checkpoint& checkpoint,
                                                                    ThreadPool* pool);
  Qwen3VlVisionModel(const Qwen3VlVisionModel&) = delete;
  Qwen3VlVisionModel& operator=(const Qwen3VlVisionModel&) = delete;

  // Columns of one patch row: in_channels * temporal_patch_size * patch_size^2.
  int64_t patch_dim() const override;
  // patches: the images' patch rows concatenated in order, [sum num_patches,
  // patch_dim]. InvalidArgument when the size does not match the grids, a
  // grid is not divisible by the merge size, or the backend's CheckPatches
  // refuses the count. No images: an empty output.
  absl::StatusOr<VisionOutput> Forward(absl::Span<const float> patches,
                                       absl::Span<const GridThw> grids) const override;
  const char* backend() const override { return ops_->name(); }
  int64_t device_scratch_bytes() const override { return ops_->device_scratch_bytes(); }

 private:
  Qwen3VlVisionModel(const VisionConfig& config, std::unique_ptr<VisionOps> ops)
      : config_(config), ops_(std::move(ops)) {}

  // The blocks and mergers over a begun step; fills out's embeds, deepstack
  // and saliency.
  absl::Status Run(VisionStep& step, VisionOutput* out) const;

  VisionConfig config_;
  std::unique_ptr<VisionOps> ops_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_QWEN3_VL_VISION_H_
