#include "engine/model/image_resize.h"

#include <algorithm>
#include <cmath>

namespace vismoe {
namespace {

// Filter taps of one output pixel: input indices [first, first + weights.size()).
struct Taps {
  int first = 0;
  std::vector<double> weights;
};

// Pillow's precompute_coeffs: support grows with the downscale factor so the
// filter also low-passes (antialias); upscaling uses the plain kernel.
std::vector<Taps> ComputeTaps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  std::vector<Taps> taps(out_size);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    Taps& t = taps[i];
    t.first = lo;
    double total = 0.0;
    for (int j = lo; j < hi; ++j) {
      const double w = BicubicKernel((j - center + 0.5) / filter_scale);
      t.weights.push_back(w);
      total += w;
    }
    if (total != 0.0) {
      for (double& w : t.weights) w /= total;
    }
  }
  return taps;
}

uint8_t RoundToByte(double v) {
  const double r = std::floor(v + 0.5);
  return static_cast<uint8_t>(std::clamp(r, 0.0, 255.0));
}

// Resamples `count` lines of an HWC image along one axis: rows when
// `horizontal` (line l = image row l), else columns (line l = column l).
// width_in / width_out are the image widths of src / dst in pixels.
void ResampleAxis(const uint8_t* src, int channels, int in_size, int out_size, int count,
                  bool horizontal, int width_in, uint8_t* dst, int width_out) {
  const std::vector<Taps> taps = ComputeTaps(in_size, out_size);
  for (int l = 0; l < count; ++l) {
    for (int i = 0; i < out_size; ++i) {
      const Taps& t = taps[i];
      for (int c = 0; c < channels; ++c) {
        double acc = 0.0;
        for (size_t k = 0; k < t.weights.size(); ++k) {
          const int j = t.first + static_cast<int>(k);
          const size_t idx = horizontal ? (static_cast<size_t>(l) * width_in + j)
                                        : (static_cast<size_t>(j) * width_in + l);
          acc += t.weights[k] * src[idx * channels + c];
        }
        const size_t out_idx = horizontal ? (static_cast<size_t>(l) * width_out + i)
                                          : (static_cast<size_t>(i) * width_out + l);
        dst[out_idx * channels + c] = RoundToByte(acc);
      }
    }
  }
}

}  // namespace

double BicubicKernel(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

std::vector<uint8_t> ResizeBicubicAntialias(const uint8_t* src, int in_height, int in_width,
                                            int channels, int out_height, int out_width) {
  std::vector<uint8_t> cur(src, src + static_cast<size_t>(in_height) * in_width * channels);
  int cur_w = in_width;
  if (out_width != in_width) {
    std::vector<uint8_t> next(static_cast<size_t>(in_height) * out_width * channels);
    ResampleAxis(cur.data(), channels, in_width, out_width, in_height, /*horizontal=*/true,
                 in_width, next.data(), out_width);
    cur.swap(next);
    cur_w = out_width;
  }
  if (out_height != in_height) {
    std::vector<uint8_t> next(static_cast<size_t>(out_height) * cur_w * channels);
    ResampleAxis(cur.data(), channels, in_height, out_height, cur_w, /*horizontal=*/false, cur_w,
                 next.data(), cur_w);
    cur.swap(next);
  }
  return cur;
}

}  // namespace vismoe
