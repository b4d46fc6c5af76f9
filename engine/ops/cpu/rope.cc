#include "engine/ops/cpu/rope.h"

#include <algorithm>
#include <cmath>

namespace vismoe::cpu {

namespace {

// theta ** (arange(0, dim, 2).float() / dim) in fp32, as torch computes it.
std::vector<float> PosFreqs(int head_dim, double theta) {
  std::vector<float> f(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    f[j] = static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
  }
  return f;
}

}  // namespace

std::vector<float> LongRopeInvFreq(int head_dim, double theta, const std::vector<float>& ext) {
  std::vector<float> inv_freq = PosFreqs(head_dim, theta);
  for (int j = 0; j < head_dim / 2; ++j) inv_freq[j] = 1.0f / (ext[j] * inv_freq[j]);
  return inv_freq;
}

std::vector<float> YarnInvFreq(int dim, double theta, double factor, int original_max_positions,
                               double beta_fast, double beta_slow, bool truncate) {
  const double pi = 3.14159265358979323846;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original_max_positions / (rotations * 2 * pi)) / (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const std::vector<float> pos = PosFreqs(dim, theta);
  std::vector<float> inv(pos.size());
  const float f = static_cast<float>(factor), lo = static_cast<float>(low),
              width = static_cast<float>(high - low);
  for (size_t j = 0; j < pos.size(); ++j) {
    const float extrapolation = 1.0f / pos[j], interpolation = 1.0f / (f * pos[j]);
    const float ramp = std::clamp((static_cast<float>(j) - lo) / width, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // inv_freq_extrapolation_factor
    inv[j] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  return inv;
}

RopeTable BuildRopeTable(const int64_t* positions, int64_t n, int head_dim,
                         const std::vector<float>& inv_freq) {
  RopeTable t;
  t.n = n;
  t.head_dim = head_dim;
  const int half = head_dim / 2;
  t.cos.resize(static_cast<size_t>(n) * head_dim);
  t.sin.resize(static_cast<size_t>(n) * head_dim);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < half; ++j) {
      const float f = static_cast<float>(positions[i]) * inv_freq[j];
      t.cos[i * head_dim + j] = t.cos[i * head_dim + j + half] = std::cos(f);
      t.sin[i * head_dim + j] = t.sin[i * head_dim + j + half] = std::sin(f);
    }
  }
  return t;
}

RopeTable BuildRopeTable(const int64_t* positions, int64_t n, int head_dim, double theta,
                         const std::vector<int>& mrope_section,
                         const std::vector<float>* ext_factors) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq = PosFreqs(head_dim, theta);
  if (ext_factors != nullptr) {
    inv_freq = LongRopeInvFreq(head_dim, theta, *ext_factors);
  } else {
    for (int j = 0; j < half; ++j) inv_freq[j] = 1.0f / inv_freq[j];
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

namespace {

// Rotates pair j = (v[first(j)], v[second(j)]) of every head by frequency j:
// (a, b) -> (a cos - b sin, b cos + a sin).
template <typename First, typename Second>
void RotatePairs(ThreadPool* pool, const RopeTable& table, float* x, int64_t n, int num_heads,
                 int head_dim, int64_t row_stride, First first, Second second) {
  const int half = head_dim / 2;
  ParallelFor(pool, n, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* c = table.cos.data() + i * head_dim;
      const float* s = table.sin.data() + i * head_dim;
      for (int h = 0; h < num_heads; ++h) {
        float* v = x + i * row_stride + static_cast<int64_t>(h) * head_dim;
        for (int j = 0; j < half; ++j) {
          const float a = v[first(j)], b = v[second(j)];
          v[first(j)] = a * c[j] - b * s[j];
          v[second(j)] = b * c[j] + a * s[j];
        }
      }
    }
  });
}

}  // namespace

void ApplyRope(ThreadPool* pool, const RopeTable& table, float* x, int64_t n, int num_heads,
               int head_dim, int64_t row_stride) {
  const int half = head_dim / 2;  // rotate_half: pair j is (j, j + half)
  RotatePairs(
      pool, table, x, n, num_heads, head_dim, row_stride, [](int j) { return j; },
      [half](int j) { return j + half; });
}

void ApplyRopePairs(ThreadPool* pool, const RopeTable& table, float* x, int64_t n, int num_heads,
                    int head_dim, int64_t row_stride) {
  RotatePairs(
      pool, table, x, n, num_heads, head_dim, row_stride, [](int j) { return 2 * j; },
      [](int j) { return 2 * j + 1; });
}

}  // namespace vismoe::cpu
