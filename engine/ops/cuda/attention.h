// Scaled dot-product attention on bf16 q/k/v with fp32 online softmax; the
// semantics of engine/ops/cpu/attention.h (causal mask from q_pos0, GQA
// head h -> kv head h / (num_heads / num_kv_heads), scale head_dim^-0.5).
// One kernel serves prefill (nq query rows over nk keys, causal) and decode
// (nq = 1 against the KV cache); the vision tower calls it per image with
// causal = false. The CPU op's optional key_saliency output is not provided.
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
};

// q [nq, ...], k/v [nk, ...] (row strides from `shape`), out [nq, num_heads *
// head_dim] dense, not aliasing q/k/v. Query row i sees keys j < nk, and when
// causal only j <= q_pos0 + i.
// REQUIRES (else InvalidArgument): num_heads % num_kv_heads == 0,
// 0 < head_dim <= 256, q_pos0 >= 0.
absl::Status Attention(const AttentionShape& shape, const Bf16* q, int64_t nq, const Bf16* k,
                       const Bf16* v, int64_t nk, bool causal, int64_t q_pos0, Bf16* out,
                       StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_ATTENTION_H_
