// Rotary position embedding of the CPU reference backend (rotate_half / NeoX
// style), with the interleaved multimodal variant (M-RoPE) of Qwen3-VL.
//
// Tables follow transformers' Qwen3VLMoeTextRotaryEmbedding exactly:
//   inv_freq[j] = 1 / theta^(2j / head_dim)              (fp32), j < head_dim/2
//   freqs[a][i][j] = float(pos[a][i]) * inv_freq[j]      (a = t, h, w axis)
//   interleaved M-RoPE: start from axis t for every j; overwrite with axis h at
//   j = 1, 4, ... < 3*section[1] and with axis w at j = 2, 5, ... < 3*section[2]
//   emb = cat(freqs, freqs); cos/sin in fp32.
// With an empty mrope_section it is plain RoPE on axis 0 (Qwen3-MoE, OLMoE).
// Qwen3-VL always interleaves (transformers ignores mrope_interleaved), so
// this does too.
#ifndef VISMOE_ENGINE_OPS_CPU_ROPE_H_
#define VISMOE_ENGINE_OPS_CPU_ROPE_H_

#include <cstdint>
#include <vector>

#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

// cos/sin rows for n tokens: cos[i * head_dim + d].
struct RopeTable {
  int64_t n = 0;
  int head_dim = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};

// Builds the table for n tokens. `positions` is row-major [3][n] (t, h, w);
// with an empty `mrope_section` only row 0 is read (it may then be [1][n]).
// REQUIRES: head_dim even; mrope_section empty or 3 entries summing to head_dim/2.
// `ext_factors` (LongRoPE's short_factor, head_dim/2 entries) divides each
// inv_freq: 1 / (ext[j] * theta^(2j / head_dim)), in fp32 as transformers'
// longrope does.
RopeTable BuildRopeTable(const int64_t* positions, int64_t n, int head_dim, double theta,
                         const std::vector<int>& mrope_section,
                         const std::vector<float>* ext_factors = nullptr);

// The table of explicit inverse frequencies (head_dim / 2 of them, e.g.
// YarnInvFreq's), plain RoPE on positions[0..n).
RopeTable BuildRopeTable(const int64_t* positions, int64_t n, int head_dim,
                         const std::vector<float>& inv_freq);
// YaRN's inverse frequencies, fp32 as transformers' _compute_yarn_parameters:
// pos_freq[j] = theta^(2j / dim); the extrapolated 1 / pos_freq and the
// interpolated 1 / (factor * pos_freq) blended by a linear ramp in j between
// the correction dims of beta_fast and beta_slow (floored / ceiled when
// `truncate`) over original_max_position_embeddings.
std::vector<float> YarnInvFreq(int dim, double theta, double factor, int original_max_positions,
                               double beta_fast, double beta_slow, bool truncate);
// LongRoPE's inverse frequencies: 1 / (ext[j] * theta^(2j / head_dim)) in fp32
// (BuildRopeTable's with ext_factors). REQUIRES: ext has head_dim / 2 values.
std::vector<float> LongRopeInvFreq(int head_dim, double theta, const std::vector<float>& ext);
// cos and sin of rows [row0, row0 + rows) times `scale` (LongRoPE's mscale),
// after they are computed, as transformers scales them.
void ScaleRopeRows(RopeTable* table, int64_t row0, int64_t rows, float scale);

// x [n, num_heads, head_dim] in place: x = x * cos + rotate_half(x) * sin,
// rotate_half(x) = cat(-x[half:], x[:half]). Rows of x are `row_stride` floats
// apart (>= num_heads * head_dim), so q/k can be rotated inside a fused buffer.
// REQUIRES: table.n == n and table.head_dim == head_dim.
void ApplyRope(ThreadPool* pool, const RopeTable& table, float* x, int64_t n, int num_heads,
               int head_dim, int64_t row_stride);
// The same on interleaved pairs (x[2j], x[2j+1]) rotated by frequency j, as
// DeepSeek-V2's complex multiplication (and V3's rope_interleave) does.
void ApplyRopePairs(ThreadPool* pool, const RopeTable& table, float* x, int64_t n, int num_heads,
                    int head_dim, int64_t row_stride);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_ROPE_H_
