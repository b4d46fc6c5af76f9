#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/latent_attention.h"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::LoadBf16;
using detail::StoreBf16;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
// Latent values one lane holds (rank <= kMaxLatentRank = 32 lanes x 16).
constexpr int kLatentPerLane = kMaxLatentRank / kWarp;

// LatentShape::q_stride() (host code) for the kernels.
__device__ __forceinline__ int64_t QStride(const LatentShape& s) {
  return int64_t{s.num_heads} * (s.nope_dim + s.rope_dim);
}

// One block per row; threads stride over (head, pair j < dim / 2).
__global__ void RopeHeadsKernel(Bf16* x, int num_heads, int64_t head_stride, int64_t offset,
                                int dim, int64_t row_stride, bool interleave,
                                const int64_t* positions, const float* inv_freq, float scale) {
  const int64_t i = blockIdx.x;
  const int half = dim / 2;
  for (int idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int j = idx % half;
    // As cpu::BuildRopeTable: an fp32 angle, cos / sin scaled once computed.
    const float f = static_cast<float>(positions[i]) * inv_freq[j];
    const float c = cosf(f) * scale, s = sinf(f) * scale;
    Bf16* v = x + i * row_stride + h * head_stride + offset;
    const int a_at = interleave ? 2 * j : j, b_at = interleave ? 2 * j + 1 : j + half;
    const float a = LoadBf16(v, a_at), b = LoadBf16(v, b_at);
    StoreBf16(v, a_at, a * c - b * s);
    StoreBf16(v, b_at, b * c + a * s);
  }
}

// Block (row i, head h); thread j over the rank: the nope query (in shared
// memory) times column j of W_uk_h, read across the block's threads.
__global__ void AbsorbKernel(LatentShape s, const Bf16* q, const Bf16* kv_b, float* q_abs) {
  extern __shared__ float nope[];  // [nope_dim]
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const Bf16* qh = q + i * QStride(s) + int64_t{h} * (s.nope_dim + s.rope_dim);
  for (int d = threadIdx.x; d < s.nope_dim; d += blockDim.x) nope[d] = LoadBf16(qh, d);
  __syncthreads();
  const Bf16* w = kv_b + int64_t{h} * (s.nope_dim + s.v_dim) * s.rank;
  float* out = q_abs + (i * s.num_heads + h) * s.rank;
  for (int j = threadIdx.x; j < s.rank; j += blockDim.x) {
    float acc = 0.0f;
    for (int d = 0; d < s.nope_dim; ++d) acc += nope[d] * LoadBf16(w, int64_t{d} * s.rank + j);
    out[j] = acc;
  }
}

// Block (row i, head h), kWarps warps: each warp takes cache rows t = warp,
// warp + kWarps, ... with an online softmax of its own (lane l holds latent
// dims l, l + 32, ...), then the block merges the warps' states. The query
// ([q_abs | q_pe], fp32) sits in shared memory.
__global__ void LatentAttentionKernel(LatentShape s, const float* q_abs, const Bf16* q,
                                      const Bf16* cache, PagedKv paged, int64_t q_pos0,
                                      float* o_lat) {
  extern __shared__ float smem[];
  const int row_elems = s.rank + s.rope_dim;
  float* query = smem;                      // [row_elems]
  float* acc_w = query + row_elems;         // [kWarps][rank]
  float* m_w = acc_w + kWarps * s.rank;     // [kWarps]
  float* l_w = m_w + kWarps;                // [kWarps]
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (paged.start != nullptr) q_pos0 += *paged.start;
  const float* qa = q_abs + (i * s.num_heads + h) * s.rank;
  const Bf16* qp = q + i * QStride(s) + int64_t{h} * (s.nope_dim + s.rope_dim) + s.nope_dim;
  for (int d = threadIdx.x; d < row_elems; d += blockDim.x) {
    query[d] = d < s.rank ? qa[d] : LoadBf16(qp, d - s.rank);
  }
  __syncthreads();
  const int64_t visible = q_pos0 + i + 1;  // causal, its own row included
  float m = -INFINITY, l = 0.0f;
  float acc[kLatentPerLane];
#pragma unroll
  for (int u = 0; u < kLatentPerLane; ++u) acc[u] = 0.0f;
  for (int64_t t = warp; t < visible; t += kWarps) {
    const Bf16* c = cache + static_cast<int64_t>(paged.blocks[t / paged.block_rows]) *
                                paged.block_stride +
                    (t % paged.block_rows) * row_elems;
    float dot = 0.0f;
    for (int d = lane; d < row_elems; d += kWarp) dot += query[d] * LoadBf16(c, d);
    const float score = detail::WarpSum(dot) * s.scale;
    const float m_new = fmaxf(m, score);
    const float corr = expf(m - m_new), p = expf(score - m_new);
    l = l * corr + p;
#pragma unroll
    for (int u = 0; u < kLatentPerLane; ++u) {
      const int d = lane + u * kWarp;
      if (d < s.rank) acc[u] = acc[u] * corr + p * LoadBf16(c, d);
    }
    m = m_new;
  }
#pragma unroll
  for (int u = 0; u < kLatentPerLane; ++u) {
    const int d = lane + u * kWarp;
    if (d < s.rank) acc_w[warp * s.rank + d] = acc[u];
  }
  if (lane == 0) m_w[warp] = m, l_w[warp] = l;
  __syncthreads();
  // A warp that saw no row has m = -inf, l = 0: its weight exp(-inf) is 0.
  float mx = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_w[w]);
  float denom = 0.0f;
  for (int w = 0; w < kWarps; ++w) denom += l_w[w] * expf(m_w[w] - mx);
  float* out = o_lat + (i * s.num_heads + h) * s.rank;
  for (int d = threadIdx.x; d < s.rank; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) v += acc_w[w * s.rank + d] * expf(m_w[w] - mx);
    out[d] = v / denom;
  }
}

