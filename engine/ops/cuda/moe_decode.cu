#include <cuda_fp8.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/moe_decode.h"
#include "engine/ops/cuda/router_topk.cuh"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::LoadActs8;
using detail::LoadBf16;
using detail::LoadWeights8;
using detail::WarpRouteToken;
using detail::WarpSum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
// Column kernels (weights stored [in, out]): 4 lanes cover a row segment of
// 32 output columns (8 each, one 16-byte load), 64 row lanes split the rows.
constexpr int kLanesPerRow = 4;
constexpr int kRowLanes = kThreads / kLanesPerRow;

__device__ __forceinline__ float Silu(float v) { return v / (1.0f + expf(-v)); }

// The block's expert: active[blockIdx.y], or -1 past the active count.
struct BlockExpert {
  int expert = -1;
  int row0 = 0;
  int rows = 0;
};
__device__ __forceinline__ BlockExpert ExpertOfBlock(const MoeDecodeRouting& r) {
  BlockExpert b;
  if (static_cast<int>(blockIdx.y) >= *r.active_count) return b;
  b.expert = r.active[blockIdx.y];
  b.row0 = r.offsets[b.expert];
  b.rows = r.offsets[b.expert + 1] - b.row0;
  return b;
}

// ---- Routing --------------------------------------------------------------

// Exclusive prefix sums over the block of (a, b) pairs, in thread order;
// `totals` gets the block's sums. part: 2 * kWarps ints of shared memory.
__device__ __forceinline__ void BlockExclusiveScan2(int& a, int& b, int* part, int* totals) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  int ia = a, ib = b;  // inclusive within the warp
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const int na = __shfl_up_sync(0xffffffffu, ia, o);
    const int nb = __shfl_up_sync(0xffffffffu, ib, o);
    if (lane >= o) ia += na, ib += nb;
  }
  if (lane == kWarp - 1) part[warp] = ia, part[kWarps + warp] = ib;
  __syncthreads();
  int wa = 0, wb = 0, ta = 0, tb = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) wa += part[w], wb += part[kWarps + w];
    ta += part[w], tb += part[kWarps + w];
  }
  a = wa + ia - a;
  b = wb + ib - b;
  totals[0] = ta, totals[1] = tb;
}

// start[0, E) holds each expert's row count: turns it into the row offsets
// (start[E] = the total) and writes r.offsets, r.active (the experts with
// rows, ascending) and *r.active_count. Each thread takes a contiguous run of
// experts, so a block-wide scan gives every run's offsets at once.
// REQUIRES: blockDim.x == kThreads; called by the whole block.
__device__ __forceinline__ void ScanCounts(int* start, int num_experts, const MoeDecodeRouting& r) {
  __shared__ int part[2 * kWarps];
  const int per = (num_experts + kThreads - 1) / kThreads;
  const int e0 = min(static_cast<int>(threadIdx.x) * per, num_experts);
  const int e1 = min(e0 + per, num_experts);
  int rows = 0, active = 0;
  for (int e = e0; e < e1; ++e) rows += start[e], active += start[e] > 0;
  int totals[2];
  BlockExclusiveScan2(rows, active, part, totals);
  for (int e = e0; e < e1; ++e) {
    const int count = start[e];
    start[e] = rows;
    r.offsets[e] = rows;
    if (count > 0) r.active[active++] = e;
    rows += count;
  }
  if (threadIdx.x == 0) {
    start[num_experts] = totals[0];
    r.offsets[num_experts] = totals[0];
    *r.active_count = totals[1];
  }
}

