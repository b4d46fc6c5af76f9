#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/embedding.h"
#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda {
namespace {

using detail::LoadBf16;
using detail::StoreBf16;

constexpr int kThreads = 256;

// One block per row; grid-stride over rows for large n.
__global__ void GatherKernel(const Bf16* table, int64_t vocab, int hidden, const int32_t* ids,
                             int64_t n, Bf16* out) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int32_t id = ids[i];
    Bf16* dst = out + i * hidden;
    if (id < 0 || id >= vocab) {
      for (int c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = 0;
      continue;
    }
    const Bf16* src = table + static_cast<int64_t>(id) * hidden;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = src[c];
  }
}

template <bool kAdd>
__global__ void ScatterKernel(const Bf16* src, int64_t m, int hidden, const int32_t* positions,
                              Bf16* dst, int64_t dst_rows) {
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    const int32_t p = positions[i];
    if (p < 0 || p >= dst_rows) continue;
    Bf16* d = dst + static_cast<int64_t>(p) * hidden;
    const Bf16* s = src + i * hidden;
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
      if constexpr (kAdd) {
        StoreBf16(d, c, LoadBf16(d, c) + LoadBf16(s, c));
      } else {
        d[c] = s[c];
      }
    }
  }
}

unsigned Blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

absl::Status EmbeddingGather(const Bf16* table, int64_t vocab, int hidden, const int32_t* ids,
                             int64_t n, Bf16* out, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  GatherKernel<<<Blocks(n), kThreads, 0, stream>>>(table, vocab, hidden, ids, n, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("GatherKernel");
  return absl::OkStatus();
}

absl::Status ScatterRows(const Bf16* src, int64_t m, int hidden, const int32_t* positions,
                         Bf16* dst, int64_t dst_rows, StreamHandle stream) {
  if (m <= 0) return absl::OkStatus();
  ScatterKernel<false>
      <<<Blocks(m), kThreads, 0, stream>>>(src, m, hidden, positions, dst, dst_rows);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ScatterKernel");
  return absl::OkStatus();
}

absl::Status AddRowsAt(const Bf16* src, int64_t m, int hidden, const int32_t* positions, Bf16* dst,
                       int64_t dst_rows, StreamHandle stream) {
  if (m <= 0) return absl::OkStatus();
  ScatterKernel<true><<<Blocks(m), kThreads, 0, stream>>>(src, m, hidden, positions, dst, dst_rows);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ScatterKernel<add>");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
