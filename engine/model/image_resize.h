// Antialiased bicubic resampling of 8-bit images, matching what the
// transformers Qwen2-VL "fast" image processor does on CPU: torchvision
// resize(BICUBIC, antialias=True) on a uint8 tensor, i.e. torch's native uint8
// AA kernel, which follows Pillow's ImagingResample: a separable filter with
// the Keys cubic kernel at a = -0.5, stretched by the scale when downscaling,
// weights normalised per output pixel; the horizontal pass runs first, each
// pass rounds and clamps to uint8, and a pass whose size is unchanged is
// skipped. (Torch uses fixed-point weights; we use fp64, which differs by at
// most one level on well under 1% of pixels.)
#ifndef VISMOE_ENGINE_MODEL_IMAGE_RESIZE_H_
#define VISMOE_ENGINE_MODEL_IMAGE_RESIZE_H_

#include <cstdint>
#include <vector>

namespace vismoe {

// Resizes an interleaved (HWC) image of `channels` channels from
// in_height x in_width to out_height x out_width. Returns the new pixels,
// out_height * out_width * channels bytes.
// REQUIRES: all sizes >= 1, src holds in_height * in_width * channels bytes.
std::vector<uint8_t> ResizeBicubicAntialias(const uint8_t* src, int in_height, int in_width,
                                            int channels, int out_height, int out_width);

// The Keys cubic convolution kernel with a = -0.5 (Pillow / torch antialias).
double BicubicKernel(double x);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_IMAGE_RESIZE_H_
