// Scaled dot-product attention of the CPU reference backend (fp32), shared by
// the text decoder (causal, GQA, over the KV cache) and the vision tower
// (bidirectional within one image: call it once per image frame with causal =
// false and q/k/v pointing at that frame's rows).
//
// For query row i (absolute position q_pos0 + i when causal) and head h, with
// kv head g = h / (num_heads / num_kv_heads):
//   s_j = (q[i,h] . k[j,g]) * head_dim^-0.5          for keys j in [0, nk)
//   causal: keys j > q_pos0 + i are masked out, and with a window w > 0 also
//           keys j <= q_pos0 + i - w (Mixtral's sliding window)
//   p = softmax(s) in fp32;  out[i,h] = sum_j p_j v[j,g]
//   with sinks (GPT-OSS): p_j = exp(s_j) / (exp(sinks[h]) + sum_j' exp(s_j')),
//           the sink a logit with no value (the row's p sum to less than 1)
//
// Layouts (row-major, fp32):
//   q   [nq, num_heads * head_dim], rows q_row_stride floats apart
//   k,v [nk, num_kv_heads * head_dim], rows kv_row_stride floats apart
//       (the KV cache row, or a fused qkv buffer row)
//   out [nq, num_heads * head_dim], dense; must not alias q, k or v
//   key_saliency (optional) [nk]: for each key, the attention probability it
//       receives averaged over all heads and all query rows (masked entries count
//       as 0). Each query row's probabilities sum to 1, so the saliency sums to 1.
//       VisMMOE's saliency-based token compression reads this.
// Thread safety: reentrant; parallelises over heads and query rows on `pool`
// (null runs inline). Deterministic for a given input: a query row's result
// depends only on its inputs, never on the other rows or the thread split.
// The dot products and the weighted sum of values use the kernel path's
// primitives (vector_kernels.h): the AVX2 path fuses multiply-adds, so its
// bits differ from the portable path's within fp32 rounding.
#ifndef VISMOE_ENGINE_OPS_CPU_ATTENTION_H_
#define VISMOE_ENGINE_OPS_CPU_ATTENTION_H_

#include <cstdint>

#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t q_row_stride = 0;   // 0 = num_heads * head_dim
  int64_t kv_row_stride = 0;  // 0 = num_kv_heads * head_dim
  int64_t window = 0;         // causal only: the last `window` keys; 0 = all
  const float* sinks = nullptr;  // [num_heads] sink logits, or null
};

// REQUIRES: num_heads % num_kv_heads == 0; nq, nk >= 1; when causal, q_pos0 >= 0
// (every query then sees at least key 0).
void Attention(ThreadPool* pool, const AttentionShape& shape, const float* q, int64_t nq,
               const float* k, const float* v, int64_t nk, bool causal, int64_t q_pos0, float* out,
               float* key_saliency = nullptr);

// Keys and values in fixed-size blocks (a paged KV cache,
// engine/backend/kv_pool.h): key j is row j % block_rows of block
// blocks[j / block_rows]; block b's rows start b * block_stride floats after
// k (v), rows shape.kv_row_stride apart.
struct PagedKv {
  const float* k = nullptr;
  const float* v = nullptr;
  const int32_t* blocks = nullptr;
  int64_t block_rows = 0;
  int64_t block_stride = 0;
};

// Attention with keys and values read through a block table: the same
// arithmetic in the same order as Attention over the same rows laid out
// contiguously, so the results are bit-identical to it. REQUIRES: as
// Attention, and blocks for every key j < nk.
void PagedAttention(ThreadPool* pool, const AttentionShape& shape, const float* q, int64_t nq,
                    const PagedKv& kv, int64_t nk, bool causal, int64_t q_pos0, float* out);

// The same with the shape spelled out; q rows are dense (num_heads * head_dim)
// and kv_row_stride_elems = 0 means dense k/v rows.
void Attention(ThreadPool* pool, const float* q, int64_t nq, const float* k, const float* v,
               int64_t nk, int num_heads, int num_kv_heads, int head_dim,
               int64_t kv_row_stride_elems, bool causal, int64_t q_pos0, float* out,
               float* key_saliency = nullptr);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_ATTENTION_H_
