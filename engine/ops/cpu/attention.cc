#include "engine/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/ops/cpu/dot.h"
#include "engine/ops/cpu/kernel_dispatch.h"
#include "engine/ops/cpu/vector_kernels.h"

namespace vismoe::cpu {

namespace {

// The one implementation of both layouts: `row_at(j)` is the offset of key
// j's row from k (and v), and everything else is the same code.
template <typename RowAt>
void AttentionImpl(ThreadPool* pool, const AttentionShape& shape, const float* q, int64_t nq,
                   const float* k, const float* v, RowAt row_at, int64_t nk, bool causal,
                   int64_t q_pos0, float* out, float* key_saliency) {
  const int heads = shape.num_heads;
  const int d = shape.head_dim;
  const int group = heads / shape.num_kv_heads;
  const int64_t q_stride = shape.q_row_stride > 0 ? shape.q_row_stride : int64_t{heads} * d;
  const int64_t out_stride = int64_t{heads} * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const bool avx2 = ActiveKernelPath() >= KernelPath::kAvx2;  // AVX-512 too: the AVX2 ones
  const auto dot = avx2 ? internal::DotAvx2 : Dot;
  const auto axpy = avx2 ? internal::AxpyAvx2 : Axpy;

  // Saliency is reduced per head (each head's rows run on one thread), then
  // summed over heads in a fixed order, so the result is deterministic.
  std::vector<float> head_sal;
  if (key_saliency != nullptr) head_sal.assign(static_cast<size_t>(heads) * nk, 0.0f);

  auto run_row = [&](int h, int64_t i, std::vector<float>& p) {
    const float* qi = q + i * q_stride + int64_t{h} * d;
    const int64_t kv_off = int64_t{h / group} * d;
    const int64_t visible = causal ? std::min(nk, q_pos0 + i + 1) : nk;
    const int64_t first =
        causal && shape.window > 0 ? std::max<int64_t>(0, q_pos0 + i + 1 - shape.window) : 0;
    float mx = -INFINITY;
    for (int64_t j = first; j < visible; ++j) {
      p[j] = dot(qi, k + row_at(j) + kv_off, d) * scale;
      mx = std::max(mx, p[j]);
    }
    if (shape.sinks != nullptr) mx = std::max(mx, shape.sinks[h]);
    float sum = 0;
    for (int64_t j = first; j < visible; ++j) {
      p[j] = std::exp(p[j] - mx);
      sum += p[j];
    }
    if (shape.sinks != nullptr) sum += std::exp(shape.sinks[h] - mx);
    const float inv = 1.0f / sum;
    float* o = out + i * out_stride + int64_t{h} * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t j = first; j < visible; ++j) {
      p[j] *= inv;
      axpy(p[j], v + row_at(j) + kv_off, o, d);
    }
    if (key_saliency != nullptr) {
      float* hs = head_sal.data() + int64_t{h} * nk;
      for (int64_t j = first; j < visible; ++j) hs[j] += p[j];
    }
  };

  if (key_saliency != nullptr) {
    ParallelFor(pool, heads, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> p(nk);
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t i = 0; i < nq; ++i) run_row(static_cast<int>(h), i, p);
      }
    });
    const float norm = 1.0f / static_cast<float>(int64_t{heads} * nq);
    for (int64_t j = 0; j < nk; ++j) {
      float s = 0;
      for (int h = 0; h < heads; ++h) s += head_sal[int64_t{h} * nk + j];
      key_saliency[j] = s * norm;
    }
    return;
  }
  ParallelFor(pool, int64_t{heads} * nq, 4, [&](int64_t r0, int64_t r1) {
    std::vector<float> p(nk);
    for (int64_t r = r0; r < r1; ++r) run_row(static_cast<int>(r % heads), r / heads, p);
  });
}

int64_t KvRowStride(const AttentionShape& shape) {
  return shape.kv_row_stride > 0 ? shape.kv_row_stride
                                 : int64_t{shape.num_kv_heads} * shape.head_dim;
}

}  // namespace

void Attention(ThreadPool* pool, const AttentionShape& shape, const float* q, int64_t nq,
               const float* k, const float* v, int64_t nk, bool causal, int64_t q_pos0, float* out,
               float* key_saliency) {
  const int64_t stride = KvRowStride(shape);
  AttentionImpl(
      pool, shape, q, nq, k, v, [stride](int64_t j) { return j * stride; }, nk, causal, q_pos0, out,
      key_saliency);
}

void PagedAttention(ThreadPool* pool, const AttentionShape& shape, const float* q, int64_t nq,
                    const PagedKv& kv, int64_t nk, bool causal, int64_t q_pos0, float* out) {
  const int64_t stride = KvRowStride(shape);
  const int64_t rows = kv.block_rows, block_stride = kv.block_stride;
  const int32_t* blocks = kv.blocks;
  auto row_at = [=](int64_t j) { return blocks[j / rows] * block_stride + (j % rows) * stride; };
  AttentionImpl(pool, shape, q, nq, kv.k, kv.v, row_at, nk, causal, q_pos0, out, nullptr);
}

void Attention(ThreadPool* pool, const float* q, int64_t nq, const float* k, const float* v,
               int64_t nk, int num_heads, int num_kv_heads, int head_dim,
               int64_t kv_row_stride_elems, bool causal, int64_t q_pos0, float* out,
               float* key_saliency) {
  AttentionShape shape{num_heads, num_kv_heads, head_dim, 0, kv_row_stride_elems};
  Attention(pool, shape, q, nq, k, v, nk, causal, q_pos0, out, key_saliency);
}

}  // namespace vismoe::cpu
