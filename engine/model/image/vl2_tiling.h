// DeepSeek-VL2's image tiling, as its processor (DeepseekVLV2Processor,
// engine/model/deepseek_vl2.md) plans it: the candidate resolution an image is
// cut to (select_best_resolution), the geometry of the global view and of the
// local canvas (PIL ImageOps.pad: contain, then a centred paste on a canvas
// of the image-mean grey), and how many <image> tokens the image becomes.
// Pure arithmetic in the published code's double precision and rounding
// (int() truncation, Python's round half to even); no pixels here.
// Thread safety: pure functions.
#ifndef VISMOE_ENGINE_MODEL_IMAGE_VL2_TILING_H_
#define VISMOE_ENGINE_MODEL_IMAGE_VL2_TILING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace vismoe {

struct Vl2Size {
  int width = 0;
  int height = 0;
  bool operator==(const Vl2Size&) const = default;
};

// Where ImageOps.pad puts an image on a canvas: its resized size and the
// top-left corner of the paste.
struct Vl2Placement {
  Vl2Size resized;
  int x = 0;
  int y = 0;
  bool operator==(const Vl2Placement&) const = default;
};

// The plan of one image: the local canvas (a candidate resolution), its tiles
// (width first, as images_spatial_crop), and the two views' placements.
struct Vl2Tiling {
  Vl2Size best;
  int width_tiles = 1;
  int height_tiles = 1;
  Vl2Placement global;  // on the tile_size x tile_size global view
  Vl2Placement local;   // on the best canvas
};

// select_best_resolution: the [width, height] candidate that keeps the most of
// the image's pixels when it is scaled to fit, then the one that wastes the
// fewest; the first wins exact ties. REQUIRES: image sides >= 1, candidates
// non-empty with sides >= 1.
Vl2Size SelectBestResolution(Vl2Size image, absl::Span<const Vl2Size> candidates);

// ImageOps.pad(image, canvas)'s geometry (PIL's contain: the aspect ratio
// kept, the long side filling the canvas, the other rounded half to even).
// REQUIRES: sides >= 1.
Vl2Placement PadPlacement(Vl2Size image, Vl2Size canvas);

// The plan for `image`: with `cropping` (at most two images in the
// conversation) the best candidate, else one tile_size x tile_size tile.
// InvalidArgument for an empty image, no candidates, or a candidate that is
// not a whole number of tiles.
absl::StatusOr<Vl2Tiling> PlanVl2Tiling(Vl2Size image, int tile_size,
                                        absl::Span<const Vl2Size> candidates, bool cropping);

// The <image> tokens of one planned image: with h = w = ceil((tile_size /
// patch_size) / downsample), h * (w + 1) for the global view (a newline after
// each row), 1 view separator, and (height_tiles * h) * (width_tiles * w + 1)
// for the local grid. REQUIRES: positive sizes.
int64_t Vl2ImageTokens(const Vl2Tiling& tiling, int tile_size, int patch_size, int downsample);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_IMAGE_VL2_TILING_H_
