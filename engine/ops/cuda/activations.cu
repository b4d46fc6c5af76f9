#include "engine/ops/cuda/activations.h"

#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda {
namespace {

using detail::GridFor;
using detail::LoadBf16;
using detail::StoreBf16;

constexpr int kThreads = 256;

__device__ __forceinline__ float SiluF(float x) { return x / (1.0f + expf(-x)); }

// Grid-stride loops: any n with a bounded grid.
__global__ void SiluMulKernel(const Bf16* g, const Bf16* u, int64_t n, Bf16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreBf16(out, i, SiluF(LoadBf16(g, i)) * LoadBf16(u, i));
  }
}

__global__ void SiluMulFusedKernel(const Bf16* gu, int64_t rows, int64_t inter, Bf16* out) {
  const int64_t total = rows * inter;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / inter;
    const int64_t c = i % inter;
    const Bf16* row = gu + r * 2 * inter;
    StoreBf16(out, i, SiluF(LoadBf16(row, c)) * LoadBf16(row, inter + c));
  }
}

__global__ void GeluTanhKernel(Bf16* x, int64_t n) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = LoadBf16(x, i);
    StoreBf16(x, i, 0.5f * v * (1.0f + tanhf(kBeta * (v + kKappa * v * v * v))));
  }
}

__global__ void GeluErfKernel(Bf16* x, int64_t n) {
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = LoadBf16(x, i);
    StoreBf16(x, i, 0.5f * v * (1.0f + erff(v * kInvSqrt2)));
  }
}

__global__ void AddBiasKernel(Bf16* y, int64_t rows, int64_t cols, const Bf16* bias) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreBf16(y, i, LoadBf16(y, i) + LoadBf16(bias, i % cols));
  }
}

__global__ void ClampedSwigluKernel(const Bf16* gate_up, int64_t rows, int64_t inter, float alpha,
                                    float limit, Bf16* out) {
  const int64_t total = rows * inter;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    const Bf16* row = gate_up + r * 2 * inter;
    // std::min / std::clamp's comparisons, so NaN stays NaN as on the CPU.
    const float g = LoadBf16(row, 2 * c), u = LoadBf16(row, 2 * c + 1);
    const float gate = limit < g ? limit : g;
    const float up = u < -limit ? -limit : (limit < u ? limit : u);
    StoreBf16(out, i, (up + 1.0f) * (gate / (1.0f + expf(-alpha * gate))));
  }
}

__global__ void AddBiasF32Kernel(float* y, int64_t rows, int64_t cols, const float* bias) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

__global__ void ClampKernel(Bf16* x, int64_t n, float limit) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = LoadBf16(x, i);
    // Comparisons, not fminf/fmaxf: those would turn NaN into the limit.
    StoreBf16(x, i, v < -limit ? -limit : (v > limit ? limit : v));
  }
}

__global__ void AddKernel(const Bf16* a, const Bf16* b, int64_t n, Bf16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    StoreBf16(out, i, LoadBf16(a, i) + LoadBf16(b, i));
  }
}

}  // namespace

absl::Status SiluMul(const Bf16* gate, const Bf16* up, int64_t n, Bf16* out, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  SiluMulKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(gate, up, n, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("SiluMulKernel");
  return absl::OkStatus();
}

absl::Status SiluMulFused(const Bf16* gate_up, int64_t rows, int64_t inter, Bf16* out,
                          StreamHandle stream) {
  if (rows <= 0 || inter <= 0) return absl::OkStatus();
  SiluMulFusedKernel<<<GridFor(rows * inter, kThreads), kThreads, 0, stream>>>(gate_up, rows, inter,
                                                                               out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("SiluMulFusedKernel");
  return absl::OkStatus();
}

absl::Status GeluTanh(Bf16* x, int64_t n, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  GeluTanhKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, n);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("GeluTanhKernel");
  return absl::OkStatus();
}

absl::Status GeluErf(Bf16* x, int64_t n, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  GeluErfKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, n);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("GeluErfKernel");
  return absl::OkStatus();
}

absl::Status AddBias(Bf16* y, int64_t rows, int64_t cols, const Bf16* bias, StreamHandle stream) {
  if (rows <= 0 || cols <= 0) return absl::OkStatus();
  AddBiasKernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(y, rows, cols, bias);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("AddBiasKernel");
  return absl::OkStatus();
}

absl::Status ClampedSwigluInterleaved(const Bf16* gate_up, int64_t rows, int64_t inter, float alpha,
                                      float limit, Bf16* out, StreamHandle stream) {
  if (rows <= 0 || inter <= 0) return absl::OkStatus();
  ClampedSwigluKernel<<<GridFor(rows * inter, kThreads), kThreads, 0, stream>>>(
      gate_up, rows, inter, alpha, limit, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ClampedSwigluKernel");
  return absl::OkStatus();
}

absl::Status AddBiasF32(float* y, int64_t rows, int64_t cols, const float* bias,
                        StreamHandle stream) {
  if (rows <= 0 || cols <= 0) return absl::OkStatus();
  AddBiasF32Kernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(y, rows, cols, bias);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("AddBiasF32Kernel");
  return absl::OkStatus();
}

absl::Status Clamp(Bf16* x, int64_t n, float limit, StreamHandle stream) {
  if (!(limit > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::Clamp: limit ", limit, " <= 0"));
  }
  if (n <= 0) return absl::OkStatus();
  ClampKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(x, n, limit);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ClampKernel");
  return absl::OkStatus();
}

absl::Status Add(const Bf16* a, const Bf16* b, int64_t n, Bf16* out, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  AddKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(a, b, n, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("AddKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
