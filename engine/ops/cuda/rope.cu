#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/rope.h"

namespace vismoe::cuda {
namespace {

using detail::LoadBf16;
using detail::StoreBf16;

__device__ __forceinline__ void Rotate(Bf16* v, int j, int half, float c, float s) {
  const float a = LoadBf16(v, j);
  const float b = LoadBf16(v, j + half);
  StoreBf16(v, j, a * c - b * s);
  StoreBf16(v, j + half, b * c + a * s);
}

// One block per token; threads stride over (head, j < half).
__global__ void RopeKernel(Bf16* x, int64_t n, int num_heads, int head_dim, int64_t row_stride,
                           const int64_t* positions, const float* inv_freq, int sec1, int sec2,
                           float scale, const float* row_scale) {
  const int64_t i = blockIdx.x;
  if (row_scale != nullptr) scale *= row_scale[i];
  const int half = head_dim / 2;
  for (int idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int j = idx % half;
    int axis = 0;
    if (j % 3 == 1 && j < 3 * sec1) axis = 1;
    if (j % 3 == 2 && j < 3 * sec2) axis = 2;
    const float f = static_cast<float>(positions[axis * n + i]) * inv_freq[j];
    Rotate(x + i * row_stride + static_cast<int64_t>(h) * head_dim, j, half, cosf(f) * scale,
           sinf(f) * scale);
  }
}

// Block (row i, head h of the q heads then the k heads); thread j < half
// owns the pair (j, j + half).
__global__ void QkNormRopeKernel(Bf16* qkv, int64_t n, int num_heads, int head_dim,
                                 int64_t row_stride, const Bf16* q_norm, const Bf16* k_norm,
                                 float eps, const int64_t* positions, const float* inv_freq,
                                 int sec1, int sec2) {
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int half = head_dim / 2;
  const int j = threadIdx.x;
  Bf16* v = qkv + i * row_stride + static_cast<int64_t>(h) * head_dim;
  const Bf16* w = h < num_heads ? q_norm : k_norm;
  const bool live = j < half;
  const float a = live ? LoadBf16(v, j) : 0.0f;
  const float b = live ? LoadBf16(v, j + half) : 0.0f;
  const float ss = detail::BlockSum(a * a + b * b, scratch);
  if (!live) return;  // after the block's last barrier
  const float inv = rsqrtf(ss / static_cast<float>(head_dim) + eps);
  // RmsNorm's store rounds; the rotation reads the rounded values.
  const float na = __bfloat162float(__float2bfloat16_rn(LoadBf16(w, j) * (a * inv)));
  const float nb = __bfloat162float(__float2bfloat16_rn(LoadBf16(w, j + half) * (b * inv)));
  int axis = 0;
  if (j % 3 == 1 && j < 3 * sec1) axis = 1;
  if (j % 3 == 2 && j < 3 * sec2) axis = 2;
  const float f = static_cast<float>(positions[axis * n + i]) * inv_freq[j];
  const float c = cosf(f);
  const float s = sinf(f);
  StoreBf16(v, j, na * c - nb * s);
  StoreBf16(v, j + half, nb * c + na * s);
}

__global__ void RopeTableKernel(Bf16* x, int num_heads, int head_dim, int64_t row_stride,
                                const float* cos_t, const float* sin_t) {
  const int64_t i = blockIdx.x;
  const int half = head_dim / 2;
  const float* c = cos_t + i * head_dim;
  const float* s = sin_t + i * head_dim;
  for (int idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int j = idx % half;
    Bf16* v = x + i * row_stride + static_cast<int64_t>(h) * head_dim;
    // cpu::ApplyRope reads cos/sin at j for the first half and j + half for the second.
    const float a = LoadBf16(v, j);
    const float b = LoadBf16(v, j + half);
    StoreBf16(v, j, a * c[j] - b * s[j]);
    StoreBf16(v, j + half, b * c[j + half] + a * s[j + half]);
  }
}

absl::Status CheckShape(int64_t n, int num_heads, int head_dim, int64_t row_stride) {
  if (head_dim <= 0 || head_dim % 2 != 0 || num_heads <= 0 ||
      row_stride < static_cast<int64_t>(num_heads) * head_dim || n > 0x7fffffffLL) {
    return absl::InvalidArgumentError(absl::StrCat("cuda rope: bad shape n=", n,
                                                   " heads=", num_heads, " head_dim=", head_dim,
                                                   " row_stride=", row_stride));
  }
  return absl::OkStatus();
}

int ThreadsFor(int work) { return work >= 256 ? 256 : ((work + 31) / 32) * 32; }

}  // namespace

std::vector<float> RopeInvFreq(int head_dim, double theta) {
  std::vector<float> inv(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv[j] = 1.0f / static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
  }
  return inv;
}

absl::Status ApplyRope(Bf16* x, int64_t n, int num_heads, int head_dim, int64_t row_stride,
                       const int64_t* positions, const float* inv_freq, const int* mrope_section,
                       StreamHandle stream, float scale, const float* row_scale) {
  if (n <= 0) return absl::OkStatus();
  absl::Status st = CheckShape(n, num_heads, head_dim, row_stride);
  if (!st.ok()) return st;
  int sec1 = 0, sec2 = 0;
  if (mrope_section != nullptr) {
    if (mrope_section[0] + mrope_section[1] + mrope_section[2] != head_dim / 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda::ApplyRope: mrope_section [", mrope_section[0], ", ", mrope_section[1],
                       ", ", mrope_section[2], "] does not sum to head_dim/2 = ", head_dim / 2));
    }
    sec1 = mrope_section[1];
    sec2 = mrope_section[2];
  }
  RopeKernel<<<static_cast<unsigned>(n), ThreadsFor(num_heads * head_dim / 2), 0, stream>>>(
      x, n, num_heads, head_dim, row_stride, positions, inv_freq, sec1, sec2, scale, row_scale);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RopeKernel");
  return absl::OkStatus();
}

