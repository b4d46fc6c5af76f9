// The MoE block of a decode-sized step (at most kMaxDecodeRows rows) on the
// device with no host in the loop (DESIGN.md, "The GPU decode step"): the
// router's top-k, its permutation and every selected expert's SwiGLU read the
// expert weights through a per-layer device table (expert id -> weights), so
// one launch computes the gate/up projections of every selected expert and
// one their down projections, whatever the routing, and nothing comes back
// to the host on the way. Each expert's weights are read once per step for
// all the rows routed to it (a batched decode step shares them).
//
// Numerics: the routing is MoeRouterTopK's, bit for bit; the expert products
// accumulate in fp32 and stay fp32 through SwiGLU and the down projection
// (the grouped-GEMM path rounds both to bf16); the weighted sum over the
// top-k slots runs in slot order and is rounded to bf16 once (DeepSeek's: with
// the bf16 shared experts' output it starts from), then added to the residual
// stream with one more rounding -- UnpermuteCombine + Add.
// The permutation is BuildMoePermutation's: within an expert, rows in
// ascending (token, slot) order; the result does not depend on it.
#ifndef VISMOE_ENGINE_OPS_CUDA_MOE_DECODE_H_
#define VISMOE_ENGINE_OPS_CUDA_MOE_DECODE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"
#include "engine/ops/cuda/gemm.h"

namespace vismoe::cuda {

// Rows of one step these kernels take (decode steps and short batches).
inline constexpr int64_t kMaxDecodeRows = 64;
// Experts per layer they take.
inline constexpr int kMaxDecodeExperts = 512;

// A layer's experts as device arrays of num_experts pointers each.
// kInOut (Qwen3-VL-MoE fused): gate_up[e] [H, 2I] (gate = first I columns),
// down[e] [I, H]. kOutIn (per-expert nn.Linear): gate_up[e] = gate [I, H],
// up[e] [I, H], down[e] [H, I].
// FP8 experts (`fp8`, kOutIn only: an FP8 checkpoint's or --expert_dtype=fp8's)
// hold e4m3 bytes behind the same pointers, each [block_rows x block_cols]
// block times its scale (fp32, or bf16 with scale_bf16; row-major blocks, the
// last ones partial), the scales through per-expert tables of their own;
// the kernels multiply each weight by its scale in fp32 as they read it
// (cpu::DequantizeF8's values), so the bytes read are the FP8 ones.
struct MoeDecodeTable {
  WeightLayout layout = WeightLayout::kInOut;
  const Bf16* const* gate_up = nullptr;
  const Bf16* const* up = nullptr;  // kOutIn only
  const Bf16* const* down = nullptr;
  bool fp8 = false;
  const void* const* gate_scale = nullptr;  // fp8: per expert, gate_up[e]'s (the gate's) scales
  const void* const* up_scale = nullptr;
  const void* const* down_scale = nullptr;
  bool scale_bf16 = false;
  int block_rows = 0, block_cols = 0;  // fp8: block_cols a multiple of 8
};

// One step's routing on the device (all device pointers).
struct MoeDecodeRouting {
  int32_t* experts = nullptr;       // [n, k] top-k ids, by decreasing probability
  float* weights = nullptr;         // [n, k] combine weights
  int32_t* offsets = nullptr;       // [E + 1]: expert e owns permuted rows [off[e], off[e+1])
  int32_t* row_token = nullptr;     // [n * k]: permuted row -> token
  int32_t* slot_row = nullptr;      // [n * k]: (token, slot) -> permuted row, -1 for a bad id
  int32_t* active = nullptr;        // [min(n * k, E)]: the experts with rows, ascending
  int32_t* active_count = nullptr;  // [1]
};

// Whether the kernels take this shape: hidden and inter multiples of 8 (16-byte
// weight loads, 8-byte FP8 ones), 0 < top_k <= min(E, 32), E <= kMaxDecodeExperts.
bool MoeDecodeSupports(int hidden, int inter, int num_experts, int top_k);

// logits [n, E] fp32 -> routing (top-k exactly as MoeRouterTopK, the
// permutation and the active experts) in one launch. `host_ids`, if not
// null, is device-visible host memory (PinnedHostBuffer::device_data) that
// receives the [n, k] ids too. An id out of range (NaN logits) is reported
// as E and its slot skipped (slot_row -1).
// REQUIRES (else InvalidArgument): 1 <= n <= kMaxDecodeRows, MoeDecodeSupports.
absl::Status MoeDecodeRoute(const float* logits, int64_t n, int num_experts, int top_k,
                            bool renormalize, const MoeDecodeRouting& routing, int32_t* host_ids,
                            StreamHandle stream);

// MoeDecodeRoute's permutation, active experts and `host_ids` for ids another
// router already wrote to routing.experts (and its weights to
// routing.weights): DeepSeek's group routers (MoeRouterGroup).
// REQUIRES (else InvalidArgument): as MoeDecodeRoute.
absl::Status MoeDecodePermute(int64_t n, int num_experts, int top_k,
                              const MoeDecodeRouting& routing, int32_t* host_ids,
                              StreamHandle stream);

// act [n * k, inter] fp32, permuted rows: silu(x W_gate) * (x W_up) for each
// active expert's rows, x [n, hidden] bf16 read through row_token. Also
// InvalidArgument for an FP8 table off the per-expert layout, without
// scales or with blocks of columns not a multiple of 8 (and so MoeDecodeDown).
absl::Status MoeDecodeGateUp(const Bf16* x, int64_t n, int hidden, int inter, int top_k,
                             int num_experts, const MoeDecodeTable& table,
                             const MoeDecodeRouting& routing, float* act, StreamHandle stream);

// yp [n * k, hidden] fp32, permuted rows: act W_down per active expert.
absl::Status MoeDecodeDown(const float* act, int64_t n, int hidden, int inter, int top_k,
                           int num_experts, const MoeDecodeTable& table,
                           const MoeDecodeRouting& routing, float* yp, StreamHandle stream);

// y[t] = bf16(sum over slots s of weights[t, s] * yp[slot_row[t, s]]), the
// slots in order, and hs[t] = bf16(hs[t] + y[t]); with `accumulate`, the sum
// starts from y[t] (DeepSeek's shared experts, computed into y first).
absl::Status MoeDecodeCombine(const float* yp, const MoeDecodeRouting& routing, int64_t n,
                              int top_k, int hidden, Bf16* y, Bf16* hs, StreamHandle stream,
                              bool accumulate = false);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_MOE_DECODE_H_
