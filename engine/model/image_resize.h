// Antialiased bicubic resampling of 8-bit images, bit for bit as the two
// libraries the published processors call do it. Both follow Pillow's
// ImagingResample: a separable filter with the Keys cubic kernel at a = -0.5,
// stretched by the scale when downscaling, weights normalised per output
// pixel in double, then turned into fixed point; each pass accumulates in
// integers, rounds, clamps to uint8, and a pass whose size is unchanged is
// skipped. They differ in the fixed point and in the order of the passes:
// - torch's native uint8 antialias kernel (torchvision resize(BICUBIC,
//   antialias=True) on a uint8 tensor: transformers' "fast" Qwen2-VL
//   processor): int16 weights at the largest precision that keeps the
//   axis's largest weight below 2^15; horizontal pass first;
// - Pillow's Image.resize(BICUBIC) (DeepSeek-VL2's processor): 22-bit
//   weights; the vertical pass first when the height shrinks by more than
//   twice as many pixels as the width (Pillow >= 13.0; older Pillow always
//   ran the horizontal pass first).
#ifndef VISMOE_ENGINE_MODEL_IMAGE_RESIZE_H_
#define VISMOE_ENGINE_MODEL_IMAGE_RESIZE_H_

#include <cstdint>
#include <vector>

namespace vismoe {

// Resizes an interleaved (HWC) image of `channels` channels from
// in_height x in_width to out_height x out_width as torch's uint8 kernel does.
// Returns the new pixels, out_height * out_width * channels bytes.
// REQUIRES: all sizes >= 1, src holds in_height * in_width * channels bytes.
std::vector<uint8_t> ResizeBicubicAntialias(const uint8_t* src, int in_height, int in_width,
                                            int channels, int out_height, int out_width);

// The same resize as Pillow's Image.resize(size, BICUBIC) computes it.
// REQUIRES: as ResizeBicubicAntialias.
std::vector<uint8_t> ResizeBicubicPillow(const uint8_t* src, int in_height, int in_width,
                                         int channels, int out_height, int out_width);

// The Keys cubic convolution kernel with a = -0.5 (Pillow / torch antialias).
double BicubicKernel(double x);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_IMAGE_RESIZE_H_
