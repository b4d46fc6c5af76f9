#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/attention.h"
#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::LoadBf16;
using detail::StoreBf16;
using detail::WarpSum;

// Block (query row i, head h). Each warp walks keys j = warp, warp + nwarps, ...
// with its own online-softmax state (max m, mass l, acc over head_dim split
// across lanes: lane owns dims lane + 32c); the warps' states merge at the end
// through shared memory. kPerLane = ceil(head_dim / 32) bounds the registers
// and is a template constant so acc[] stays in registers.
// Where key j's row starts: contiguous rows, or through a block table.
struct KvRows {
  int64_t stride = 0;  // elements between rows (of a block)
  const int32_t* blocks = nullptr;
  int64_t block_rows = 0;
  int64_t block_stride = 0;
  const int32_t* start = nullptr;  // device: tokens before the step's rows (PagedKv::start)
};

template <bool kPaged>
__device__ __forceinline__ int64_t RowOffset(const KvRows& r, int64_t j) {
  if constexpr (kPaged) {
    return static_cast<int64_t>(r.blocks[j / r.block_rows]) * r.block_stride +
           (j % r.block_rows) * r.stride;
  } else {
    return j * r.stride;
  }
}

// What a row sees beyond q/k/v: the window and the heads' sink logits.
struct Mask {
  int64_t window = 0;
  const float* sinks = nullptr;
};

template <int kPerLane, bool kPaged>
__global__ void AttentionKernel(const Bf16* q, int64_t q_stride, const Bf16* k, const Bf16* v,
                                KvRows rows, int64_t nk, int group, int head_dim, bool causal,
                                int64_t q_pos0, Mask mask, float scale, Bf16* out,
                                int64_t out_stride) {
  extern __shared__ float smem[];  // [nwarps][head_dim] acc, then [nwarps] m, [nwarps] l
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int g = h / group;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int nwarps = blockDim.x / kWarp;

  if (kPaged && rows.start != nullptr) {  // the cache length, read at run time
    q_pos0 = *rows.start;
    nk = q_pos0 + gridDim.x;
  }
  const Bf16* qi = q + i * q_stride + static_cast<int64_t>(h) * head_dim;
  float qr[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + kWarp * c;
    qr[c] = d < head_dim ? LoadBf16(qi, d) : 0.0f;
  }
  int64_t visible = nk;
  if (causal && q_pos0 + i + 1 < nk) visible = q_pos0 + i + 1;
  // The window's first key (the CPU op's: keys j <= q_pos0 + i - window are out).
  int64_t first = 0;
  if (causal && mask.window > 0 && q_pos0 + i + 1 > mask.window) first = q_pos0 + i + 1 - mask.window;

  float m = -INFINITY;
  float l = 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;

  const int64_t kv_off = static_cast<int64_t>(g) * head_dim;
  for (int64_t j = first + warp; j < visible; j += nwarps) {
    const int64_t row = RowOffset<kPaged>(rows, j);
    const Bf16* kj = k + row + kv_off;
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + kWarp * c;
      if (d < head_dim) dot += qr[c] * LoadBf16(kj, d);
    }
    const float s = WarpSum(dot) * scale;
    const float m_new = fmaxf(m, s);
    // corr is 0 on the first finite key (m = -inf). While every score so far
    // is -inf (inf inputs), m_new is -inf too and -inf - -inf would be NaN and
    // poison l/acc for all later keys; the CPU gives such keys weight 0. A NaN
    // score (fmaxf skips it) must still poison the row, as on the CPU.
    const bool none_yet = m_new == -INFINITY && !isnan(s);
    const float corr = none_yet ? 1.0f : expf(m - m_new);
    const float p = none_yet ? 0.0f : expf(s - m_new);
    l = l * corr + p;
    const Bf16* vj = v + row + kv_off;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + kWarp * c;
      acc[c] = acc[c] * corr + (d < head_dim ? p * LoadBf16(vj, d) : 0.0f);
    }
    m = m_new;
  }

  float* s_acc = smem;
  float* s_m = smem + nwarps * head_dim;
  float* s_l = s_m + nwarps;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + kWarp * c;
    if (d < head_dim) s_acc[warp * head_dim + d] = acc[c];
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
  __syncthreads();
  float gm = -INFINITY;
  for (int w = 0; w < nwarps; ++w) gm = fmaxf(gm, s_m[w]);
  // The sink joins the max and the mass, never the values.
  const float sink = mask.sinks != nullptr ? mask.sinks[h] : -INFINITY;
  gm = fmaxf(gm, sink);
  // A warp with no visible key has l = 0 and is skipped; NaN (!= 0) is kept
  // so it reaches the output.
  float gl = mask.sinks != nullptr && gm != -INFINITY ? expf(sink - gm) : 0.0f;
  for (int w = 0; w < nwarps; ++w) {
    if (s_l[w] != 0.0f) gl += s_l[w] * expf(s_m[w] - gm);
  }
  Bf16* oi = out + i * out_stride + static_cast<int64_t>(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < nwarps; ++w) {
      if (s_l[w] != 0.0f) o += s_acc[w * head_dim + d] * expf(s_m[w] - gm);
    }
    StoreBf16(oi, d, gl != 0.0f ? o / gl : 0.0f);
  }
}

