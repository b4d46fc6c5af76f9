// y = x W^T for a few rows (decode steps) and weights stored [out, in]
// (nn.Linear, WeightLayout::kOutIn): one warp per output, 16-byte weight
// loads streamed once, fp32 accumulation. cuBLAS's m = 1 GEMMs ran at 1.1-1.8
// TB/s on an H100 for the attention projections and took 7.5 us for a 0.5 MB
// router (issue #31's ncu list); Blas::Linear sends the shapes this takes here.
#ifndef VISMOE_ENGINE_OPS_CUDA_GEMV_H_
#define VISMOE_ENGINE_OPS_CUDA_GEMV_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// Rows one call takes.
inline constexpr int64_t kMaxGemvRows = 8;

// Whether GemvOutIn takes this shape: 1 <= n <= kMaxGemvRows, `in` a multiple
// of 8, x and w 16-byte aligned (whole 16-byte loads per row).
bool GemvSupports(int64_t n, int64_t in, int64_t out, const void* x, const void* w);

// y [n, out] (row stride ldy) = x [n, in] . W^T + beta * y, W [out, in] bf16;
// y bf16 (rounded once, to nearest even) or fp32.
// REQUIRES (else InvalidArgument): GemvSupports, ldy >= out.
absl::Status GemvOutIn(const Bf16* x, int64_t n, int64_t in, const Bf16* w, int64_t out, void* y,
                       bool f32_out, float beta, int64_t ldy, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_GEMV_H_