// One block. Warps take tokens in turn and route each one as moe_router.cu's
// RouterKernel does (WarpRouteToken) -- or, without logits, read the ids
// another router wrote to r.experts; then the block counts, scans and
// scatters the assignments.
__global__ void RouteKernel(const float* logits, int n, int num_experts, int top_k,
                            bool renormalize, MoeDecodeRouting r, int32_t* host_ids) {
  extern __shared__ float smem[];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int total = n * top_k;
  int* ids = reinterpret_cast<int*>(smem + kWarps * num_experts);  // [total]
  int* start = ids + total;                                        // [E + 1]
  if (logits == nullptr) {
    for (int i = threadIdx.x; i < total; i += blockDim.x) ids[i] = r.experts[i];
  }
  for (int t = warp; logits != nullptr && t < n; t += kWarps) {
    const int e = WarpRouteToken(logits + static_cast<int64_t>(t) * num_experts, num_experts,
                                 top_k, renormalize, smem + warp * num_experts,
                                 r.experts + t * top_k, r.weights + t * top_k);
    if (lane < top_k) ids[t * top_k + lane] = e;
    __syncwarp();  // p is the next token's
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= num_experts; e += blockDim.x) start[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < num_experts) atomicAdd(&start[e], 1);  // counts: order-free
  }
  __syncthreads();
  ScanCounts(start, num_experts, r);
  __syncthreads();
  // Within an expert, rows in ascending (token, slot) order: the rank of an
  // assignment among the earlier ones to the same expert.
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int e = ids[i];
    if (host_ids != nullptr) host_ids[i] = e;
    if (e < 0 || e >= num_experts) {
      r.slot_row[i] = -1;
      continue;
    }
    int rank = 0;
    for (int j = 0; j < i; ++j) rank += ids[j] == e;
    const int row = start[e] + rank;
    r.row_token[row] = i / top_k;
    r.slot_row[i] = row;
  }
}

// ---- Column kernels: weights [in, out] (kInOut) ---------------------------

// Sums acc over the block's row lanes: first the 8 lanes of a warp that
// share a column group (lane bits 2..4), then the warps through `part`.
// Leaves the 32 column sums of each row in sum[m][0..32).
template <int kRows>
__device__ __forceinline__ void ReduceColumns(float (&acc)[kRows][8], float (*part)[kRows][32],
                                              float (*sum)[32]) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      float v = acc[m][c];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      acc[m][c] = v;
    }
  }
  if (lane < kLanesPerRow) {  // lane == its column group
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
#pragma unroll
      for (int c = 0; c < 8; ++c) part[warp][m][lane * 8 + c] = acc[m][c];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kRows * 32; idx += kThreads) {
    const int m = idx / 32;
    const int j = idx % 32;
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += part[w][m][j];
    sum[m][j] = s;
  }
  __syncthreads();
}

// gate_up [H, 2I]: block (tile x, active expert y) computes gate columns
// [16x, 16x + 16) and the matching up columns for its expert's rows, then
// SwiGLU. Column group g < 2: gate columns 16x + 8g; g >= 2: up columns.
template <int kRows>
__global__ void GateUpInOutKernel(const Bf16* x, int hidden, int inter, MoeDecodeTable table,
                                  MoeDecodeRouting r, float* act) {
  __shared__ float part[kWarps][kRows][32];
  __shared__ float sum[kRows][32];
  const BlockExpert b = ExpertOfBlock(r);
  if (b.expert < 0) return;  // the whole block
  const int g = threadIdx.x % kLanesPerRow;
  const int rl = threadIdx.x / kLanesPerRow;
  const int c0 = blockIdx.x * 16;
  const int col = c0 + (g & 1) * 8;
  const bool live = col < inter;  // inter % 8 == 0: a group is all in or all out
  const int64_t ld = 2 * static_cast<int64_t>(inter);
  const Bf16* w = table.gate_up[b.expert] + (g < 2 ? 0 : inter) + col;
  for (int base = 0; base < b.rows; base += kRows) {
    const int cnt = min(kRows, b.rows - base);
    const Bf16* xr[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      xr[m] = x + static_cast<int64_t>(r.row_token[b.row0 + base + min(m, cnt - 1)]) * hidden;
    }
    float acc[kRows][8] = {};
    if (live) {
#pragma unroll 4
      for (int i = rl; i < hidden; i += kRowLanes) {
        float wv[8];
        LoadWeights8(w + i * ld, wv);
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m < cnt) {
            const float xv = LoadBf16(xr[m], i);
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[m][c] = fmaf(xv, wv[c], acc[m][c]);
          }
        }
      }
    }
    ReduceColumns<kRows>(acc, part, sum);
    for (int idx = threadIdx.x; idx < kRows * 16; idx += kThreads) {
      const int m = idx / 16;
      const int j = idx % 16;
      if (m < cnt && c0 + j < inter) {
        act[static_cast<int64_t>(b.row0 + base + m) * inter + c0 + j] =
            Silu(sum[m][j]) * sum[m][16 + j];
      }
    }
    __syncthreads();  // part and sum serve the next chunk of rows
  }
}

