#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/greedy_argmax.h"
#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda {
namespace {

using detail::kWarp;

// (v, i) beats (bv, bi): a candidate (i >= 0) that is greater, or equal at a
// lower index.
__device__ __forceinline__ bool Beats(float v, int i, float bv, int bi) {
  return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

// One row's best candidate over a slice, and whether the slice was finite.
struct ArgmaxPartial {
  float v;
  int i;  // -1: none (an empty or all-NaN slice)
  int finite;
  int pad;
};

// Block (slice, row): the first index of the maximum in its slice of the row
// (NaNs skipped), so the merge sees slices in index order.
__global__ void ArgmaxSliceKernel(const float* logits, int64_t vocab, int64_t slice,
                                  ArgmaxPartial* part) {
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.y) * vocab;
  const int64_t lo = blockIdx.x * slice;
  const int64_t hi = min(lo + slice, vocab);
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  float bv = 0.0f;
  int bi = -1;
  bool finite = true;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const float v = row[i];
    finite = finite && isfinite(v);
    if (!isnan(v) && (bi < 0 || v > bv)) {  // ascending i: the first of equal maxima
      bv = v;
      bi = static_cast<int>(i);
    }
  }
  finite = __syncthreads_and(finite) != 0;
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (Beats(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  if (lane == 0) s_v[warp] = bv, s_i[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / kWarp); ++w) {
      if (Beats(s_v[w], s_i[w], bv, bi)) bv = s_v[w], bi = s_i[w];
    }
    part[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = {bv, bi, finite ? 1 : 0, 0};
  }
}

// One warp per row merges its slices' partials.
__global__ void ArgmaxMergeKernel(const ArgmaxPartial* part, int slices, int32_t* out) {
  const ArgmaxPartial* p = part + static_cast<int64_t>(blockIdx.x) * slices;
  float bv = 0.0f;
  int bi = -1;
  bool finite = true;
  for (int s = threadIdx.x; s < slices; s += kWarp) {
    finite = finite && p[s].finite != 0;
    if (Beats(p[s].v, p[s].i, bv, bi)) bv = p[s].v, bi = p[s].i;
  }
  finite = __all_sync(0xffffffffu, finite);
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (Beats(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  // A row with a NaN or an infinity gives no token.
  if (threadIdx.x == 0) out[blockIdx.x] = finite ? bi : -1;
}

constexpr int kArgmaxThreads = 256;

// Slices per row: enough blocks to spread a row over the SMs, each slice at
// least a few loads per thread.
int ArgmaxSlices(int64_t vocab) {
  return static_cast<int>(
      std::clamp<int64_t>(vocab / (4 * kArgmaxThreads), 1, kGreedyArgmaxMaxSlices));
}

}  // namespace

int64_t GreedyArgmaxWorkspaceBytes(int64_t rows) {
  return rows * kGreedyArgmaxMaxSlices * static_cast<int64_t>(sizeof(ArgmaxPartial));
}

absl::Status GreedyArgmaxRows(const float* logits, int64_t rows, int64_t vocab, int32_t* out,
                              void* workspace, StreamHandle stream) {
  if (rows < 0 || rows > 65535 || vocab < 1 || vocab > 0x7fffffffLL ||
      (rows > 0 && workspace == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::GreedyArgmaxRows: rows=", rows, " vocab=", vocab,
                     workspace == nullptr ? " without a workspace" : ""));
  }
  if (rows == 0) return absl::OkStatus();
  const int slices = ArgmaxSlices(vocab);
  const int64_t slice = (vocab + slices - 1) / slices;
  auto* part = static_cast<ArgmaxPartial*>(workspace);
  ArgmaxSliceKernel<<<dim3(slices, static_cast<unsigned>(rows)), kArgmaxThreads, 0, stream>>>(
      logits, vocab, slice, part);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ArgmaxSliceKernel");
  ArgmaxMergeKernel<<<static_cast<unsigned>(rows), kWarp, 0, stream>>>(part, slices, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ArgmaxMergeKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
