// Host-side pieces of the Qwen3-VL vision tower shared by the CPU reference
// (qwen3_vl_vision.cc) and the CUDA tower (cuda/qwen3_vl_vision_cuda.cc), so
// both validate inputs, place patches and reduce saliency identically:
// input checks, the bilinearly resampled learned position embeddings, the 2-D
// rotary cos/sin tables, and the per-token saliency reduction. Patches of a
// frame come in merge-block order (block_row, block_col, in_row, in_col), as
// the image processor emits them. All fp32; free functions, reentrant.
#ifndef VISMOE_ENGINE_MODEL_QWEN3_VL_VISION_TABLES_H_
#define VISMOE_ENGINE_MODEL_QWEN3_VL_VISION_TABLES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"
#include "engine/model/grid_thw.h"
#include "engine/model/model_config.h"

namespace vismoe {

// The config checks both towers make at Create: a vision_config whose head_dim
// (hidden_size / num_heads) is a multiple of 4 (the 2-D rotary's halves) and
// a merge size >= 1. `who` names the caller in the error.
absl::Status CheckVisionConfig(const ModelConfig& config, const char* who);

// Checks that every grid is a positive multiple of the merge size and that
// `patch_values` == sum num_patches * patch_dim. Returns the total number of
// patches and fills tokens_per_image (merged tokens, in input order).
// InvalidArgument naming the image or the sizes otherwise.
absl::StatusOr<int64_t> CheckVisionInput(const VisionConfig& config, int64_t patch_dim,
                                         size_t patch_values, absl::Span<const GridThw> grids,
                                         std::vector<int64_t>* tokens_per_image);

// x [N, hidden] += the learned position table pos_embed [num_position_embeddings,
// hidden] (any float dtype) bilinearly (align_corners) resampled to each
// image's h x w grid, the same for every frame of an image.
void AddVisionPositionEmbedding(const VisionConfig& config, const TensorView& pos_embed,
                                absl::Span<const GridThw> grids, float* x);

// cos/sin tables of the 2-D rotary, [N, head_dim] each (the layout of
// cpu::RopeTable): [row freqs | col freqs] repeated twice (rotate_half pairs).
void VisionRotaryTables(const VisionConfig& config, absl::Span<const GridThw> grids,
                        std::vector<float>* cos, std::vector<float>* sin);

// saliency [num_tokens]: the mean of each token's `unit` consecutive entries
// of patch_saliency [num_tokens * unit].
void MergePatchSaliency(const float* patch_saliency, int64_t num_tokens, int64_t unit,
                        std::vector<float>* saliency);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_QWEN3_VL_VISION_TABLES_H_
