#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/gemv.h"
#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::LoadActs8;
using detail::LoadBf16;
using detail::LoadWeights8;
using detail::StoreBf16;
using detail::WarpSum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;

// Each output is split over `split` warps (1, 2, 4 or 8) of a block, which
// then holds 8 / split outputs: warp w takes output 8x / split + w / split
// and every split-th 256-column chunk of `in` starting at chunk w % split,
// four 16-byte loads in flight per lane; the partial sums meet in shared
// memory, added in chunk order. Splitting keeps enough warps in flight for
// outputs of a few thousand (o_proj's 2048 ran at 1.35 TB/s unsplit).
template <int kRows>
__global__ void GemvOutInKernel(const Bf16* __restrict__ x, int n, int in,
                                const Bf16* __restrict__ w, int out, int split, void* y,
                                bool f32_out, float beta, int64_t ldy) {
  __shared__ float part[kWarps][kRows];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int o = blockIdx.x * (kWarps / split) + warp / split;
  const int chunk = warp % split;
  const bool live = o < out;
  float acc[kRows] = {};
  if (live) {
    const Bf16* wr = w + static_cast<int64_t>(o) * in;
#pragma unroll 4
    for (int c = (chunk * kWarp + lane) * 8; c < in; c += split * kWarp * 8) {
      float wv[8];
      LoadWeights8(wr + c, wv);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        if (m < n) {
          float xv[8];
          LoadActs8(x + static_cast<int64_t>(m) * in + c, xv);
#pragma unroll
          for (int q = 0; q < 8; ++q) acc[m] = fmaf(wv[q], xv[q], acc[m]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = WarpSum(acc[m]);
  if (split > 1) {
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) part[warp][m] = acc[m];
    }
    __syncthreads();
    if (chunk == 0) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        for (int k = 1; k < split; ++k) acc[m] += part[warp + k][m];
      }
    }
  }
  if (!live || chunk != 0 || lane != 0) return;
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m >= n) break;
    const int64_t i = m * ldy + o;
    if (f32_out) {
      float* yf = static_cast<float*>(y);
      yf[i] = beta != 0.0f ? acc[m] + beta * yf[i] : acc[m];
    } else {
      Bf16* yb = static_cast<Bf16*>(y);
      StoreBf16(yb, i, beta != 0.0f ? acc[m] + beta * LoadBf16(yb, i) : acc[m]);
    }
  }
}

// Warps per output: up to 8 while the call has fewer than ~8K warps (enough
// to cover an H100's loads in flight) and each warp keeps >= 2 chunks of 256.
int SplitFor(int64_t in, int64_t out) {
  int split = 1;
  while (split < kWarps && out * split < 8192 && in >= int64_t{split} * 2 * 2 * kWarp * 8) {
    split *= 2;
  }
  return split;
}

template <int kRows>
void Launch(const Bf16* x, int n, int in, const Bf16* w, int out, void* y, bool f32_out,
            float beta, int64_t ldy, StreamHandle stream) {
  const int split = SplitFor(in, out);
  const int per_block = kWarps / split;
  const unsigned blocks = static_cast<unsigned>((out + per_block - 1) / per_block);
  GemvOutInKernel<kRows>
      <<<blocks, kThreads, 0, stream>>>(x, n, in, w, out, split, y, f32_out, beta, ldy);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool GemvSupports(int64_t n, int64_t in, int64_t out, const void* x, const void* w) {
  return n >= 1 && n <= kMaxGemvRows && in > 0 && in % 8 == 0 && in <= 0x7fffffffLL && out > 0 &&
         out <= 0x7fffffffLL && Aligned16(x) && Aligned16(w);
}

absl::Status GemvOutIn(const Bf16* x, int64_t n, int64_t in, const Bf16* w, int64_t out, void* y,
                       bool f32_out, float beta, int64_t ldy, StreamHandle stream) {
  if (!GemvSupports(n, in, out, x, w) || ldy < out) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::GemvOutIn: n=", n, " in=", in,
                                                   " out=", out, " ldy=", ldy,
                                                   " (or unaligned operands) not supported"));
  }
  const int ni = static_cast<int>(n), ii = static_cast<int>(in), oi = static_cast<int>(out);
  if (n == 1) {
    Launch<1>(x, ni, ii, w, oi, y, f32_out, beta, ldy, stream);
  } else if (n == 2) {
    Launch<2>(x, ni, ii, w, oi, y, f32_out, beta, ldy, stream);
  } else if (n <= 4) {
    Launch<4>(x, ni, ii, w, oi, y, f32_out, beta, ldy, stream);
  } else {
    Launch<8>(x, ni, ii, w, oi, y, f32_out, beta, ldy, stream);
  }
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("GemvOutInKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
