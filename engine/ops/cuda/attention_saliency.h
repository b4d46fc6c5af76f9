// Per-key attention saliency on the CUDA backend: the optional key_saliency
// output of engine/ops/cpu/attention.h, which cuda::Attention (attention.h)
// does not produce. VisMMOE's saliency-based token compression reads it; the
// vision tower computes it for the last block, once per frame.
//
// With the semantics of cpu::Attention (scale head_dim^-0.5, GQA head h ->
// kv head h / (num_heads / num_kv_heads), causal mask from q_pos0):
//   p[h, i, j] = softmax_j(q[i,h] . k[j,g] * scale)     (masked entries are 0)
//   key_saliency[j] = sum_h sum_i p[h, i, j] / (num_heads * nq)
// so the saliency sums to 1. Scores are fp32 from the bf16 q/k.
//
// Deterministic (no atomics): pass 1 computes, for each (query row, head), the
// row max and the softmax mass (one warp per row, a fixed lane split and a
// fixed shuffle tree); pass 2 computes, for each key, the sum of
// exp(s - max) / mass over all (query, head) rows in a fixed thread split and
// a fixed block reduction. Scores are recomputed in pass 2 rather than stored
// (the [heads, nq, nk] matrix would be large), so it costs about two attention
// passes without the value product.
#ifndef VISMOE_ENGINE_OPS_CUDA_ATTENTION_SALIENCY_H_
#define VISMOE_ENGINE_OPS_CUDA_ATTENTION_SALIENCY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/ops/cuda/attention.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// fp32 elements of the `row_stats` scratch that AttentionKeySaliency needs for
// nq query rows: max and mass per (query row, head).
int64_t AttentionSaliencyScratchFloats(int num_heads, int64_t nq);

// q [nq, ...], k [nk, ...] bf16 with the row strides of `shape` (e.g. the q and
// k columns of a fused qkv buffer after the rotary embedding). Writes
// key_saliency [nk] (fp32, overwritten, not accumulated). row_stats: device
// scratch of AttentionSaliencyScratchFloats(shape.num_heads, nq) floats.
// Launches on `stream`; returns at once.
// REQUIRES (else InvalidArgument): nq >= 1, nk >= 1, num_heads %
// num_kv_heads == 0, 0 < head_dim <= 256, num_kv_heads * head_dim <= 12000
// (one key row of all kv heads is staged in shared memory), q_pos0 >= 0.
absl::Status AttentionKeySaliency(const AttentionShape& shape, const Bf16* q, int64_t nq,
                                  const Bf16* k, int64_t nk, bool causal, int64_t q_pos0,
                                  float* row_stats, float* key_saliency, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_ATTENTION_SALIENCY_H_
