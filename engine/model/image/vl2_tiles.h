// DeepSeek-VL2's tiles of one image, as its processor cuts them
// (engine/model/deepseek_vl2.md): the global view (the image padded to one
// tile) then the local canvas (padded to the planned resolution) cut into
// tiles row by row; each canvas is filled with grey 127 and the image is
// resized onto it with Pillow's bicubic (ResizeBicubicPillow) at the
// placement the plan gives (engine/model/image/vl2_tiling.h).
// Thread safety: pure functions.
#ifndef VISMOE_ENGINE_MODEL_IMAGE_VL2_TILES_H_
#define VISMOE_ENGINE_MODEL_IMAGE_VL2_TILES_H_

#include <cstdint>
#include <vector>

#include "engine/model/image/vl2_tiling.h"
#include "engine/model/rgb_image.h"

namespace vismoe {

// The canvas ImageOps.pad makes: `canvas` filled with 127, `image` resized to
// p.resized and pasted at (p.x, p.y); RGB8 row-major (HWC).
// REQUIRES: image non-empty; p inside the canvas.
std::vector<uint8_t> Vl2Canvas(const RgbImage& image, Vl2Size canvas, const Vl2Placement& p);

// The image's tiles, [1 + width_tiles * height_tiles, 3, S, S] (S =
// tile_size, channel-major as the tower takes them), each value (u8 / 255 -
// 0.5) / 0.5 in fp32 as torchvision's ToTensor + Normalize(0.5, 0.5).
// REQUIRES: `plan` from PlanVl2Tiling(image's size, tile_size, ...).
std::vector<float> Vl2Tiles(const RgbImage& image, const Vl2Tiling& plan, int tile_size);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_IMAGE_VL2_TILES_H_