// down [I, H]: block (tile x, active expert y) computes output columns
// [32x, 32x + 32) of its expert's rows.
template <int kRows>
__global__ void DownInOutKernel(const float* act, int hidden, int inter, MoeDecodeTable table,
                                MoeDecodeRouting r, float* yp) {
  __shared__ float part[kWarps][kRows][32];
  __shared__ float sum[kRows][32];
  const BlockExpert b = ExpertOfBlock(r);
  if (b.expert < 0) return;
  const int g = threadIdx.x % kLanesPerRow;
  const int rl = threadIdx.x / kLanesPerRow;
  const int o0 = blockIdx.x * 32;
  const int col = o0 + g * 8;
  const bool live = col < hidden;
  const Bf16* w = table.down[b.expert] + col;
  for (int base = 0; base < b.rows; base += kRows) {
    const int cnt = min(kRows, b.rows - base);
    const float* ar[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      ar[m] = act + static_cast<int64_t>(b.row0 + base + min(m, cnt - 1)) * inter;
    }
    float acc[kRows][8] = {};
    if (live) {
#pragma unroll 4
      for (int i = rl; i < inter; i += kRowLanes) {
        float wv[8];
        LoadWeights8(w + static_cast<int64_t>(i) * hidden, wv);
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m < cnt) {
            const float a = ar[m][i];
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[m][c] = fmaf(a, wv[c], acc[m][c]);
          }
        }
      }
    }
    ReduceColumns<kRows>(acc, part, sum);
    for (int idx = threadIdx.x; idx < kRows * 32; idx += kThreads) {
      const int m = idx / 32;
      const int j = idx % 32;
      if (m < cnt && o0 + j < hidden) {
        yp[static_cast<int64_t>(b.row0 + base + m) * hidden + o0 + j] = sum[m][j];
      }
    }
    __syncthreads();
  }
}

// ---- Row kernels: weights [out, in] (kOutIn) -------------------------------

// e4m3fn -> fp32 exactly (through the half the hardware converts to).
__device__ __forceinline__ float E4m3ToFloat(unsigned v) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(h));
}

// Weights c .. c + 7 of row r of an [rows, cols] matrix m as floats: bf16,
// or (kFp8) e4m3 bytes in one 8-byte streamed load, each times the scale of
// its block (one block: c is a multiple of 8, block_cols too).
template <bool kFp8>
__device__ __forceinline__ void LoadRowWeights8(const MoeDecodeTable& t, const Bf16* m,
                                                const void* scale, int r, int c, int cols,
                                                float* v) {
  if constexpr (kFp8) {
    // 32-bit index math (an expert matrix is far below 2^31 values).
    const int k = (r / t.block_rows) * ((cols + t.block_cols - 1) / t.block_cols) + c / t.block_cols;
    const float s = t.scale_bf16 ? LoadBf16(static_cast<const Bf16*>(scale), k)
                                 : static_cast<const float*>(scale)[k];
    const uint2 u = __ldcs(reinterpret_cast<const uint2*>(reinterpret_cast<const uint8_t*>(m) +
                                                          static_cast<int64_t>(r) * cols + c));
    const unsigned w[2] = {u.x, u.y};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = E4m3ToFloat((w[i / 4] >> (8 * (i % 4))) & 0xffu) * s;
  } else {
    LoadWeights8(m + static_cast<int64_t>(r) * cols + c, v);
  }
}

