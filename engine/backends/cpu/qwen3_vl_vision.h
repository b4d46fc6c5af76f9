// Qwen3VlVisionModel: the Qwen3-VL vision tower on the CPU reference backend
// (fp32 compute; weights F32/F16/BF16 straight from the checkpoint), matching
// transformers' Qwen3VLMoeVisionModel:
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
// A VisionTower (vision_tower.h); input checks, position and rotary tables
// are shared with the CUDA tower (qwen3_vl_vision_tables.h).
//
// Thread safety: immutable after Create(); Forward() may run concurrently.
// Ownership: holds views into the Checkpoint, which must outlive the model,
// and a non-owning ThreadPool pointer (may be null).
#ifndef VISMOE_ENGINE_BACKENDS_CPU_QWEN3_VL_VISION_H_
#define VISMOE_ENGINE_BACKENDS_CPU_QWEN3_VL_VISION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/vision_tower.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/grid_thw.h"
#include "engine/model/model_config.h"
#include "engine/model/vision_weights.h"

namespace vismoe {

class Qwen3VlVisionModel final : public VisionTower {
 public:
  // Reads and validates every vision tensor (VisionWeights) against the
  // config shapes. InvalidArgument / NotFound naming the tensor on a mismatch.
  static absl::StatusOr<std::unique_ptr<Qwen3VlVisionModel>> Create(const ModelConfig& config,
                                                                    const Checkpoint& checkpoint,
                                                                    ThreadPool* pool);

  Qwen3VlVisionModel(const Qwen3VlVisionModel&) = delete;
  Qwen3VlVisionModel& operator=(const Qwen3VlVisionModel&) = delete;

  // Columns of one patch row: in_channels * temporal_patch_size * patch_size^2.
  int64_t patch_dim() const override;

  // patches: the images' patch rows concatenated in order, [sum num_patches,
  // patch_dim]. InvalidArgument when the size does not match the grids or a
  // grid is not divisible by the merge size.
  absl::StatusOr<VisionOutput> Forward(absl::Span<const float> patches,
                                       absl::Span<const GridThw> grids) const override;
  const char* backend() const override { return "cpu"; }

 private:
  using Block = VisionBlockWeights;
  using Merger = VisionMergerWeights;

  Qwen3VlVisionModel(const VisionConfig& config, ThreadPool* pool) : config_(config), pool_(pool) {}

  // One transformer block in place on x [n, hidden]; fills patch_saliency [n]
  // when non-null.
  void RunBlock(const Block& b, absl::Span<const GridThw> grids, const std::vector<float>& cos,
                const std::vector<float>& sin, int64_t n, float* x, float* patch_saliency) const;
  // Merges x [n, hidden] into out [n / merge^2, out_hidden].
  void RunMerger(const Merger& m, bool postshuffle_norm, const float* x, int64_t n,
                 float* out) const;

  VisionConfig config_;
  ThreadPool* pool_;
  TensorView patch_w_;  // viewed as [hidden, patch_dim]
  TensorView patch_b_;
  TensorView pos_embed_;
  std::vector<Block> blocks_;
  Merger merger_;
  std::vector<Merger> deepstack_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKENDS_CPU_QWEN3_VL_VISION_H_
