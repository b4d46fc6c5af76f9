// Plain double-precision helpers for the op tests (backend_ops_test,
// vision_ops_test) and deterministic inputs for the model tests: the textbook
// loops a fast kernel is checked against (llm.c's habit). Header-only so every
// test target can use it without another library.
#ifndef VISMOE_TESTS_TESTING_REFERENCE_MATH_H_
#define VISMOE_TESTS_TESTING_REFERENCE_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "gtest/gtest.h"

namespace vismoe::testing {

// The tensor's values, widened from any float dtype; a block-scaled matrix
// (F8_E4M3, MXFP4) each value times its block's scale, in double.
inline std::vector<double> AsDouble(const TensorView& t) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  ToFloat(t.dtype, t.data, f.size(), f.data());
  std::vector<double> d(f.begin(), f.end());
  if (t.scale.data == nullptr) return d;
  // Rows of every matrix (a rank-3 tensor's too) and their scale blocks.
  const int64_t cols = t.dim(-1), rows = t.dim(-2), mats = t.numel() / (rows * cols);
  const int64_t stride = CeilDiv(cols, t.scale.cols), row_blocks = CeilDiv(rows, t.scale.rows);
  std::vector<float> s(static_cast<size_t>(t.scale_numel()));
  ToFloat(t.scale.dtype, t.scale.data, s.size(), s.data());
  for (int64_t m = 0; m < mats; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        d[(m * rows + r) * cols + c] *=
            s[(m * row_blocks + r / t.scale.rows) * stride + c / t.scale.cols];
      }
    }
  }
  return d;
}

// y[n, out] = x[n, in] . W[out, ...]^T (+ b): W's first dimension is `out`,
// the rest flatten to `in` (a Conv3d patch embedding reads as a Linear).
inline std::vector<double> MatMulT(const std::vector<double>& x, int64_t n, int64_t in,
                                   const TensorView& w, const TensorView& b) {
  const std::vector<double> wd = AsDouble(w);
  const int64_t out = w.shape[0];
  const std::vector<double> bd = b.empty() ? std::vector<double>(out, 0.0) : AsDouble(b);
  std::vector<double> y(n * out);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double s = bd[o];
      for (int64_t k = 0; k < in; ++k) s += x[i * in + k] * wd[o * in + k];
      y[i * out + o] = s;
    }
  }
  return y;
}

// Max |got - want| against rel * max(1, max |want|); NaN counts as the worst.
inline void ExpectClose(const float* got, const std::vector<double>& want, double rel,
                        const std::string& what) {
  double scale = 1.0, worst = 0.0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) worst = d, at = i;
  }
  EXPECT_LE(worst, rel * scale) << what << ": max |diff| " << worst << " at " << at << " (got "
                                << got[at] << ", want " << want[at] << "), scale " << scale;
}

// Deterministic values in [-scale, scale).
inline std::vector<float> Pattern(int64_t count, int64_t salt, float scale) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) {
    v[i] = scale * (static_cast<float>((i * 7919 + salt * 104729) % 2001) / 1000.0f - 1.0f);
  }
  return v;
}

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_TESTING_REFERENCE_MATH_H_
