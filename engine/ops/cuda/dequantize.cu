#include "engine/ops/cuda/dequantize.h"

#include <cuda_fp8.h>

#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda {
namespace {

using detail::GridFor;
using detail::LoadBf16;
using detail::StoreBf16;

constexpr int kThreads = 256;

// e4m3fn -> fp32 exactly (through the half the hardware converts to).
__device__ __forceinline__ float E4m3ToFloat(uint8_t v) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(h));
}

__global__ void DequantizeE4m3Kernel(const uint8_t* q, int64_t rows, int64_t cols,
                                     const void* scale, bool scale_bf16, int64_t block_rows,
                                     int64_t block_cols, Bf16* out) {
  const int64_t stride = (cols + block_cols - 1) / block_cols;  // scale blocks per row block
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int64_t k = (r / block_rows) * stride + c / block_cols;
    const float s = scale_bf16 ? LoadBf16(static_cast<const Bf16*>(scale), k)
                               : static_cast<const float*>(scale)[k];
    StoreBf16(out, i, E4m3ToFloat(q[i]) * s);
  }
}

// e2m1 magnitudes by their low three bits.
__constant__ float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// The e8m0 scale: 2^(v - 127); 0 is the subnormal 2^-127, 0xff NaN (E8m0ToFloat).
__device__ __forceinline__ float E8m0ToFloat(uint8_t v) {
  const uint32_t bits = v == 0 ? 0x00400000u : v == 0xff ? 0x7fc00000u : uint32_t{v} << 23;
  return __uint_as_float(bits);
}

__global__ void DequantizeMxfp4Kernel(const uint8_t* blocks, int64_t rows, int64_t cols,
                                      const uint8_t* scales, Bf16* out) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const uint8_t nibble = (blocks[r * (cols / 2) + c / 2] >> (4 * (c % 2))) & 15;
    const float m = kE2m1[nibble & 7];
    const float v = (nibble & 8) != 0 ? -m : m;
    StoreBf16(out, i, v * E8m0ToFloat(scales[r * (cols / 32) + c / 32]));
  }
}

}  // namespace

absl::Status DequantizeMxfp4(const uint8_t* blocks, int64_t rows, int64_t cols,
                             const uint8_t* scales, Bf16* out, StreamHandle stream) {
  if (rows <= 0 || cols <= 0 || cols % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::DequantizeMxfp4: bad shape ", rows, " x ", cols));
  }
  DequantizeMxfp4Kernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(blocks, rows, cols,
                                                                                  scales, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("DequantizeMxfp4Kernel");
  return absl::OkStatus();
}

absl::Status DequantizeE4m3(const uint8_t* q, int64_t rows, int64_t cols, const void* scale,
                            bool scale_bf16, int64_t block_rows, int64_t block_cols, Bf16* out,
                            StreamHandle stream) {
  if (rows <= 0 || cols <= 0 || block_rows <= 0 || block_cols <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::DequantizeE4m3: bad shape ", rows, " x ",
                                                   cols, ", blocks ", block_rows, " x ",
                                                   block_cols));
  }
  DequantizeE4m3Kernel<<<GridFor(rows * cols, kThreads), kThreads, 0, stream>>>(
      q, rows, cols, scale, scale_bf16, block_rows, block_cols, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("DequantizeE4m3Kernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
