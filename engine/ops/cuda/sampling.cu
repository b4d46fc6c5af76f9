#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/ops/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/sampling.h"

namespace vismoe::cuda {
namespace {

using detail::BlockMax;
using detail::BlockSum;
using detail::kWarp;

constexpr int kThreads = 1024;

__host__ __device__ inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__host__ __device__ inline float Uniform(uint64_t seed, uint64_t step, uint64_t row) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ row);
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
}

// Monotone map of floats to unsigned keys: a < b  <=>  Key(a) < Key(b), and
// a == b  =>  Key(a) == Key(b) (-0.0 is folded onto +0.0, so zeros tied at the
// top_k / top_p boundary are all kept, as the header promises).
__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t u = f == 0.0f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block arg-max with lowest index on ties; all threads get the index.
__device__ int64_t BlockArgmax(float best, int64_t best_i, float* sv, int64_t* si) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (ov > best || (ov == best && oi < best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / kWarp); ++w) {
      if (sv[w] > sv[0] || (sv[w] == sv[0] && si[w] < si[0])) {
        sv[0] = sv[w];
        si[0] = si[w];
      }
    }
  }
  __syncthreads();
  return si[0];
}

__global__ void ArgmaxKernel(const float* logits, int64_t vocab, int32_t* out) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -INFINITY;
  int64_t best_i = vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (row[i] > best) {
      best = row[i];
      best_i = i;
    }
  }
  const int64_t r = BlockArgmax(best, best_i, sv, si);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(r < vocab ? r : 0);
}

// One block per row. Thresholds are found by a bitwise search over the key
// space (exact, 32 passes over the row each), then the draw scans the kept
// mass in token order over per-thread contiguous chunks.
__global__ void SampleKernel(const float* logits, int64_t vocab, float inv_t, int top_k,
                             float top_p, uint64_t seed, uint64_t step, int32_t* out) {
  __shared__ float scratch[32];
  __shared__ float chunk_sum[kThreads];
  __shared__ int found;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i]);
  mx = BlockMax(mx, scratch);

  // top_k: the largest key K with count(key >= K) >= k.
  uint32_t k_key = 0;
  if (top_k > 0 && top_k < vocab) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = k_key | (1u << bit);
      float cnt = 0.0f;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) cnt += Key(row[i]) >= cand;
      if (BlockSum(cnt, scratch) >= static_cast<float>(top_k)) k_key = cand;
    }
  }
  // Unnormalised probabilities exp((x - max) / T) over the top-k set.
  float z = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (Key(row[i]) >= k_key) z += expf((row[i] - mx) * inv_t);
  }
  z = BlockSum(z, scratch);
  // top_p: the largest key P with mass(key >= P) >= top_p * z.
  // mass(max(K, k_key)) is non-increasing in K, so the greedy bitwise search
  // from 0 finds the largest K; the kept set is key >= max(K, k_key).
  uint32_t p_key = 0;
  if (top_p < 1.0f) {
    const float target = top_p * z;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = p_key | (1u << bit);
      const uint32_t bound = cand > k_key ? cand : k_key;
      float mass = 0.0f;
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        if (Key(row[i]) >= bound) mass += expf((row[i] - mx) * inv_t);
      }
      if (BlockSum(mass, scratch) >= target) p_key = cand;
    }
  }
  if (p_key < k_key) p_key = k_key;
  // Draw: chunk sums, exclusive prefix in thread order, then the owning chunk scans.
  const int64_t chunk = (vocab + blockDim.x - 1) / blockDim.x;
  const int64_t b = threadIdx.x * chunk;
  const int64_t e = b + chunk < vocab ? b + chunk : vocab;
  float mine = 0.0f;
  for (int64_t i = b; i < e; ++i) {
    if (Key(row[i]) >= p_key) mine += expf((row[i] - mx) * inv_t);
  }
  chunk_sum[threadIdx.x] = mine;
  if (threadIdx.x == 0) found = -1;
  __syncthreads();
  if (threadIdx.x == 0) {
    float run = 0.0f;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
      const float s = chunk_sum[t];
      chunk_sum[t] = run;
      run += s;
    }
    scratch[0] = run;  // total kept mass in the scan's own rounding
  }
  __syncthreads();
  const float total = scratch[0];
  const float target = Uniform(seed, step, blockIdx.x) * total;
  float run = chunk_sum[threadIdx.x];
  // The chunks' [run, run + mine) intervals are disjoint (the scan adds them
  // in the same order), so exactly one thread owns the target.
  if (mine > 0.0f && run <= target && target < run + mine) {
    int64_t pick = -1;
    for (int64_t i = b; i < e; ++i) {
      if (Key(row[i]) < p_key) continue;
      const float w = expf((row[i] - mx) * inv_t);
      if (!(w > 0.0f)) continue;  // zero mass (-inf / underflow): never drawn
      pick = i;  // the chunk's last kept token if rounding runs past the end
      run += w;
      if (target < run) break;
    }
    found = static_cast<int>(pick);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int r = found;
    if (r < 0) {  // rounding at the very end: take the last kept token
      for (int64_t i = vocab - 1; i >= 0; --i) {
        if (Key(row[i]) >= p_key && expf((row[i] - mx) * inv_t) > 0.0f) {
          r = static_cast<int>(i);
          break;
        }
      }
    }
    out[blockIdx.x] = r < 0 ? 0 : r;
  }
}

}  // namespace

float SamplingUniform(uint64_t seed, uint64_t step, uint64_t row) {
  return Uniform(seed, step, row);
}

absl::Status ArgmaxRows(const float* logits, int64_t n, int64_t vocab, int32_t* out,
                        StreamHandle stream) {
  if (vocab <= 0 || vocab > 0x7fffffffLL || n > 0x7fffffffLL) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::ArgmaxRows: vocab=", vocab, " n=", n));
  }
  if (n <= 0) return absl::OkStatus();
  ArgmaxKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(logits, vocab, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("ArgmaxKernel");
  return absl::OkStatus();
}

absl::Status SampleRows(const float* logits, int64_t n, int64_t vocab,
                        const DeviceSamplingParams& params, uint64_t seed, uint64_t step,
                        int32_t* out, StreamHandle stream) {
  if (!std::isfinite(params.temperature) || params.temperature <= 0.0f || params.top_k < 0 ||
      !(params.top_p > 0.0f && params.top_p <= 1.0f) || vocab <= 0 || vocab > 0x7fffffffLL ||
      n > 0x7fffffffLL) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::SampleRows: temperature=", params.temperature, " top_k=", params.top_k,
                     " top_p=", params.top_p, " vocab=", vocab,
                     " (need temperature > 0, top_k >= 0, "
                     "top_p in (0, 1])"));
  }
  if (n <= 0) return absl::OkStatus();
  SampleKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      logits, vocab, 1.0f / params.temperature, params.top_k, params.top_p, seed, step, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("SampleKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