// Warp w of block (x, y) computes output j = 8x + w of gate and up (rows j
// of [I, H]) for its expert's rows, lanes striding over H; then SwiGLU.
template <int kRows, bool kFp8>
__global__ void GateUpOutInKernel(const Bf16* x, int hidden, int inter, MoeDecodeTable table,
                                  MoeDecodeRouting r, float* act) {
  const BlockExpert b = ExpertOfBlock(r);
  if (b.expert < 0) return;
  const int lane = threadIdx.x % kWarp;
  const int j = blockIdx.x * kWarps + threadIdx.x / kWarp;
  if (j >= inter) return;  // a whole warp; no block barrier below
  const Bf16* gate = table.gate_up[b.expert];
  const Bf16* up = table.up[b.expert];
  const void* gate_scale = kFp8 ? table.gate_scale[b.expert] : nullptr;
  const void* up_scale = kFp8 ? table.up_scale[b.expert] : nullptr;
  for (int base = 0; base < b.rows; base += kRows) {
    const int cnt = min(kRows, b.rows - base);
    const Bf16* xr[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      xr[m] = x + static_cast<int64_t>(r.row_token[b.row0 + base + min(m, cnt - 1)]) * hidden;
    }
    float ag[kRows] = {};
    float au[kRows] = {};
    for (int c = lane * 8; c < hidden; c += kWarp * 8) {
      float gv[8], uv[8];
      LoadRowWeights8<kFp8>(table, gate, gate_scale, j, c, hidden, gv);
      LoadRowWeights8<kFp8>(table, up, up_scale, j, c, hidden, uv);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        if (m < cnt) {
          float xv[8];
          LoadActs8(xr[m] + c, xv);
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            ag[m] = fmaf(gv[q], xv[q], ag[m]);
            au[m] = fmaf(uv[q], xv[q], au[m]);
          }
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      ag[m] = WarpSum(ag[m]);
      au[m] = WarpSum(au[m]);
    }
    if (lane == 0) {
      for (int m = 0; m < cnt; ++m) {
        act[static_cast<int64_t>(b.row0 + base + m) * inter + j] = Silu(ag[m]) * au[m];
      }
    }
  }
}

