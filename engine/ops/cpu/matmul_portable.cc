// The portable path of the matrix kernels: plain C++ that the compiler
// vectorises for the baseline ISA (SSE2 on x86-64). Weights are converted one
// element at a time as they are read (BF16 by a shift, F16 through a table),
// never widened into scratch. Accumulation order: see matmul_kernels.h.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/ops/cpu/matmul_kernels.h"

namespace vismoe::cpu::internal {
namespace {

struct LoadF32 {
  const float* p;
  float operator()(int64_t i) const { return p[i]; }
};
struct LoadBf16 {
  const uint16_t* p;
  float operator()(int64_t i) const { return Bf16ToFloat(p[i]); }
};
struct LoadF16 {
  const uint16_t* p;
  const float* table;
  float operator()(int64_t i) const { return table[p[i]]; }
};
// One row of e4m3 weights and its row of block scales.
struct LoadE4m3 {
  const uint8_t* p;
  const float* table;
  const float* scale_row;
  int64_t scale_cols;
  float operator()(int64_t i) const { return table[p[i]] * scale_row[i / scale_cols]; }
};

// The eight-lane dot product of matmul_kernels.h, without FMA.
template <typename Load>
float Dot8(const float* x, Load w, int64_t in) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t full = in & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * w(i + l);
  }
  for (int64_t i = full; i < in; ++i) acc[i - full] += x[i] * w(i);
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

template <typename MakeLoad>
void Rows(const MatMulArgs& a, int64_t o0, int64_t o1, MakeLoad make_load) {
  for (int64_t o = o0; o < o1; ++o) {
    const auto w = make_load(o);
    const float b = a.bias == nullptr ? 0.0f : a.bias[o];
    for (int64_t t = 0; t < a.n; ++t) a.y[t * a.out + o] = Dot8(a.x + t * a.in, w, a.in) + b;
  }
}

// One row of MXFP4 weights (two per byte, the even one low) and its row of
// block scales.
struct LoadMxfp4 {
  const uint8_t* p;
  const float* table;
  const uint8_t* scale_row;  // e8m0
  int64_t scale_cols;
  float operator()(int64_t i) const {
    return table[(p[i / 2] >> (4 * (i % 2))) & 15] * E8m0ToFloat(scale_row[i / scale_cols]);
  }
};

// Accumulates straight into y, one chain per output in increasing i; the inner
// loop over adjacent outputs is what the compiler vectorises.
template <typename MakeLoad>
void Cols(const MatMulArgs& a, int64_t o0, int64_t o1, MakeLoad make_load) {
  for (int64_t t = 0; t < a.n; ++t) {
    float* y = a.y + t * a.out;
    std::fill(y + o0, y + o1, 0.0f);
    for (int64_t i = 0; i < a.in; ++i) {
      const float xi = a.x[t * a.in + i];
      const auto w = make_load(i);
      for (int64_t o = o0; o < o1; ++o) y[o] += xi * w(o);
    }
  }
}

// Calls body(make_load) with a loader factory for a.dtype: make_load(k)
// returns a loader whose element i is weight element k * stride + i (row k
// of [rows, stride] weights; stride = in for rows kernels, out for cols).
template <typename Body>
void WithLoader(const MatMulArgs& a, int64_t stride, Body body) {
  switch (a.dtype) {
    case DType::kF32: {
      const auto* w = static_cast<const float*>(a.w);
      body([w, stride](int64_t k) { return LoadF32{w + k * stride}; });
      return;
    }
    case DType::kBF16: {
      const auto* w = static_cast<const uint16_t*>(a.w);
      body([w, stride](int64_t k) { return LoadBf16{w + k * stride}; });
      return;
    }
    case DType::kF16: {
      const auto* w = static_cast<const uint16_t*>(a.w);
      const float* table = F16Table();
      body([w, table, stride](int64_t k) { return LoadF16{w + k * stride, table}; });
      return;
    }
    case DType::kF8E4M3: {  // rows kernels only (k = o)
      const auto* w = static_cast<const uint8_t*>(a.w);
      const float* table = E4m3Table();
      body([w, table, stride, &a](int64_t k) {
        return LoadE4m3{w + k * stride, table, a.scale + (k / a.scale_rows) * a.scale_stride,
                        a.scale_cols};
      });
      return;
    }
    case DType::kMxFp4: {  // rows kernels only (k = o)
      const auto* w = static_cast<const uint8_t*>(a.w);
      const float* table = E2m1Table();
      body([w, table, stride, &a](int64_t k) {
        return LoadMxfp4{w + k * stride / 2, table, static_cast<const uint8_t*>(a.ScaleRow(k)),
                         a.scale_cols};
      });
      return;
    }
    case DType::kU8:
    case DType::kE8M0:
      break;
  }
  Unsupported(a, "matrix");
}

}  // namespace

const float* E4m3Table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(256);
    for (uint32_t v = 0; v < 256; ++v) t[v] = E4m3ToFloat(static_cast<uint8_t>(v));
    return t;
  }();
  return table.data();
}

const float* E2m1Table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(16);
    for (uint8_t v = 0; v < 16; ++v) t[v] = E2m1ToFloat(v);
    return t;
  }();
  return table.data();
}

void Unsupported(const MatMulArgs& a, const char* kernel) {
  std::fprintf(stderr, "vismoe: a %s kernel was called with %s weights\n", kernel,
               std::string(DTypeName(a.dtype)).c_str());
  std::abort();
}

const float* F16Table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = F16ToFloat(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

void LinearRowsPortable(const MatMulArgs& a, int64_t o0, int64_t o1) {
  WithLoader(a, a.in, [&](auto make_load) { Rows(a, o0, o1, make_load); });
}

void LinearColsPortable(const MatMulArgs& a, int64_t o0, int64_t o1) {
  if (a.dtype == DType::kF8E4M3 || a.dtype == DType::kMxFp4) Unsupported(a, "[in, out] matrix");
  WithLoader(a, a.out, [&](auto make_load) { Cols(a, o0, o1, make_load); });
}

}  // namespace vismoe::cpu::internal