template <int kPerLane, bool kPaged>
void Launch(dim3 grid, int warps, const AttentionShape& s, int64_t qs, const KvRows& rows,
            const Bf16* q, const Bf16* k, const Bf16* v, int64_t nk, bool causal, int64_t q_pos0,
            float scale, Bf16* out, StreamHandle stream) {
  const size_t shmem = static_cast<size_t>(warps) * (s.head_dim + 2) * sizeof(float);
  AttentionKernel<kPerLane, kPaged><<<grid, warps * kWarp, shmem, stream>>>(
      q, qs, k, v, rows, nk, s.num_heads / s.num_kv_heads, s.head_dim, causal, q_pos0,
      Mask{s.window, s.sinks}, scale, out, static_cast<int64_t>(s.num_heads) * s.head_dim);
}

int64_t KvStride(const AttentionShape& shape) {
  return shape.kv_row_stride > 0 ? shape.kv_row_stride
                                 : static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
}

absl::Status CheckShape(const AttentionShape& shape, int64_t nq, bool causal, int64_t q_pos0) {
  if (shape.num_heads <= 0 || shape.num_kv_heads <= 0 ||
      shape.num_heads % shape.num_kv_heads != 0 || shape.head_dim <= 0 || shape.head_dim > 256 ||
      q_pos0 < 0 || nq > 0x7fffffffLL || shape.num_heads > 65535 || shape.window < 0 ||
      (shape.window > 0 && !causal) || !(shape.scale >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda::Attention: bad shape heads=", shape.num_heads, " kv_heads=", shape.num_kv_heads,
        " head_dim=", shape.head_dim, " nq=", nq, " q_pos0=", q_pos0, " window=", shape.window,
        causal ? "" : " (not causal)", " scale=", shape.scale));
  }
  return absl::OkStatus();
}

template <bool kPaged>
absl::Status Run(const AttentionShape& shape, const Bf16* q, int64_t nq, const Bf16* k,
                 const Bf16* v, const KvRows& rows, int64_t nk, bool causal, int64_t q_pos0,
                 Bf16* out, StreamHandle stream) {
  if (nq <= 0) return absl::OkStatus();
  const int64_t qs = shape.q_row_stride > 0
                         ? shape.q_row_stride
                         : static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  const float scale =
      shape.scale > 0.0f ? shape.scale : 1.0f / sqrtf(static_cast<float>(shape.head_dim));
  // Decode (few query blocks): more warps per block to spread the keys.
  const int warps = nq * shape.num_heads < 1024 ? 16 : 4;
  const dim3 grid(static_cast<unsigned>(nq), static_cast<unsigned>(shape.num_heads));
  if (shape.head_dim <= 64) {
    Launch<2, kPaged>(grid, warps, shape, qs, rows, q, k, v, nk, causal, q_pos0, scale, out,
                      stream);
  } else if (shape.head_dim <= 128) {
    Launch<4, kPaged>(grid, warps, shape, qs, rows, q, k, v, nk, causal, q_pos0, scale, out,
                      stream);
  } else {
    Launch<8, kPaged>(grid, warps, shape, qs, rows, q, k, v, nk, causal, q_pos0, scale, out,
                      stream);
  }
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("AttentionKernel");
  return absl::OkStatus();
}

