// Block-scaled expert weights widened to bf16 on the device, so the grouped
// GEMMs (gemm.h) read them as any bf16 expert: FP8 and MXFP4 experts stay so
// in host memory, on the copy path and in slabs (a half / ~a quarter of the
// bytes of each copy) and are widened here, per expert, just before their
// GEMMs.
// Semantics of cpu::DequantizeF8: each weight its e4m3 value times its
// block's scale in fp32, then rounded to bf16 once (the CPU backend keeps the
// fp32 value: the one rounding is this path's difference).
#ifndef VISMOE_ENGINE_OPS_CUDA_DEQUANTIZE_H_
#define VISMOE_ENGINE_OPS_CUDA_DEQUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// out [rows, cols] bf16 from q [rows, cols] e4m3 bytes and the scales
// [ceil(rows / block_rows), ceil(cols / block_cols)] (fp32, or bf16 when
// scale_bf16), all device memory. NaN codes (0x7f, 0xff) give NaN.
// REQUIRES (else InvalidArgument): rows, cols, block_rows, block_cols > 0.
absl::Status DequantizeE4m3(const uint8_t* q, int64_t rows, int64_t cols, const void* scale,
                            bool scale_bf16, int64_t block_rows, int64_t block_cols, Bf16* out,
                            StreamHandle stream);

// out [rows, cols] bf16 from MXFP4 `blocks` (two e2m1 values per byte, the
// even one low; rows of cols / 2 bytes) and e8m0 `scales` [rows, cols / 32],
// device memory: e2m1 * 2^(e - 127), exact in bf16 (GPT-OSS's experts, as
// cpu::Linear decodes them). REQUIRES (else InvalidArgument): rows > 0,
// cols > 0 a multiple of 32.
absl::Status DequantizeMxfp4(const uint8_t* blocks, int64_t rows, int64_t cols,
                             const uint8_t* scales, Bf16* out, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_DEQUANTIZE_H_
