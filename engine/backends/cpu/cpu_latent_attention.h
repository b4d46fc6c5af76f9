// Multi-head latent attention (DeepSeek-V2/V3, TextConfig::Mla) on the CPU
// reference backend, over a KV cache that holds each token's normed latent
// and rotated rope key (one plane of kv_lora_rank + qk_rope_head_dim).
//
// transformers expands every cached latent into per-head keys and values
// (kv_b_proj) each step; this computes the same products with kv_b_proj
// folded into the queries and the output instead ("absorbed"): per head h,
// q_nope . (W_uk_h c) = (q_nope W_uk_h) . c and sum_t p_t (W_uv_h c_t) =
// W_uv_h (sum_t p_t c_t). Equal up to fp32 rounding, and a decode step
// reads kv_lora_rank + rope dims per cached token, not the expanded keys and
// values.
//
// Thread safety: reentrant; work is split over `pool` (null: inline).
#ifndef VISMOE_ENGINE_BACKENDS_CPU_CPU_LATENT_ATTENTION_H_
#define VISMOE_ENGINE_BACKENDS_CPU_CPU_LATENT_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/backend/kv_cache.h"
#include "engine/core/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/model/text_weights.h"
#include "engine/ops/cpu/rope.h"

namespace vismoe::cpu {

// out [n, heads * v_head_dim] = the attention of x's n rows (the normed block
// input; sequences of seq_rows rows each, in order) over their caches, whose
// `layer` rows the step appends at layer_length(layer). The output projection
// (o_proj) is the caller's.
// REQUIRES: c.mla set; the caches hold blocks for the rows; `rope` has n rows
// of qk_rope_head_dim. Unimplemented for an FP8 kv_b_proj.
absl::Status LatentAttention(ThreadPool* pool, const TextConfig& c, const DecoderLayerWeights& w,
                             const RopeTable& rope, const float* x, int64_t n, int layer,
                             absl::Span<KvCache* const> caches, absl::Span<const int64_t> seq_rows,
                             float* out);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_BACKENDS_CPU_CPU_LATENT_ATTENTION_H_