// Block r copies source row r to its token row start + r in the paged plane.
__global__ void PagedKvWriteKernel(const Bf16* src, int64_t src_stride, int64_t row_elems,
                                   Bf16* dst, KvRows rows, int64_t start) {
  if (rows.start != nullptr) start = *rows.start;
  const int64_t r = blockIdx.x;
  const Bf16* s = src + r * src_stride;
  Bf16* d = dst + RowOffset<true>(rows, start + r);
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) d[e] = s[e];
}

// Block (r, plane): plane 0 copies key row r, plane 1 value row r.
__global__ void PagedKvWrite2Kernel(const Bf16* k_src, const Bf16* v_src, int64_t src_stride,
                                    int64_t row_elems, Bf16* k_dst, Bf16* v_dst, KvRows rows,
                                    int64_t start) {
  if (rows.start != nullptr) start = *rows.start;
  const int64_t r = blockIdx.x;
  const Bf16* s = (blockIdx.y == 0 ? k_src : v_src) + r * src_stride;
  Bf16* d = (blockIdx.y == 0 ? k_dst : v_dst) + RowOffset<true>(rows, start + r);
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) d[e] = s[e];
}

}  // namespace

absl::Status Attention(const AttentionShape& shape, const Bf16* q, int64_t nq, const Bf16* k,
                       const Bf16* v, int64_t nk, bool causal, int64_t q_pos0, Bf16* out,
                       StreamHandle stream) {
  if (absl::Status st = CheckShape(shape, nq, causal, q_pos0); !st.ok()) return st;
  KvRows rows;
  rows.stride = KvStride(shape);
  return Run<false>(shape, q, nq, k, v, rows, nk, causal, q_pos0, out, stream);
}

absl::Status PagedAttention(const AttentionShape& shape, const Bf16* q, int64_t nq, const Bf16* k,
                            const Bf16* v, const PagedKv& paged, int64_t nk, bool causal,
                            int64_t q_pos0, Bf16* out, StreamHandle stream) {
  if (absl::Status st = CheckShape(shape, nq, causal, q_pos0); !st.ok()) return st;
  const KvRows rows{KvStride(shape), paged.blocks, paged.block_rows, paged.block_stride,
                    paged.start};
  if (paged.blocks == nullptr || paged.block_rows <= 0 ||
      paged.block_stride < paged.block_rows * rows.stride) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::PagedAttention: bad block table (rows ",
                                                   paged.block_rows, ", stride ",
                                                   paged.block_stride, ")"));
  }
  return Run<true>(shape, q, nq, k, v, rows, nk, causal, q_pos0, out, stream);
}

absl::Status PagedKvWrite(const Bf16* src, int64_t src_stride, int64_t rows, int64_t row_elems,
                          Bf16* dst, const PagedKv& paged, int64_t start, StreamHandle stream) {
  if (rows < 0 || rows > 0x7fffffffLL || row_elems <= 0 || start < 0 || paged.blocks == nullptr ||
      paged.block_rows <= 0 || paged.block_stride < paged.block_rows * row_elems) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::PagedKvWrite: bad shape rows=", rows,
                                                   " row_elems=", row_elems, " start=", start));
  }
  if (rows == 0) return absl::OkStatus();
  const KvRows kv{row_elems, paged.blocks, paged.block_rows, paged.block_stride, paged.start};
  PagedKvWriteKernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(src, src_stride, row_elems,
                                                                      dst, kv, start);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("PagedKvWriteKernel");
  return absl::OkStatus();
}

absl::Status PagedKvWrite2(const Bf16* k_src, const Bf16* v_src, int64_t src_stride, int64_t rows,
                           int64_t row_elems, Bf16* k_dst, Bf16* v_dst, const PagedKv& paged,
                           int64_t start, StreamHandle stream) {
  if (rows < 0 || rows > 0x7fffffffLL || row_elems <= 0 || start < 0 || paged.blocks == nullptr ||
      paged.block_rows <= 0 || paged.block_stride < paged.block_rows * row_elems) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::PagedKvWrite2: bad shape rows=", rows,
                                                   " row_elems=", row_elems, " start=", start));
  }
  if (rows == 0) return absl::OkStatus();
  const KvRows kv{row_elems, paged.blocks, paged.block_rows, paged.block_stride, paged.start};
  const dim3 grid(static_cast<unsigned>(rows), 2);
  PagedKvWrite2Kernel<<<grid, 128, 0, stream>>>(k_src, v_src, src_stride, row_elems, k_dst, v_dst,
                                                kv, start);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("PagedKvWrite2Kernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
