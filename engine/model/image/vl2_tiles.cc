#include "engine/model/image/vl2_tiles.h"

#include <cstring>

#include "engine/model/image_resize.h"

namespace vismoe {
namespace {

constexpr uint8_t kFill = 127;  // int(0.5 * 255): the image-mean grey

// Appends the S x S tile at (x0, y0) of `canvas` (width cw, RGB8) to `out`
// as normalised channel-major floats.
void AppendTile(const std::vector<uint8_t>& canvas, int cw, int x0, int y0, int s,
                std::vector<float>* out) {
  const size_t base = out->size();
  out->resize(base + static_cast<size_t>(3) * s * s);
  float* t = out->data() + base;
  for (int y = 0; y < s; ++y) {
    const uint8_t* row = canvas.data() + (static_cast<size_t>(y0 + y) * cw + x0) * 3;
    for (int x = 0; x < s; ++x) {
      for (int c = 0; c < 3; ++c) {
        const float v = static_cast<float>(row[x * 3 + c]) / 255.0f;
        t[(static_cast<size_t>(c) * s + y) * s + x] = (v - 0.5f) / 0.5f;
      }
    }
  }
}

}  // namespace

std::vector<uint8_t> Vl2Canvas(const RgbImage& image, Vl2Size canvas, const Vl2Placement& p) {
  std::vector<uint8_t> out(static_cast<size_t>(canvas.width) * canvas.height * 3, kFill);
  // An image so thin that one side rounds to zero pastes nothing (PIL's
  // resize to an empty image).
  if (p.resized.width < 1 || p.resized.height < 1) return out;
  const std::vector<uint8_t> resized =
      (p.resized.width == image.width && p.resized.height == image.height)
          ? image.pixels
          : ResizeBicubicPillow(image.pixels.data(), image.height, image.width, 3, p.resized.height,
                                p.resized.width);
  const size_t row_bytes = static_cast<size_t>(p.resized.width) * 3;
  for (int y = 0; y < p.resized.height; ++y) {
    std::memcpy(out.data() + (static_cast<size_t>(p.y + y) * canvas.width + p.x) * 3,
                resized.data() + y * row_bytes, row_bytes);
  }
  return out;
}

std::vector<float> Vl2Tiles(const RgbImage& image, const Vl2Tiling& plan, int tile_size) {
  std::vector<float> out;
  const int s = tile_size;
  out.reserve(static_cast<size_t>(1 + plan.width_tiles * plan.height_tiles) * 3 * s * s);
  AppendTile(Vl2Canvas(image, {s, s}, plan.global), s, 0, 0, s, &out);
  const std::vector<uint8_t> local = Vl2Canvas(image, plan.best, plan.local);
  for (int ty = 0; ty < plan.height_tiles; ++ty) {
    for (int tx = 0; tx < plan.width_tiles; ++tx) {
      AppendTile(local, plan.best.width, tx * s, ty * s, s, &out);
    }
  }
  return out;
}

}  // namespace vismoe
