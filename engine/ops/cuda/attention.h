// Scaled dot-product attention on bf16 q/k/v with fp32 online softmax; the
// semantics of engine/ops/cpu/attention.h (causal mask from q_pos0, GQA
// head h -> kv head h / (num_heads / num_kv_heads), scale head_dim^-0.5).
// One kernel serves prefill (nq query rows over nk keys, causal) and decode
// (nq = 1 against the KV cache); the vision tower calls it per image with
// causal = false. The families' variants: a sliding window (Mixtral, GPT-OSS)
// and per-head sink logits in the softmax denominator (GPT-OSS), as the CPU op. The CPU op's
// optional key_saliency output is not provided. PagedAttention reads the keys and values of the
// decoder's KV cache through its block table, and PagedKvWrite stores a step's new rows there.
#ifndef VISMOE_ENGINE_OPS_CUDA_ATTENTION_H_
#define VISMOE_ENGINE_OPS_CUDA_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t q_row_stride = 0;   // elements; 0 = num_heads * head_dim
  int64_t kv_row_stride = 0;  // elements; 0 = num_kv_heads * head_dim
  // Causal only: query row i sees the last `window` keys up to its own
  // (keys j > q_pos0 + i - window); 0 = every earlier key.
  int64_t window = 0;
  // Device fp32 [num_heads]: p_j = exp(s_j) / (exp(sinks[h]) + sum exp(s_j')),
  // the sink logit unscaled; null = none.
  const float* sinks = nullptr;
  float scale = 0.0f;  // softmax scale; 0 = head_dim^-0.5
};

// q [nq, ...], k/v [nk, ...] (row strides from `shape`), out [nq, num_heads *
// head_dim] dense, not aliasing q/k/v. Query row i sees keys j < nk, and when
// causal only j <= q_pos0 + i (and j > q_pos0 + i - window with a window).
// REQUIRES (else InvalidArgument): num_heads % num_kv_heads == 0,
// 0 < head_dim <= 256, q_pos0 >= 0, window >= 0 (and 0 unless causal).
absl::Status Attention(const AttentionShape& shape, const Bf16* q, int64_t nq, const Bf16* k,
                       const Bf16* v, int64_t nk, bool causal, int64_t q_pos0, Bf16* out,
                       StreamHandle stream);

// Keys and values in fixed-size blocks (a paged KV cache,
// engine/backends/cuda/device_kv_pool.h): key j is row j % block_rows of
// block blocks[j / block_rows] (a device array), block b's rows starting
// b * block_stride elements after k (v), rows shape.kv_row_stride apart.
// With `start` set, the number of tokens in the cache before the step's rows
// is read from device memory there at run time, and the `start` / `q_pos0`
// and `nk` arguments are replaced by it and it + rows: a captured CUDA graph
// then serves every decode step whatever the cache length.
struct PagedKv {
  const int32_t* blocks = nullptr;
  int64_t block_rows = 0;
  int64_t block_stride = 0;
  const int32_t* start = nullptr;
};

// Attention with k/v read through a block table; otherwise as Attention.
// REQUIRES (else InvalidArgument): as Attention, and paged.blocks non-null,
// block_rows > 0, block_stride >= block_rows * kv row stride.
absl::Status PagedAttention(const AttentionShape& shape, const Bf16* q, int64_t nq, const Bf16* k,
                            const Bf16* v, const PagedKv& paged, int64_t nk, bool causal,
                            int64_t q_pos0, Bf16* out, StreamHandle stream);

// Writes `rows` rows of `row_elems` bf16 (src rows src_stride elements apart)
// into token rows [start, start + rows) of a paged cache plane `dst` (block
// layout as PagedKv, rows row_elems apart). REQUIRES (else
// InvalidArgument): rows >= 0, row_elems > 0, start >= 0, blocks for every
// written token.
absl::Status PagedKvWrite(const Bf16* src, int64_t src_stride, int64_t rows, int64_t row_elems,
                          Bf16* dst, const PagedKv& paged, int64_t start, StreamHandle stream);
// PagedKvWrite of the keys and of the values of the same rows in one launch.
absl::Status PagedKvWrite2(const Bf16* k_src, const Bf16* v_src, int64_t src_stride, int64_t rows,
                           int64_t row_elems, Bf16* k_dst, Bf16* v_dst, const PagedKv& paged,
                           int64_t start, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_ATTENTION_H_
