// Greedy tokens on the device: the argmax of each row of logits, split over
// many blocks per row (one block per row of 151,936 logits took 68 us on an
// H100) and merged.
#ifndef VISMOE_ENGINE_OPS_CUDA_GREEDY_ARGMAX_H_
#define VISMOE_ENGINE_OPS_CUDA_GREEDY_ARGMAX_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// out[r] = GreedyArgmax (engine/core/argmax.h) of logits row r [vocab] fp32:
// the first index of the maximum, or -1 when the row holds a NaN or an
// infinity (AllFinite: no token is an answer then). `out` may be
// device-visible host memory. Each row is split over up to
// kGreedyArgmaxMaxSlices blocks whose partial results go to `workspace`
// (device memory of GreedyArgmaxWorkspaceBytes(rows) bytes), then merged.
inline constexpr int kGreedyArgmaxMaxSlices = 64;
int64_t GreedyArgmaxWorkspaceBytes(int64_t rows);
absl::Status GreedyArgmaxRows(const float* logits, int64_t rows, int64_t vocab, int32_t* out,
                              void* workspace, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_GREEDY_ARGMAX_H_
