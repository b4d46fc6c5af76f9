// Row movement of the CUDA backend: token embedding gather, visual-token
// scatter into the sequence, DeepStack feature add at visual positions.
// Ids and positions are validated on the host before upload (the kernels
// cannot report an error): out-of-range ids produce zero rows, out-of-range
// positions are skipped.
#ifndef VISMOE_ENGINE_OPS_CUDA_EMBEDDING_H_
#define VISMOE_ENGINE_OPS_CUDA_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// out[i, :] = table[ids[i], :] for i < n; table [vocab, hidden].
absl::Status EmbeddingGather(const Bf16* table, int64_t vocab, int hidden, const int32_t* ids,
                             int64_t n, Bf16* out, StreamHandle stream);

// dst[positions[i], :] = src[i, :] for i < m; dst has dst_rows rows.
// REQUIRES: positions distinct.
absl::Status ScatterRows(const Bf16* src, int64_t m, int hidden, const int32_t* positions,
                         Bf16* dst, int64_t dst_rows, StreamHandle stream);

// dst[positions[i], :] += src[i, :] (fp32 add, one bf16 rounding).
// REQUIRES: positions distinct (no atomics, so duplicates would race).
absl::Status AddRowsAt(const Bf16* src, int64_t m, int hidden, const int32_t* positions, Bf16* dst,
                       int64_t dst_rows, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_EMBEDDING_H_
