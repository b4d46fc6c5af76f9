// Token permutation for the grouped MoE GEMM: the n * top_k (token, slot)
// assignments are sorted by expert into a permuted row buffer, so each active
// expert's tokens are one contiguous block of rows; after the experts run, the
// rows are weighted and summed back per token in slot order 0..top_k-1, so the
// result does not depend on which expert ran first (ExpertProvider contract).
// Within an expert, rows are in ascending (token, slot) order: deterministic.
#ifndef VISMOE_ENGINE_OPS_CUDA_MOE_PERMUTE_H_
#define VISMOE_ENGINE_OPS_CUDA_MOE_PERMUTE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// experts [n, top_k] (ids in [0, num_experts)) ->
//   expert_counts [num_experts]: assignments per expert;
//   expert_offsets [num_experts + 1]: expert e owns rows [off[e], off[e+1]);
//   row_token [n * top_k]: permuted row -> source token;
//   slot_row  [n * top_k]: (token, slot) -> permuted row.
// REQUIRES: every id in range (the router guarantees it); ids out of range
// are dropped and leave their slot_row entry unwritten.
// Two launches; copy expert_offsets to the host (one small D2H) to drive
// GroupedLinear and the ExpertProvider.
absl::Status BuildMoePermutation(const int32_t* experts, int64_t n, int top_k, int num_experts,
                                 int32_t* expert_counts, int32_t* expert_offsets,
                                 int32_t* row_token, int32_t* slot_row, StreamHandle stream);

// xp[r, :] = x[row_token[r], :] for r < rows.
absl::Status PermuteRows(const Bf16* x, int hidden, const int32_t* row_token, int64_t rows,
                         Bf16* xp, StreamHandle stream);

// y[t, :] (+)= sum_{s < top_k} weights[t, s] * yp[slot_row[t * top_k + s], :],
// fp32 sum in slot order, one bf16 rounding; `accumulate` adds onto y (the
// residual stream), else overwrites.
absl::Status UnpermuteCombine(const Bf16* yp, const int32_t* slot_row, const float* weights,
                              int64_t n, int top_k, int hidden, bool accumulate, Bf16* y,
                              StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_MOE_PERMUTE_H_
