#include "engine/model/image_resize.h"

#include <algorithm>
#include <cmath>

namespace vismoe {
namespace {

// Filter taps of one output pixel: input indices [first, first + weights.size()).
struct Taps {
  int first = 0;
  std::vector<double> weights;  // normalised, double
  std::vector<int32_t> fixed;   // weights * 2^precision, rounded half away from zero
};

// The taps of one axis in fixed point. `precision` < 0 picks torch's: the
// largest below 22 that keeps the largest weight under 2^15 (int16).
struct AxisTaps {
  std::vector<Taps> taps;
  int precision = 0;
};

// Pillow's precompute_coeffs (torch's _compute_indices_weights_aa is the same
// arithmetic): support grows with the downscale factor so the filter also
// low-passes (antialias); upscaling uses the plain kernel.
AxisTaps ComputeTaps(int in_size, int out_size, int precision) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double inv_filter_scale = 1.0 / filter_scale;
  const double support = 2.0 * filter_scale;
  AxisTaps axis;
  axis.taps.resize(out_size);
  double max_weight = 0.0;
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    Taps& t = axis.taps[i];
    t.first = lo;
    double total = 0.0;
    for (int j = lo; j < hi; ++j) {
      const double w = BicubicKernel((j - center + 0.5) * inv_filter_scale);
      t.weights.push_back(w);
      total += w;
    }
    if (total != 0.0) {
      for (double& w : t.weights) w /= total;
    }
    for (double w : t.weights) max_weight = std::max(max_weight, w);
  }
  if (precision < 0) {
    for (precision = 0; precision < 22; ++precision) {
      if (static_cast<int>(0.5 + max_weight * (1 << (precision + 1))) >= (1 << 15)) break;
    }
  }
  axis.precision = precision;
  const double unit = static_cast<double>(1 << precision);
  for (Taps& t : axis.taps) {
    for (double w : t.weights) {
      t.fixed.push_back(static_cast<int32_t>(w < 0 ? -0.5 + w * unit : 0.5 + w * unit));
    }
  }
  return axis;
}

// Resamples `count` lines of an HWC image along one axis: rows when
// `horizontal` (line l = image row l), else columns (line l = column l).
// width_in / width_out are the image widths of src / dst in pixels.
void ResampleAxis(const uint8_t* src, int channels, const AxisTaps& axis, int count,
                  bool horizontal, int width_in, uint8_t* dst, int width_out) {
  const int32_t half = axis.precision > 0 ? 1 << (axis.precision - 1) : 0;
  const int out_size = static_cast<int>(axis.taps.size());
  for (int l = 0; l < count; ++l) {
    for (int i = 0; i < out_size; ++i) {
      const Taps& t = axis.taps[i];
      for (int c = 0; c < channels; ++c) {
        int32_t acc = half;
        for (size_t k = 0; k < t.fixed.size(); ++k) {
          const int j = t.first + static_cast<int>(k);
          const size_t idx = horizontal ? (static_cast<size_t>(l) * width_in + j)
                                        : (static_cast<size_t>(j) * width_in + l);
          acc += t.fixed[k] * src[idx * channels + c];
        }
        const size_t out_idx = horizontal ? (static_cast<size_t>(l) * width_out + i)
                                          : (static_cast<size_t>(i) * width_out + l);
        dst[out_idx * channels + c] =
            static_cast<uint8_t>(std::clamp(acc >> axis.precision, 0, 255));
      }
    }
  }
}

// One image and its size, resampled one axis at a time.
struct Image {
  std::vector<uint8_t> pixels;
  int height = 0;
  int width = 0;
  int channels = 0;

  void Horizontal(int out_width, int precision) {
    if (out_width == width) return;
    std::vector<uint8_t> next(static_cast<size_t>(height) * out_width * channels);
    ResampleAxis(pixels.data(), channels, ComputeTaps(width, out_width, precision), height,
                 /*horizontal=*/true, width, next.data(), out_width);
    pixels.swap(next);
    width = out_width;
  }
  void Vertical(int out_height, int precision) {
    if (out_height == height) return;
    std::vector<uint8_t> next(static_cast<size_t>(out_height) * width * channels);
    ResampleAxis(pixels.data(), channels, ComputeTaps(height, out_height, precision), width,
                 /*horizontal=*/false, width, next.data(), width);
    pixels.swap(next);
    height = out_height;
  }
};

Image Wrap(const uint8_t* src, int height, int width, int channels) {
  return {std::vector<uint8_t>(src, src + static_cast<size_t>(height) * width * channels), height,
          width, channels};
}

constexpr int kTorchPrecision = -1;  // chosen per axis
constexpr int kPillowPrecision = 32 - 8 - 2;

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
  Image im = Wrap(src, in_height, in_width, channels);
  im.Horizontal(out_width, kTorchPrecision);
  im.Vertical(out_height, kTorchPrecision);
  return std::move(im.pixels);
}

std::vector<uint8_t> ResizeBicubicPillow(const uint8_t* src, int in_height, int in_width,
                                         int channels, int out_height, int out_width) {
  Image im = Wrap(src, in_height, in_width, channels);
  const int shrink_y = in_height - out_height, shrink_x = in_width - out_width;
  if (shrink_y > 0 && shrink_y > 2 * shrink_x) {
    im.Vertical(out_height, kPillowPrecision);
    im.Horizontal(out_width, kPillowPrecision);
  } else {
    im.Horizontal(out_width, kPillowPrecision);
    im.Vertical(out_height, kPillowPrecision);
  }
  return std::move(im.pixels);
}

}  // namespace vismoe
