#include "engine/ops/cpu/linear.h"

#include <algorithm>
#include <vector>

#include "engine/ops/cpu/dot.h"
#include "engine/ops/cpu/kernel_dispatch.h"
#include "engine/ops/cpu/matmul_kernels.h"

namespace vismoe::cpu {
namespace {

// Weight rows per thread-pool chunk (rows kernels) and output columns per
// unit of work (cols kernels: eight AVX2 tiles of eight columns).
constexpr int64_t kMinRowsPerChunk = 16;
constexpr int64_t kColsPerUnit = 64;

// The block scales of a block-scaled weight w [out, in] (e4m3, MXFP4) as
// fp32 (read in place when stored F32, else widened into `widened`), and the
// matching fields of `a`; nothing for other dtypes.
void SetScale(const TensorView& w, std::vector<float>* widened, internal::MatMulArgs* a) {
  if (w.scale.data == nullptr) return;
  if (w.scale.dtype == DType::kE8M0) {  // MXFP4: one byte per 32 weights, read in place
    a->scale_e8m0 = static_cast<const uint8_t*>(w.scale.data);
  } else if (w.scale.dtype == DType::kF32) {
    a->scale = static_cast<const float*>(w.scale.data);
  } else {
    widened->resize(static_cast<size_t>(w.scale_numel()));
    ToFloat(w.scale.dtype, w.scale.data, widened->size(), widened->data());
    a->scale = widened->data();
  }
  a->scale_rows = w.scale.rows;
  a->scale_cols = w.scale.cols;
  a->scale_stride = CeilDiv(w.dim(1), w.scale.cols);
}

}  // namespace

void Linear(ThreadPool* pool, const float* x, int64_t n, int64_t in, const TensorView& w,
            const TensorView* bias, float* y) {
  const int64_t out = w.dim(0);
  std::vector<float> b;
  if (bias != nullptr) {
    b.resize(out);
    ToFloat(bias->dtype, bias->data, out, b.data());
  }
  internal::MatMulArgs a{x, n, in, w.data, w.dtype, out, b.empty() ? nullptr : b.data(), y};
  std::vector<float> scale;
  SetScale(w, &scale, &a);
  const KernelPath path = ActiveKernelPath();
  const auto kernel = path == KernelPath::kAvx512 ? internal::LinearRowsAvx512
                      : path == KernelPath::kAvx2 ? internal::LinearRowsAvx2
                                                  : internal::LinearRowsPortable;
  ParallelFor(pool, out, kMinRowsPerChunk, [&](int64_t o0, int64_t o1) { kernel(a, o0, o1); });
}

void LinearTransposed(ThreadPool* pool, const float* x, int64_t n, int64_t in,
                      const TensorView& w_t, float* y) {
  const int64_t out = w_t.dim(1);
  const internal::MatMulArgs a{x, n, in, w_t.data, w_t.dtype, out, nullptr, y};
  if (w_t.scale.data != nullptr) internal::Unsupported(a, "[in, out] matrix");
  // The AVX-512 path runs the AVX2 cols kernels (matmul_kernels.h).
  const auto kernel = ActiveKernelPath() >= KernelPath::kAvx2 ? internal::LinearColsAvx2
                                                              : internal::LinearColsPortable;
  const int64_t units = (out + kColsPerUnit - 1) / kColsPerUnit;
  ParallelFor(pool, units, 1, [&](int64_t u0, int64_t u1) {
    kernel(a, u0 * kColsPerUnit, std::min(u1 * kColsPerUnit, out));
  });
}

std::vector<float> DequantizeF8(const TensorView& w) {
  const int64_t out = w.dim(0), in = w.dim(1);
  internal::MatMulArgs a;
  std::vector<float> widened;
  SetScale(w, &widened, &a);
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  std::vector<float> f(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i)
      f[o * in + i] = E4m3ToFloat(bytes[o * in + i]) * a.ScaleAt(o, i);
  }
  return f;
}

void LinearReference(ThreadPool* pool, const float* x, int64_t n, int64_t in, const TensorView& w,
                     const TensorView* bias, float* y) {
  const int64_t out = w.dim(0);
  std::vector<float> b;
  if (bias != nullptr) {
    b.resize(out);
    ToFloat(bias->dtype, bias->data, out, b.data());
  }
  const size_t row_bytes = DTypeBytes(w.dtype, in);
  internal::MatMulArgs scaled;
  std::vector<float> scale;
  SetScale(w, &scale, &scaled);
  ParallelFor(pool, out, 16, [&](int64_t o0, int64_t o1) {
    std::vector<float> wrow(in);
    for (int64_t o = o0; o < o1; ++o) {
      ToFloat(w.dtype, static_cast<const char*>(w.data) + o * row_bytes, in, wrow.data());
      if (scaled.scale != nullptr || scaled.scale_e8m0 != nullptr) {
        for (int64_t i = 0; i < in; ++i) wrow[i] *= scaled.ScaleAt(o, i);
      }
      const float bo = b.empty() ? 0.0f : b[o];
      for (int64_t t = 0; t < n; ++t) y[t * out + o] = Dot(x + t * in, wrow.data(), in) + bo;
    }
  });
}

void LinearTransposedReference(ThreadPool* pool, const float* x, int64_t n, int64_t in,
                               const TensorView& w_t, float* y) {
  const int64_t out = w_t.dim(1);
  if (w_t.scale.data != nullptr) {
    internal::Unsupported(internal::MatMulArgs{x, n, in, w_t.data, w_t.dtype, out, nullptr, y},
                          "[in, out] matrix");
  }
  // Widen the weight once into [out, in] order, then reuse the row kernel.
  std::vector<float> w(static_cast<size_t>(out) * in);
  const size_t esz = DTypeSize(w_t.dtype);
  ParallelFor(pool, in, 64, [&](int64_t i0, int64_t i1) {
    std::vector<float> row(out);
    for (int64_t i = i0; i < i1; ++i) {
      ToFloat(w_t.dtype, static_cast<const char*>(w_t.data) + i * out * esz, out, row.data());
      for (int64_t o = 0; o < out; ++o) w[o * in + i] = row[o];
    }
  });
  TensorView wv{w.data(), DType::kF32, {out, in}};
  LinearReference(pool, x, n, in, wv, nullptr, y);
}

}  // namespace vismoe::cpu