// Block (row i, head h): warp w computes output dims v = w, w + kWarps, ...
// as a warp dot of the attended latent (shared) with row v of W_uv_h.
__global__ void ExpandKernel(LatentShape s, const float* o_lat, const Bf16* kv_b, Bf16* out) {
  extern __shared__ float lat[];  // [rank]
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const float* src = o_lat + (i * s.num_heads + h) * s.rank;
  for (int d = threadIdx.x; d < s.rank; d += blockDim.x) lat[d] = src[d];
  __syncthreads();
  const Bf16* w = kv_b + (int64_t{h} * (s.nope_dim + s.v_dim) + s.nope_dim) * s.rank;
  Bf16* o = out + i * int64_t{s.num_heads} * s.v_dim + int64_t{h} * s.v_dim;
  for (int v = warp; v < s.v_dim; v += kWarps) {
    float dot = 0.0f;
    for (int d = lane; d < s.rank; d += kWarp) dot += lat[d] * LoadBf16(w, int64_t{v} * s.rank + d);
    dot = detail::WarpSum(dot);
    if (lane == 0) StoreBf16(o, v, dot);
  }
}

absl::Status CheckRows(const char* op, int64_t n) {
  if (n < 0 || n > 0x7fffffffLL) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::", op, ": bad row count ", n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLatentShape(const LatentShape& s) {
  if (s.num_heads <= 0 || s.num_heads > 65535 || s.rank <= 0 || s.rank > kMaxLatentRank ||
      s.rank % kWarp != 0 || s.rope_dim <= 0 || s.rope_dim % 2 != 0 ||
      s.rope_dim > kMaxLatentRopeDim || s.nope_dim <= 0 || s.nope_dim > 1024 || s.v_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "latent attention: heads=", s.num_heads, " kv_lora_rank=", s.rank,
        " qk_nope_head_dim=", s.nope_dim, " qk_rope_head_dim=", s.rope_dim,
        " v_head_dim=", s.v_dim, " (the CUDA kernels take kv_lora_rank a multiple of 32 up to ",
        kMaxLatentRank, ", an even qk_rope_head_dim up to ", kMaxLatentRopeDim, ")"));
  }
  return absl::OkStatus();
}

absl::Status RopeHeads(Bf16* x, int64_t n, int num_heads, int64_t head_stride, int64_t offset,
                       int dim, int64_t row_stride, bool interleave, const int64_t* positions,
                       const float* inv_freq, float scale, StreamHandle stream) {
  if (dim <= 0 || dim % 2 != 0 || num_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::RopeHeads: dim=", dim, " heads=", num_heads, " (dim even, > 0)"));
  }
  if (absl::Status st = CheckRows("RopeHeads", n); !st.ok()) return st;
  if (n == 0) return absl::OkStatus();
  RopeHeadsKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      x, num_heads, head_stride, offset, dim, row_stride, interleave, positions, inv_freq, scale);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RopeHeadsKernel");
  return absl::OkStatus();
}

absl::Status LatentAbsorbQuery(const LatentShape& shape, const Bf16* q, int64_t n,
                               const Bf16* kv_b, float* q_abs, StreamHandle stream) {
  if (absl::Status st = CheckLatentShape(shape); !st.ok()) return st;
  if (absl::Status st = CheckRows("LatentAbsorbQuery", n); !st.ok()) return st;
  if (n == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(shape.num_heads));
  AbsorbKernel<<<grid, kThreads, shape.nope_dim * sizeof(float), stream>>>(shape, q, kv_b, q_abs);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("AbsorbKernel");
  return absl::OkStatus();
}

absl::Status LatentPagedAttention(const LatentShape& shape, const float* q_abs, const Bf16* q,
                                  int64_t n, const Bf16* cache, const PagedKv& paged,
                                  int64_t q_pos0, float* o_lat, StreamHandle stream) {
  if (absl::Status st = CheckLatentShape(shape); !st.ok()) return st;
  if (absl::Status st = CheckRows("LatentPagedAttention", n); !st.ok()) return st;
  if (paged.blocks == nullptr || paged.block_rows <= 0 ||
      paged.block_stride < paged.block_rows * shape.row_elems() || q_pos0 < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::LatentPagedAttention: bad paging block_rows=", paged.block_rows,
                     " block_stride=", paged.block_stride, " q_pos0=", q_pos0));
  }
  if (n == 0) return absl::OkStatus();
  const size_t shmem =
      (static_cast<size_t>(shape.row_elems()) + size_t{kWarps} * shape.rank + 2 * kWarps) *
      sizeof(float);
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(shape.num_heads));
  LatentAttentionKernel<<<grid, kThreads, shmem, stream>>>(shape, q_abs, q, cache, paged, q_pos0,
                                                          o_lat);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("LatentAttentionKernel");
  return absl::OkStatus();
}

absl::Status LatentExpandOutput(const LatentShape& shape, const float* o_lat, int64_t n,
                                const Bf16* kv_b, Bf16* out, StreamHandle stream) {
  if (absl::Status st = CheckLatentShape(shape); !st.ok()) return st;
  if (absl::Status st = CheckRows("LatentExpandOutput", n); !st.ok()) return st;
  if (n == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(shape.num_heads));
  ExpandKernel<<<grid, kThreads, shape.rank * sizeof(float), stream>>>(shape, o_lat, kv_b, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ExpandKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
