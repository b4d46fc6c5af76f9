#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/moe_permute.h"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::LoadBf16;
using detail::StoreBf16;

constexpr int kThreads = 256;

// Block e counts the assignments to expert e (order-free, so atomics are fine).
__global__ void CountKernel(const int32_t* experts, int64_t total, int32_t* counts) {
  __shared__ int count;
  const int e = blockIdx.x;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  int mine = 0;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) mine += experts[i] == e;
  atomicAdd(&count, mine);
  __syncthreads();
  if (threadIdx.x == 0) counts[e] = count;
}

// Block e: its offset from the counts, then a stable compaction of the
// assignments to e (ballot prefix within warps, warp totals across the block).
__global__ void ScatterKernel(const int32_t* experts, int64_t total, int top_k, int num_experts,
                              const int32_t* counts, int32_t* offsets, int32_t* row_token,
                              int32_t* slot_row) {
  __shared__ int warp_count[kThreads / kWarp];
  __shared__ int base;
  const int e = blockIdx.x;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x == 0) {
    int off = 0;
    for (int x = 0; x < e; ++x) off += counts[x];
    base = off;
    offsets[e] = off;
    if (e == num_experts - 1) offsets[num_experts] = off + counts[e];
  }
  __syncthreads();
  for (int64_t start = 0; start < total; start += blockDim.x) {
    const int64_t i = start + threadIdx.x;
    const bool flag = i < total && experts[i] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, flag);
    const int in_warp = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int before = 0;
    int chunk_total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) {
      if (w < warp) before += warp_count[w];
      chunk_total += warp_count[w];
    }
    if (flag) {
      const int row = base + before + in_warp;
      row_token[row] = static_cast<int32_t>(i / top_k);
      slot_row[i] = row;
    }
    __syncthreads();  // everyone has read warp_count and base
    if (threadIdx.x == 0) base += chunk_total;
    __syncthreads();
  }
}

__global__ void PermuteKernel(const Bf16* x, int hidden, const int32_t* row_token, int64_t rows,
                              Bf16* xp) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const Bf16* src = x + static_cast<int64_t>(row_token[r]) * hidden;
    Bf16* dst = xp + r * hidden;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = src[c];
  }
}

__global__ void CombineKernel(const Bf16* yp, const int32_t* slot_row, const float* weights,
                              int64_t n, int top_k, int hidden, bool accumulate, Bf16* y) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    Bf16* yt = y + t * hidden;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
      float acc = 0.0f;
      for (int s = 0; s < top_k; ++s) {
        const int64_t row = slot_row[t * top_k + s];
        acc += weights[t * top_k + s] * LoadBf16(yp, row * hidden + c);
      }
      if (accumulate) acc += LoadBf16(yt, c);
      StoreBf16(yt, c, acc);
    }
  }
}

unsigned Blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

absl::Status BuildMoePermutation(const int32_t* experts, int64_t n, int top_k, int num_experts,
                                 int32_t* expert_counts, int32_t* expert_offsets,
                                 int32_t* row_token, int32_t* slot_row, StreamHandle stream) {
  if (num_experts <= 0 || num_experts > 65535 || top_k <= 0 || n < 0 || n * top_k > 0x7fffffffLL) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::BuildMoePermutation: n=", n, " top_k=", top_k, " E=", num_experts));
  }
  const int64_t total = n * top_k;
  CountKernel<<<num_experts, kThreads, 0, stream>>>(experts, total, expert_counts);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("CountKernel");
  ScatterKernel<<<num_experts, kThreads, 0, stream>>>(
      experts, total, top_k, num_experts, expert_counts, expert_offsets, row_token, slot_row);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ScatterKernel");
  return absl::OkStatus();
}

absl::Status PermuteRows(const Bf16* x, int hidden, const int32_t* row_token, int64_t rows,
                         Bf16* xp, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  PermuteKernel<<<Blocks(rows), kThreads, 0, stream>>>(x, hidden, row_token, rows, xp);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("PermuteKernel");
  return absl::OkStatus();
}

absl::Status UnpermuteCombine(const Bf16* yp, const int32_t* slot_row, const float* weights,
                              int64_t n, int top_k, int hidden, bool accumulate, Bf16* y,
                              StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  CombineKernel<<<Blocks(n), kThreads, 0, stream>>>(yp, slot_row, weights, n, top_k, hidden,
                                                    accumulate, y);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("CombineKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