// Warp w of block (x, y) computes output o = 8x + w (row o of down [H, I]).
template <int kRows, bool kFp8>
__global__ void DownOutInKernel(const float* act, int hidden, int inter, MoeDecodeTable table,
                                MoeDecodeRouting r, float* yp) {
  const BlockExpert b = ExpertOfBlock(r);
  if (b.expert < 0) return;
  const int lane = threadIdx.x % kWarp;
  const int o = blockIdx.x * kWarps + threadIdx.x / kWarp;
  if (o >= hidden) return;
  const Bf16* down = table.down[b.expert];
  const void* down_scale = kFp8 ? table.down_scale[b.expert] : nullptr;
  for (int base = 0; base < b.rows; base += kRows) {
    const int cnt = min(kRows, b.rows - base);
    const float* ar[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      ar[m] = act + static_cast<int64_t>(b.row0 + base + min(m, cnt - 1)) * inter;
    }
    float acc[kRows] = {};
    for (int c = lane * 8; c < inter; c += kWarp * 8) {
      float dv[8];
      LoadRowWeights8<kFp8>(table, down, down_scale, o, c, inter, dv);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        if (m < cnt) {
          float av[8];
          LoadActs8(ar[m] + c, av);
#pragma unroll
          for (int q = 0; q < 8; ++q) acc[m] = fmaf(dv[q], av[q], acc[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[m] = WarpSum(acc[m]);
    if (lane == 0) {
      for (int m = 0; m < cnt; ++m) {
        yp[static_cast<int64_t>(b.row0 + base + m) * hidden + o] = acc[m];
      }
    }
  }
}

// ---- Combine ---------------------------------------------------------------------

// Block (x, t) sums columns [256x, 256x + 256) of token t: the slots' rows
// and weights read once into shared memory, many blocks per token (one block
// per token left the step waiting on one SM's loads, 20 us a layer).
__global__ void CombineKernel(const float* __restrict__ yp, const int32_t* __restrict__ slot_row,
                              const float* __restrict__ weights, int top_k, int hidden,
                              bool accumulate, Bf16* y, Bf16* hs) {
  __shared__ int s_row[32];
  __shared__ float s_w[32];
  const int64_t t = blockIdx.y;
  if (threadIdx.x < top_k) {
    s_row[threadIdx.x] = slot_row[t * top_k + threadIdx.x];
    s_w[threadIdx.x] = weights[t * top_k + threadIdx.x];
  }
  __syncthreads();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= hidden) return;
  const int64_t i = t * hidden + c;
  float acc = 0.0f;
  for (int s = 0; s < top_k; ++s) {  // the slots in order, as cpu::Combine
    const int row = s_row[s];
    if (row >= 0) acc += s_w[s] * yp[static_cast<int64_t>(row) * hidden + c];
  }
  if (accumulate) acc += LoadBf16(y, i);  // the shared experts' output, already in y
  const __nv_bfloat16 yb = __float2bfloat16_rn(acc);
  reinterpret_cast<__nv_bfloat16*>(y)[i] = yb;
  reinterpret_cast<__nv_bfloat16*>(hs)[i] =
      __float2bfloat16_rn(LoadBf16(hs, i) + __bfloat162float(yb));
}

// An FP8 table is read by the per-expert kernels only, with 8-column groups
// inside one scale block.
absl::Status CheckTable(const char* op, const MoeDecodeTable& t) {
  if (!t.fp8) return absl::OkStatus();
  if (t.layout != WeightLayout::kOutIn || t.block_rows <= 0 || t.block_cols <= 0 ||
      t.block_cols % 8 != 0 || t.gate_scale == nullptr || t.up_scale == nullptr ||
      t.down_scale == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda::", op, ": an FP8 table needs the per-expert layout, scales and blocks of a "
        "multiple of 8 columns (block ", t.block_rows, " x ", t.block_cols, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckRows(const char* op, int64_t n, int hidden, int inter, int num_experts,
                       int top_k) {
  if (n < 1 || n > kMaxDecodeRows || !MoeDecodeSupports(hidden, inter, num_experts, top_k)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::", op, ": n=", n, " hidden=", hidden,
                                                   " inter=", inter, " E=", num_experts,
                                                   " top_k=", top_k, " not supported"));
  }
  return absl::OkStatus();
}

unsigned ExpertBlocks(int64_t n, int top_k, int num_experts) {
  return static_cast<unsigned>(std::min<int64_t>(n * top_k, num_experts));
}

// Rows of one expert per pass: one for a single-token step (every expert
// has one row), more when the batch's rows may share experts.
int RowsPerPass(int64_t n) { return n == 1 ? 1 : n <= 4 ? 4 : 8; }

template <template <int> class Launcher, typename... Args>
void LaunchByRows(int64_t n, Args... args) {
  switch (RowsPerPass(n)) {
    case 1:
      Launcher<1>::Run(args...);
      break;
    case 4:
      Launcher<4>::Run(args...);
      break;
    default:
      Launcher<8>::Run(args...);
  }
}

template <int kRows>
struct GateUpLauncher {
  static void Run(dim3 grid, StreamHandle stream, const Bf16* x, int hidden, int inter,
                  const MoeDecodeTable& t, const MoeDecodeRouting& r, float* act) {
    if (t.layout == WeightLayout::kInOut) {
      GateUpInOutKernel<kRows><<<grid, kThreads, 0, stream>>>(x, hidden, inter, t, r, act);
    } else if (t.fp8) {
      GateUpOutInKernel<kRows, true><<<grid, kThreads, 0, stream>>>(x, hidden, inter, t, r, act);
    } else {
      GateUpOutInKernel<kRows, false><<<grid, kThreads, 0, stream>>>(x, hidden, inter, t, r, act);
    }
  }
};

template <int kRows>
struct DownLauncher {
  static void Run(dim3 grid, StreamHandle stream, const float* act, int hidden, int inter,
                  const MoeDecodeTable& t, const MoeDecodeRouting& r, float* yp) {
    if (t.layout == WeightLayout::kInOut) {
      DownInOutKernel<kRows><<<grid, kThreads, 0, stream>>>(act, hidden, inter, t, r, yp);
    } else if (t.fp8) {
      DownOutInKernel<kRows, true><<<grid, kThreads, 0, stream>>>(act, hidden, inter, t, r, yp);
    } else {
      DownOutInKernel<kRows, false><<<grid, kThreads, 0, stream>>>(act, hidden, inter, t, r, yp);
    }
  }
};

}  // namespace

bool MoeDecodeSupports(int hidden, int inter, int num_experts, int top_k) {
  return hidden > 0 && hidden % 8 == 0 && inter > 0 && inter % 8 == 0 && num_experts > 0 &&
         num_experts <= kMaxDecodeExperts && top_k > 0 && top_k <= 32 && top_k <= num_experts;
}

absl::Status MoeDecodeRoute(const float* logits, int64_t n, int num_experts, int top_k,
                            bool renormalize, const MoeDecodeRouting& routing, int32_t* host_ids,
                            StreamHandle stream) {
  VISMOE_RETURN_IF_ERROR(CheckRows("MoeDecodeRoute", n, 8, 8, num_experts, top_k));
  if (logits == nullptr) {  // (RouteKernel would permute whatever ids are there)
    return absl::InvalidArgumentError("cuda::MoeDecodeRoute: no logits (MoeDecodePermute?)");
  }
  const size_t smem =
      (static_cast<size_t>(kWarps) * num_experts + n * top_k + num_experts + 1) * sizeof(float);
  RouteKernel<<<1, kThreads, smem, stream>>>(logits, static_cast<int>(n), num_experts, top_k,
                                             renormalize, routing, host_ids);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RouteKernel");
  return absl::OkStatus();
}

absl::Status MoeDecodePermute(int64_t n, int num_experts, int top_k,
                              const MoeDecodeRouting& routing, int32_t* host_ids,
                              StreamHandle stream) {
  VISMOE_RETURN_IF_ERROR(CheckRows("MoeDecodePermute", n, 8, 8, num_experts, top_k));
  const size_t smem =
      (static_cast<size_t>(kWarps) * num_experts + n * top_k + num_experts + 1) * sizeof(float);
  RouteKernel<<<1, kThreads, smem, stream>>>(nullptr, static_cast<int>(n), num_experts, top_k,
                                             false, routing, host_ids);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RouteKernel (permute)");
  return absl::OkStatus();
}

absl::Status MoeDecodeGateUp(const Bf16* x, int64_t n, int hidden, int inter, int top_k,
                             int num_experts, const MoeDecodeTable& table,
                             const MoeDecodeRouting& routing, float* act, StreamHandle stream) {
  VISMOE_RETURN_IF_ERROR(CheckRows("MoeDecodeGateUp", n, hidden, inter, num_experts, top_k));
  VISMOE_RETURN_IF_ERROR(CheckTable("MoeDecodeGateUp", table));
  const int per_block = table.layout == WeightLayout::kInOut ? 16 : kWarps;
  const dim3 grid((inter + per_block - 1) / per_block, ExpertBlocks(n, top_k, num_experts));
  LaunchByRows<GateUpLauncher>(n, grid, stream, x, hidden, inter, table, routing, act);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("MoeDecodeGateUp");
  return absl::OkStatus();
}

absl::Status MoeDecodeDown(const float* act, int64_t n, int hidden, int inter, int top_k,
                           int num_experts, const MoeDecodeTable& table,
                           const MoeDecodeRouting& routing, float* yp, StreamHandle stream) {
  VISMOE_RETURN_IF_ERROR(CheckRows("MoeDecodeDown", n, hidden, inter, num_experts, top_k));
  VISMOE_RETURN_IF_ERROR(CheckTable("MoeDecodeDown", table));
  const int per_block = table.layout == WeightLayout::kInOut ? 32 : kWarps;
  const dim3 grid((hidden + per_block - 1) / per_block, ExpertBlocks(n, top_k, num_experts));
  LaunchByRows<DownLauncher>(n, grid, stream, act, hidden, inter, table, routing, yp);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("MoeDecodeDown");
  return absl::OkStatus();
}

absl::Status MoeDecodeCombine(const float* yp, const MoeDecodeRouting& routing, int64_t n,
                              int top_k, int hidden, Bf16* y, Bf16* hs, StreamHandle stream,
                              bool accumulate) {
  if (n < 1 || n > kMaxDecodeRows || top_k < 1 || top_k > 32 || hidden < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::MoeDecodeCombine: n=", n, " top_k=", top_k, " hidden=", hidden));
  }
  const dim3 grid((hidden + kThreads - 1) / kThreads, static_cast<unsigned>(n));
  CombineKernel<<<grid, kThreads, 0, stream>>>(
      yp, routing.slot_row, routing.weights, top_k, hidden, accumulate, y, hs);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("MoeDecodeCombine");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
