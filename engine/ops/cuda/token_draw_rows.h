// Sampled tokens on the device: TokenPicker's draw (engine/core/token_draw.h)
// of each row of logits, so a sampled decode step copies back token ids, not
// a vocabulary of logits per sequence.
//
// One block per row: the row's range, each logit's weight summed into its
// bucket (the host's buckets, from the same double operations), then for
// the top_p cut and for the draw: the buckets walked by one warp, the
// crossing bucket's members gathered and sorted in shared memory (96 KB per
// block, so up to kTokenDrawMaxMembers of them), walked in order. Sums run in another order than
// the host's, so a token can differ only where a target falls within rounding of a boundary.
#ifndef VISMOE_ENGINE_OPS_CUDA_TOKEN_DRAW_ROWS_H_
#define VISMOE_ENGINE_OPS_CUDA_TOKEN_DRAW_ROWS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// TokenDraw's fields, laid out for the kernel.
struct DeviceTokenDraw {
  float temperature;  // 0: greedy, the row is left alone
  int top_k;
  float top_p;
  int pad;
  double uniform;
};

// out[r] for a row the kernel leaves to the host: top_k set (0 < top_k <
// vocab), or a crossing bucket of more than kTokenDrawMaxMembers logits.
inline constexpr int32_t kDrawOnHost = -2;
inline constexpr int kTokenDrawMaxMembers = 4096;

// For each row r whose draws[r].temperature > 0 and out[r] >= 0: out[r] = the
// token TokenPicker::Pick draws from logits row r [vocab] fp32, or
// kDrawOnHost. Other rows are left alone: run GreedyArgmaxRows first, which
// gives greedy rows their token and marks non-finite rows -1. `draws` and
// `out` may be device-visible host memory.
absl::Status DrawTokenRows(const float* logits, int64_t rows, int64_t vocab,
                           const DeviceTokenDraw* draws, int32_t* out, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_TOKEN_DRAW_ROWS_H_
