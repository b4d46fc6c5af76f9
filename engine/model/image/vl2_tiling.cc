#include "engine/model/image/vl2_tiling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

// Python's round() of a double: half to even (nearbyint in the default
// rounding mode).
int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

Vl2Size SelectBestResolution(Vl2Size image, absl::Span<const Vl2Size> candidates) {
  const int64_t w = image.width, h = image.height;
  Vl2Size best = candidates.front();
  int64_t best_effective = 0;
  int64_t best_wasted = std::numeric_limits<int64_t>::max();
  for (const Vl2Size& c : candidates) {
    const double scale = std::min(static_cast<double>(c.width) / static_cast<double>(w),
                                  static_cast<double>(c.height) / static_cast<double>(h));
    const auto dw = static_cast<int64_t>(static_cast<double>(w) * scale);  // int(): truncation
    const auto dh = static_cast<int64_t>(static_cast<double>(h) * scale);
    const int64_t effective = std::min(dw * dh, w * h);
    const int64_t wasted = int64_t{c.width} * c.height - effective;
    if (effective > best_effective || (effective == best_effective && wasted < best_wasted)) {
      best = c;
      best_effective = effective;
      best_wasted = wasted;
    }
  }
  return best;
}

Vl2Placement PadPlacement(Vl2Size image, Vl2Size canvas) {
  // ImageOps.contain: compare the ratios as Python floats.
  const double image_ratio = static_cast<double>(image.width) / image.height;
  const double canvas_ratio = static_cast<double>(canvas.width) / canvas.height;
  Vl2Placement p;
  p.resized = canvas;
  if (image_ratio > canvas_ratio) {
    p.resized.height =
        RoundHalfEven(static_cast<double>(image.height) / image.width * canvas.width);
  } else if (image_ratio < canvas_ratio) {
    p.resized.width =
        RoundHalfEven(static_cast<double>(image.width) / image.height * canvas.height);
  }
  // ImageOps.pad: centred along the side that differs.
  if (p.resized.width != canvas.width) {
    p.x = RoundHalfEven((canvas.width - p.resized.width) * 0.5);
  } else if (p.resized.height != canvas.height) {
    p.y = RoundHalfEven((canvas.height - p.resized.height) * 0.5);
  }
  return p;
}

absl::StatusOr<Vl2Tiling> PlanVl2Tiling(Vl2Size image, int tile_size,
                                        absl::Span<const Vl2Size> candidates, bool cropping) {
  if (image.width < 1 || image.height < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty image (", image.width, "x", image.height, ")"));
  }
  if (tile_size < 1 || candidates.empty()) {
    return absl::InvalidArgumentError("no tile size or candidate resolutions");
  }
  for (const Vl2Size& c : candidates) {
    if (c.width < tile_size || c.height < tile_size || c.width % tile_size != 0 ||
        c.height % tile_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("candidate resolution [", c.width, ", ",
                                                     c.height, "] is not a whole number of ",
                                                     tile_size, "-pixel tiles"));
    }
  }
  Vl2Tiling t;
  t.best = cropping ? SelectBestResolution(image, candidates) : Vl2Size{tile_size, tile_size};
  t.width_tiles = t.best.width / tile_size;
  t.height_tiles = t.best.height / tile_size;
  t.global = PadPlacement(image, {tile_size, tile_size});
  t.local = PadPlacement(image, t.best);
  return t;
}

int64_t Vl2ImageTokens(const Vl2Tiling& tiling, int tile_size, int patch_size, int downsample) {
  const int64_t side = (tile_size / patch_size + downsample - 1) / downsample;
  const int64_t global = side * (side + 1);
  const int64_t local = (tiling.height_tiles * side) * (tiling.width_tiles * side + 1);
  return global + 1 + local;
}

}  // namespace vismoe
