// Multi-head latent attention (DeepSeek-V2/V3, TextConfig::Mla) on the
// device: the math of engine/backends/cpu/cpu_latent_attention.h, "absorbed"
// (kv_b_proj folded into the queries and the output), over a paged cache
// plane whose token rows are [normed latent (kv_lora_rank) | rotated rope key
// (qk_rope_head_dim)], so a step reads kv_lora_rank + rope dims per cached
// token and never the expanded keys and values. bf16 in, fp32 accumulation
// and softmax; the absorbed queries and the attended latents stay fp32.
//
// Per head h (kv_b [heads * (nope + v), rank], head h's rows: nope W_uk_h
// rows, then v W_uv_h rows):
//   LatentAbsorbQuery:    q_abs[i, h] = q_nope[i, h] W_uk_h           [rank]
//   LatentPagedAttention: p_t = softmax_t((q_abs . c_t + q_pe . k_pe_t) * scale)
//                         o_lat[i, h] = sum_t p_t c_t                 [rank]
//   LatentExpandOutput:   out[i, h] = W_uv_h o_lat[i, h]              [v]
// RopeHeads rotates q's rope parts and the new rope keys in place (pairs
// (2j, 2j + 1) when interleaved, as cpu::ApplyRopePairs; else rotate_half).
#ifndef VISMOE_ENGINE_OPS_CUDA_LATENT_ATTENTION_H_
#define VISMOE_ENGINE_OPS_CUDA_LATENT_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"
#include "engine/ops/cuda/attention.h"

namespace vismoe::cuda {

struct LatentShape {
  int num_heads = 0;
  int rank = 0;        // kv_lora_rank
  int nope_dim = 0;    // qk_nope_head_dim
  int rope_dim = 0;    // qk_rope_head_dim
  int v_dim = 0;       // v_head_dim
  float scale = 0.0f;  // softmax scale (TextConfig::AttentionScale)
  int64_t q_stride() const { return int64_t{num_heads} * (nope_dim + rope_dim); }
  int64_t row_elems() const { return int64_t{rank} + rope_dim; }  // one cache row
};

// The largest rank and rope dims the kernels take (DeepSeek-V2/V3 and
// Kimi-VL publish 512 and 64).
inline constexpr int kMaxLatentRank = 512;
inline constexpr int kMaxLatentRopeDim = 64;

// InvalidArgument unless every dim is > 0, rank <= kMaxLatentRank, rank a
// multiple of 32, rope_dim even and <= kMaxLatentRopeDim, nope_dim <= 1024.
absl::Status CheckLatentShape(const LatentShape& shape);

// Rotates `dim` values at offset `offset` of each of num_heads heads
// (head_stride elements apart) of x's n rows (row_stride apart), in place:
// angle = positions[i] * inv_freq[j] in fp32, cos and sin times `scale`
// (YaRN's attention factor). positions: device int64 [n]; inv_freq: device
// fp32 [dim / 2]. REQUIRES (else InvalidArgument): dim even, > 0.
absl::Status RopeHeads(Bf16* x, int64_t n, int num_heads, int64_t head_stride, int64_t offset,
                       int dim, int64_t row_stride, bool interleave, const int64_t* positions,
                       const float* inv_freq, float scale, StreamHandle stream);

// q [n, q_stride] bf16 (per head: nope then rope dims); q_abs [n, heads, rank] fp32.
absl::Status LatentAbsorbQuery(const LatentShape& shape, const Bf16* q, int64_t n, const Bf16* kv_b,
                               float* q_abs, StreamHandle stream);

// Row i (cache position q_pos0 + i; with paged.start set, *paged.start +
// q_pos0 + i: q_pos0 is then the row's offset in the step, unlike
// PagedAttention's) attends over cache rows up to its own of `cache` (one
// plane: rows of row_elems(), block layout as PagedKv), its rope query read
// from q. o_lat [n, heads, rank] fp32.
absl::Status LatentPagedAttention(const LatentShape& shape, const float* q_abs, const Bf16* q,
                                  int64_t n, const Bf16* cache, const PagedKv& paged,
                                  int64_t q_pos0, float* o_lat, StreamHandle stream);

// out [n, heads * v_dim] bf16.
absl::Status LatentExpandOutput(const LatentShape& shape, const float* o_lat, int64_t n,
                                const Bf16* kv_b, Bf16* out, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_LATENT_ATTENTION_H_
