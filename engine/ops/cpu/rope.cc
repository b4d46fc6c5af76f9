#include "engine/ops/cpu/rope.h"

#include <cmath>

namespace vismoe::cpu {

RopeTable BuildRopeTable(const int64_t* positions, int64_t n, int head_dim, double theta,
                         const std::vector<int>& mrope_section,
                         const std::vector<float>* ext_factors) {
  const int half = head_dim / 2;
  // fp32 as torch computes it: base ** (arange(0, dim, 2).float() / dim), then 1 / that.
  std::vector<float> inv_freq(half);
  for (int j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    const float base = static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    inv_freq[j] = ext_factors != nullptr ? 1.0f / ((*ext_factors)[j] * base) : 1.0f / base;
  }
  // Which axis feeds frequency j.
  std::vector<int> axis(half, 0);
  if (!mrope_section.empty()) {
    for (int a = 1; a <= 2; ++a) {
      for (int j = a; j < 3 * mrope_section[a] && j < half; j += 3) axis[j] = a;
    }
  }
  RopeTable t;
  t.n = n;
  t.head_dim = head_dim;
  t.cos.resize(static_cast<size_t>(n) * head_dim);
  t.sin.resize(static_cast<size_t>(n) * head_dim);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < half; ++j) {
      const float pos = static_cast<float>(positions[axis[j] * n + i]);
      const float f = pos * inv_freq[j];
      const float c = std::cos(f);
      const float s = std::sin(f);
      t.cos[i * head_dim + j] = c;
      t.cos[i * head_dim + j + half] = c;
      t.sin[i * head_dim + j] = s;
      t.sin[i * head_dim + j + half] = s;
    }
  }
  return t;
}

void ScaleRopeRows(RopeTable* table, int64_t row0, int64_t rows, float scale) {
  const size_t begin = static_cast<size_t>(row0) * table->head_dim;
  const size_t end = begin + static_cast<size_t>(rows) * table->head_dim;
  for (size_t i = begin; i < end; ++i) {
    table->cos[i] *= scale;
    table->sin[i] *= scale;
  }
}

void ApplyRope(ThreadPool* pool, const RopeTable& table, float* x, int64_t n, int num_heads,
               int head_dim, int64_t row_stride) {
  const int half = head_dim / 2;
  ParallelFor(pool, n, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* c = table.cos.data() + i * head_dim;
      const float* s = table.sin.data() + i * head_dim;
      for (int h = 0; h < num_heads; ++h) {
        float* v = x + i * row_stride + static_cast<int64_t>(h) * head_dim;
        for (int j = 0; j < half; ++j) {
          const float a = v[j];
          const float b = v[j + half];
          // x*cos + rotate_half(x)*sin; rotate_half = (-b, a).
          v[j] = a * c[j] + (-b) * s[j];
          v[j + half] = b * c[j + half] + a * s[j + half];
        }
      }
    }
  });
}

}  // namespace vismoe::cpu