absl::Status QkNormRope(Bf16* qkv, int64_t n, int num_heads, int num_kv_heads, int head_dim,
                        int64_t row_stride, const Bf16* q_norm, const Bf16* k_norm, float eps,
                        const int64_t* positions, const float* inv_freq, const int* mrope_section,
                        StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  absl::Status st = CheckShape(n, num_heads + num_kv_heads, head_dim, row_stride);
  if (!st.ok()) return st;
  if (head_dim > 512 || num_heads + num_kv_heads > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::QkNormRope: head_dim ", head_dim, ", ",
                                                   num_heads + num_kv_heads, " heads"));
  }
  int sec1 = 0, sec2 = 0;
  if (mrope_section != nullptr) {
    if (mrope_section[0] + mrope_section[1] + mrope_section[2] != head_dim / 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda::QkNormRope: mrope_section [", mrope_section[0], ", ", mrope_section[1], ", ",
          mrope_section[2], "] does not sum to head_dim/2 = ", head_dim / 2));
    }
    sec1 = mrope_section[1];
    sec2 = mrope_section[2];
  }
  const int threads = ((head_dim / 2 + 31) / 32) * 32;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(num_heads + num_kv_heads));
  QkNormRopeKernel<<<grid, threads, 0, stream>>>(qkv, n, num_heads, head_dim, row_stride, q_norm,
                                                 k_norm, eps, positions, inv_freq, sec1, sec2);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("QkNormRopeKernel");
  return absl::OkStatus();
}

absl::Status ApplyRopeTable(Bf16* x, int64_t n, int num_heads, int head_dim, int64_t row_stride,
                            const float* cos, const float* sin, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  absl::Status st = CheckShape(n, num_heads, head_dim, row_stride);
  if (!st.ok()) return st;
  RopeTableKernel<<<static_cast<unsigned>(n), ThreadsFor(num_heads * head_dim / 2), 0, stream>>>(
      x, num_heads, head_dim, row_stride, cos, sin);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RopeTableKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
