// Multimodal rotary positions (M-RoPE) of a Qwen3-VL prompt, as transformers'
// Qwen3VLMoeModel.get_rope_index computes them for images, and the expansion
// of one <|image_pad|> placeholder per image into its visual-token run.
//
// Walking the prompt with a running position s: a text token gets s on all
// three axes (t, h, w) and s += 1; an image with patch grid (t, h, w) and merge
// m occupies t * (h/m) * (w/m) tokens whose positions are (s + ti, s + hi,
// s + wi) in (ti, hi, wi) raster order, and then s += max(h/m, w/m).
// rope_delta = max position + 1 - L; decode step with cache length c uses
// position c + rope_delta on every axis.
#ifndef VISMOE_ENGINE_ARCH_MROPE_POSITIONS_H_
#define VISMOE_ENGINE_ARCH_MROPE_POSITIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/grid_thw.h"
#include "engine/model/model_config.h"

namespace vismoe {

struct MropePositions {
  std::vector<int64_t> positions;  // [3][L], axis-major: t row, then h, then w
  int64_t rope_delta = 0;
  int64_t length() const { return static_cast<int64_t>(positions.size() / 3); }
};

// Each maximal run of config.image_token_id tokens is one image, matched to
// image_grids in order. InvalidArgument when the number of runs differs from
// the number of grids, a run's length is not the grid's merged token count, a
// grid is not divisible by the merge size, or a video token appears (videos
// are not supported).
absl::StatusOr<MropePositions> ComputeMropePositions(absl::Span<const int> token_ids,
                                                     absl::Span<const GridThw> image_grids,
                                                     const ModelConfig& config);

// Replaces each single image_token_id placeholder (as the chat template writes
// it) with grid.num_merged(merge) copies. InvalidArgument when the number of
// placeholders differs from the number of grids, or a placeholder is already
// a run of more than one pad.
absl::StatusOr<std::vector<int>> ExpandImagePads(absl::Span<const int> token_ids,
                                                 absl::Span<const GridThw> image_grids,
                                                 const ModelConfig& config);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_ARCH_MROPE_POSITIONS_H_
