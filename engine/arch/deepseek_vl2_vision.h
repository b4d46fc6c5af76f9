// DeepSeekVl2Vision: DeepSeek-VL2's image path after its processor, the fp32
// CPU reference (engine/model/deepseek_vl2.md): the SigLIP tower on each tile
// (patch embedding, absolute positions, pre-norm blocks with GELU-tanh MLPs,
// the final norm; no pooling head), the projector (the grid zero-padded to
// even sides, 2 x 2 unfolded channel-major, Linear / exact GELU / Linear),
// and the 2-D layout of an image's tokens (the global view with a newline
// after each row, the view separator, the local tiles stitched into one grid
// with a newline after each grid row).
// As the engine's VisionTower, an image is its tiles and its grid is the local
// tile grid {1, height_tiles, width_tiles} (the global view is the first
// tile); the output rows are the image's <image> rows, layout rows included
// and marked (VisionOutput::layout). A token's saliency is, as Qwen3-VL's,
// the mean over its 2 x 2 patches of the attention they receive in the last
// block (averaged over heads and the tile's queries; a padded patch counts as
// 0), so each tile's tokens sum to 1/4; layout rows have 0.
// Written over the CPU ops directly: VisionOps (engine/backend/vision_ops.h)
// is Qwen3-VL's tower (rotary, mergers); this tower moves onto backend ops
// when the family runs on CUDA.
// Thread safety: immutable after Create(); Encode/Project/Layout may run
// concurrently (the pool serialises nothing they share).
// Ownership: views into the Checkpoint, which must outlive it; the pool is
// borrowed.
#ifndef VISMOE_ENGINE_ARCH_DEEPSEEK_VL2_VISION_H_
#define VISMOE_ENGINE_ARCH_DEEPSEEK_VL2_VISION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/arch/vision_tower.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/model/image/vl2_tiling.h"
#include "engine/model/vl2_vision_config.h"

namespace vismoe {

class DeepseekVl2Vision final : public VisionTower {
 public:
  // NotFound / InvalidArgument naming the tensor when a weight is missing or
  // mis-shaped (vision.*, projector.layers.*, image_newline, view_seperator).
  static absl::StatusOr<std::unique_ptr<DeepseekVl2Vision>> Create(const Vl2VisionConfig& config,
                                                                   const Checkpoint& checkpoint,
                                                                   ThreadPool* pool);

  const Vl2VisionConfig& config() const { return config_; }

  // VisionTower: one "patch" is a tile, 3 x image_size^2 values.
  int64_t patch_dim() const override;
  // InvalidArgument unless the tiles are the grids' (1 + h * w each, t == 1).
  absl::StatusOr<VisionOutput> Forward(absl::Span<const float> tiles,
                                       absl::Span<const GridThw> grids) const override;
  const char* backend() const override { return "cpu"; }

  // tiles [T, 3, S, S] (the processor's, Vl2Tiles) -> the tower's output [T,
  // grid^2, width]; with `patch_saliency`, also the attention each patch
  // receives in the last block [T, grid^2] (each tile's sums to 1).
  // InvalidArgument unless the size is a whole number of tiles.
  absl::StatusOr<std::vector<float>> Encode(absl::Span<const float> tiles,
                                            std::vector<float>* patch_saliency = nullptr) const;
  // [T, grid^2, width] -> [T, side^2, n_embed].
  std::vector<float> Project(absl::Span<const float> features) const;
  // One image's token rows [Vl2ImageTokens(plan), n_embed] from its projected
  // tiles [1 + width_tiles * height_tiles, side^2, n_embed] (global first).
  std::vector<float> Layout(absl::Span<const float> projected, const Vl2Tiling& plan) const;
  // The image's rows in Layout's order: the projected token (tile * side^2 +
  // row * side + column) each row holds, or kNewline / kSeparator.
  std::vector<int64_t> LayoutOrder(const Vl2Tiling& plan) const;
  static constexpr int64_t kNewline = -1;
  static constexpr int64_t kSeparator = -2;

 private:
  struct Block {
    TensorView norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b;
    TensorView norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  DeepseekVl2Vision(const Vl2VisionConfig& c, ThreadPool* pool) : config_(c), pool_(pool) {}
  // x [N, width] += one block, for one tile; with `key_saliency` [N], the
  // attention each patch receives.
  void RunBlock(const Block& b, float* x, int64_t n, float* key_saliency = nullptr) const;
  // The rows `order` (LayoutOrder's) names, from the projected tokens.
  std::vector<float> Gather(absl::Span<const float> projected,
                            absl::Span<const int64_t> order) const;
  // A tile's token saliency [side^2] from its patch saliency [grid^2].
  std::vector<float> TokenSaliency(const float* patch_saliency) const;

  Vl2VisionConfig config_;
  ThreadPool* pool_;
  TensorView patch_w_, patch_b_, norm_w_, norm_b_;
  std::vector<float> pos_;  // [grid^2, width]
  std::vector<Block> blocks_;
  std::vector<TensorView> proj_w_, proj_b_;  // projector.layers.{0, 2, ...}
  std::vector<float> newline_, separator_;   // [n_embed]
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_DEEPSEEK_VL2_VISION_H_
