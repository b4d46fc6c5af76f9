// Rotary position embedding on bf16 q/k, rotate_half (NeoX) style, in place.
// Mirrors engine/ops/cpu/rope.h: the same inv_freq (computed on the host by
// RopeInvFreq exactly as cpu::BuildRopeTable does), the same interleaved
// M-RoPE axis assignment, fp32 angles and cos/sin, one bf16 rounding at the store.
#ifndef VISMOE_ENGINE_OPS_CUDA_ROPE_H_
#define VISMOE_ENGINE_OPS_CUDA_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// Host: inv_freq[j] = 1 / theta^(2j / head_dim) in fp32, j < head_dim / 2; the
// caller uploads it once at start-up.
std::vector<float> RopeInvFreq(int head_dim, double theta);

// x [n, num_heads, head_dim] (rows `row_stride` elements apart) in place.
// positions: device int64 row-major [3][n] (t, h, w). mrope_section: host
// pointer to 3 ints (interleaved M-RoPE, sum = head_dim / 2), or nullptr for
// plain RoPE on positions row 0 (then positions may be [1][n]).
// inv_freq: device fp32 [head_dim / 2] (RopeInvFreq's, or cpu::YarnInvFreq's).
// cos and sin are multiplied by `scale` once computed (YaRN's attention
// factor, as cpu::ScaleRopeRows does), and by row_scale[i] for row i when
// given (device fp32 [n]: LongRoPE's mscale, per sequence).
// REQUIRES: head_dim even.
absl::Status ApplyRope(Bf16* x, int64_t n, int num_heads, int head_dim, int64_t row_stride,
                       const int64_t* positions, const float* inv_freq, const int* mrope_section,
                       StreamHandle stream, float scale = 1.0f, const float* row_scale = nullptr);

// Qwen3's per-head QK-norm and the rotary embedding of q and k in one launch,
// in place in fused qkv rows [n, row_stride] (num_heads q heads, then
// num_kv_heads k heads, head_dim each): per q (k) head, RmsNorm with q_norm
// (k_norm) rounded to bf16, then ApplyRope's rotation rounded again -- the
// values of RmsNorm followed by ApplyRope up to the order of the sum of
// squares. Arguments as those two. REQUIRES: head_dim even, <= 512.
absl::Status QkNormRope(Bf16* qkv, int64_t n, int num_heads, int num_kv_heads, int head_dim,
                        int64_t row_stride, const Bf16* q_norm, const Bf16* k_norm, float eps,
                        const int64_t* positions, const float* inv_freq, const int* mrope_section,
                        StreamHandle stream);

// The same rotation with precomputed fp32 tables cos/sin [n, head_dim] (the
// layout of cpu::RopeTable): used by the vision tower's 2-D rotary, whose
// table is built on the host from the patch grid.
absl::Status ApplyRopeTable(Bf16* x, int64_t n, int num_heads, int head_dim, int64_t row_stride,
                            const float* cos, const float* sin, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_ROPE_H_
