#include "engine/model/rgb_convert.h"

#include "absl/strings/str_cat.h"

namespace vismoe {

uint8_t CompositeOnWhite(uint8_t value, uint8_t alpha) {
  // Pillow src/libImaging/AlphaComposite.c with dst = (255, 255, 255, 255):
  // fixed-point blend with 7 fractional bits and a rounded divide by 255.
  if (alpha == 0) return 255;
  constexpr uint32_t kPrecisionBits = 7;
  const uint32_t a = alpha;
  const uint32_t blend = 255 * (255 - a);
  const uint32_t outa255 = a * 255 + blend;
  const uint32_t coef1 = a * 255 * 255 * (1u << kPrecisionBits) / outa255;
  const uint32_t coef2 = 255 * (1u << kPrecisionBits) - coef1;
  uint32_t tmp = value * coef1 + 255 * coef2 + (0x80u << kPrecisionBits);
  return static_cast<uint8_t>((((tmp >> 8) + tmp) >> 8) >> kPrecisionBits);
}

absl::StatusOr<RgbImage> ToRgb(const uint8_t* pixels, size_t size, int width, int height,
                               int channels) {
  if (width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image has no pixels (", width, "x", height, ")"));
  }
  if (channels < 1 || channels > 4) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported channel layout: ", channels,
                                                   " channels (expected 1, 2, 3 or 4)"));
  }
  const size_t n = static_cast<size_t>(width) * static_cast<size_t>(height);
  if (size != n * static_cast<size_t>(channels)) {
    return absl::InvalidArgumentError(absl::StrCat("image buffer has ", size, " bytes, expected ",
                                                   n * channels, " for ", width, "x", height, "x",
                                                   channels));
  }
  RgbImage out;
  out.width = width;
  out.height = height;
  out.pixels.resize(n * 3);
  const bool alpha = channels == 2 || channels == 4;
  if (alpha) out.alpha_dropped.resize(n * 3);
  uint8_t* dst = out.pixels.data();
  uint8_t* dropped = out.alpha_dropped.data();
  for (size_t i = 0; i < n; ++i, dst += 3) {
    const uint8_t* p = pixels + i * channels;
    if (alpha) {
      for (int c = 0; c < 3; ++c) *dropped++ = p[channels == 2 ? 0 : c];
    }
    switch (channels) {
      case 1:
        dst[0] = dst[1] = dst[2] = p[0];
        break;
      case 2:
        dst[0] = dst[1] = dst[2] = CompositeOnWhite(p[0], p[1]);
        break;
      case 3:
        dst[0] = p[0];
        dst[1] = p[1];
        dst[2] = p[2];
        break;
      case 4:
        dst[0] = CompositeOnWhite(p[0], p[3]);
        dst[1] = CompositeOnWhite(p[1], p[3]);
        dst[2] = CompositeOnWhite(p[2], p[3]);
        break;
    }
  }
  return out;
}

}  // namespace vismoe
