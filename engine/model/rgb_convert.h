// Conversion of decoded 8-bit images (gray, gray+alpha, RGB, RGBA) into the
// RGB the preprocessor takes, matching transformers' convert_to_rgb: alpha is
// composited onto opaque white with Pillow's integer arithmetic, bit for bit.
// An image with alpha also keeps its colour with alpha dropped
// (RgbImage::alpha_dropped, PIL's convert("RGB")).
#ifndef VISMOE_ENGINE_MODEL_RGB_CONVERT_H_
#define VISMOE_ENGINE_MODEL_RGB_CONVERT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/model/rgb_image.h"

namespace vismoe {

// `pixels` holds height * width * channels bytes, row-major, channels in
// gray / gray+alpha / R,G,B / R,G,B,A order (1, 2, 3 or 4 channels).
// Any other channel count, a size mismatch or an empty image is
// InvalidArgument.
absl::StatusOr<RgbImage> ToRgb(const uint8_t* pixels, size_t size, int width, int height,
                               int channels);

// Pillow's alpha_composite of (value, alpha) over opaque white, one channel.
uint8_t CompositeOnWhite(uint8_t value, uint8_t alpha);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_RGB_CONVERT_H_
