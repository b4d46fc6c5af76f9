#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/norm.h"

namespace vismoe::cuda {
namespace {

using detail::BlockSum;
using detail::Bf16x8ToFloat;
using detail::LoadBf16;
using detail::StoreBf16;

// One block per (row, head). Two passes over global memory (L1/L2 resident):
// sum of squares, then scale; keeps any dim without a register-array bound.
__global__ void RmsNormKernel(const Bf16* x, int64_t xs, int num_heads, int dim, const Bf16* w,
                              float eps, Bf16* y, int64_t ys) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x / num_heads;
  const int head = static_cast<int>(blockIdx.x % num_heads);
  const Bf16* xr = x + row * xs + static_cast<int64_t>(head) * dim;
  Bf16* yr = y + row * ys + static_cast<int64_t>(head) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = LoadBf16(xr, i);
    ss += v * v;
  }
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
  // All reads of this row finished inside BlockSum's barriers: in-place is safe.
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    StoreBf16(yr, i, LoadBf16(w, i) * (LoadBf16(xr, i) * inv));
  }
}

// The same for rows whose elements come in whole 16-byte groups (dim % 8 ==
// 0, aligned rows): one thread per eight elements, held in registers between
// the sum of squares and the scale, so one pass over memory and no strided
// loop (the decode step's norms are a few KB each: latency, not bandwidth).
__global__ void RmsNormVec8Kernel(const Bf16* x, int64_t xs, int num_heads, int dim,
                                  const Bf16* w, float eps, Bf16* y, int64_t ys) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x / num_heads;
  const int head = static_cast<int>(blockIdx.x % num_heads);
  const Bf16* xr = x + row * xs + static_cast<int64_t>(head) * dim;
  Bf16* yr = y + row * ys + static_cast<int64_t>(head) * dim;
  const int c = threadIdx.x * 8;
  const bool live = c < dim;
  float v[8] = {};
  if (live) Bf16x8ToFloat(*reinterpret_cast<const uint4*>(xr + c), v);
  float ss = 0.0f;
#pragma unroll
  for (int q = 0; q < 8; ++q) ss += v[q] * v[q];
  ss = BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
  if (!live) return;
  float wv[8];
  Bf16x8ToFloat(*reinterpret_cast<const uint4*>(w + c), wv);
  __align__(16) __nv_bfloat16 out[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) out[q] = __float2bfloat16_rn(wv[q] * (v[q] * inv));
  *reinterpret_cast<uint4*>(yr + c) = *reinterpret_cast<const uint4*>(out);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__global__ void LayerNormKernel(const Bf16* x, int dim, const Bf16* w, const Bf16* b, float eps,
                                Bf16* y) {
  __shared__ float scratch[32];
  const Bf16* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  Bf16* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
  float s = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) s += LoadBf16(xr, i);
  const float mean = BlockSum(s, scratch) / static_cast<float>(dim);
  float sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = LoadBf16(xr, i) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(BlockSum(sq, scratch) / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    StoreBf16(yr, i, (LoadBf16(xr, i) - mean) * rstd * LoadBf16(w, i) + LoadBf16(b, i));
  }
}

int ThreadsFor(int dim) {
  int t = 32;
  while (t < dim && t < 1024) t *= 2;
  return t;
}

}  // namespace

absl::Status RmsNorm(const Bf16* x, int64_t x_row_stride, int64_t n, int num_heads, int dim,
                     const Bf16* weight, float eps, Bf16* y, int64_t y_row_stride,
                     StreamHandle stream) {
  if (n <= 0 || num_heads <= 0) return absl::OkStatus();
  if (dim <= 0 || dim > 8192) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::RmsNorm: dim ", dim, " not in [1, 8192]"));
  }
  const int64_t blocks = n * num_heads;
  if (blocks > 0x7fffffffLL) return absl::InvalidArgumentError("cuda::RmsNorm: too many rows");
  if (dim % 8 == 0 && x_row_stride % 8 == 0 && y_row_stride % 8 == 0 && Aligned16(x) &&
      Aligned16(y) && Aligned16(weight)) {
    const int threads = (dim / 8 + 31) / 32 * 32;
    RmsNormVec8Kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        x, x_row_stride, num_heads, dim, weight, eps, y, y_row_stride);
  } else {
    RmsNormKernel<<<static_cast<unsigned>(blocks), ThreadsFor(dim), 0, stream>>>(
        x, x_row_stride, num_heads, dim, weight, eps, y, y_row_stride);
  }
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RmsNormKernel");
  return absl::OkStatus();
}

absl::Status LayerNorm(const Bf16* x, int64_t n, int dim, const Bf16* weight, const Bf16* bias,
                       float eps, Bf16* y, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  if (dim <= 0 || n > 0x7fffffffLL) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::LayerNorm: bad shape n=", n, " dim=", dim));
  }
  LayerNormKernel<<<static_cast<unsigned>(n), ThreadsFor(dim), 0, stream>>>(x, dim, weight, bias,
                                                                            eps, y);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("LayerNormKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
