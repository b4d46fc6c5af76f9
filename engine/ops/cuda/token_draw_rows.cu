#include <climits>

#include "absl/strings/str_cat.h"
#include "engine/core/token_draw.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/token_draw_rows.h"

namespace vismoe::cuda {
namespace {

using detail::kWarp;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarp;
constexpr int kBuckets = kTokenDrawBuckets;
constexpr int kBucketsPerLane = kBuckets / kWarp;
static_assert(kBuckets % kWarp == 0, "the bucket walk splits the buckets over a warp");
static_assert((kTokenDrawMaxMembers & (kTokenDrawMaxMembers - 1)) == 0, "bitonic sort size");

// TokenDrawBucket's operations, in the same order.
__device__ __forceinline__ int Bucket(double top, double scale, float logit) {
  const double b = (top - static_cast<double>(logit)) * scale;
  return b < kBuckets - 1 ? static_cast<int>(b) : kBuckets - 1;
}

// TokenPicker's weight: the float quotient, then double.
__device__ __forceinline__ double Weight(float logit, float temperature, double peak) {
  return exp(static_cast<double>(logit / temperature) - peak);
}

// TokenPicker's order: larger logit first, lower id on ties.
__device__ __forceinline__ bool Before(float la, int ia, float lb, int ib) {
  return la > lb || (la == lb && ia < ib);
}

__device__ __forceinline__ bool Reached(double mass, double target, bool strict) {
  return strict ? mass > target : mass >= target;
}

// The block's shared state.
struct Shared {
  double mass[kBuckets];  // summed weight per bucket
  float logit[kTokenDrawMaxMembers];
  int id[kTokenDrawMaxMembers];
  double weight[kTokenDrawMaxMembers];
  double red_d[kWarps];
  float red_lo[kWarps];
  float red_hi[kWarps];
  int red_i[kWarps];
  int count;    // members gathered
  int members;  // the bucket whose members the arrays hold; -1 none
  int bucket;   // a walk's crossing bucket, the mass before it
  double before;
  int rank;  // a walk's result: rank in the bucket, mass through it
  double through;
  int overflow;
};
// Within the 99 KB a block of sm_86 / sm_89 may have (sm_80, sm_90: more).
static_assert(sizeof(Shared) + 64 <= 99 * 1024, "shared memory of one block");

// Every thread gets the block's sum (double) / min, max (float) / max (int).
__device__ double BlockSum(double v, Shared& s) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % kWarp == 0) s.red_d[threadIdx.x / kWarp] = v;
  __syncthreads();
  double t = 0;
  for (int w = 0; w < kWarps; ++w) t += s.red_d[w];
  __syncthreads();
  return t;
}

__device__ void BlockRange(float* lo, float* hi, Shared& s) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    *lo = fminf(*lo, __shfl_xor_sync(0xffffffffu, *lo, o));
    *hi = fmaxf(*hi, __shfl_xor_sync(0xffffffffu, *hi, o));
  }
  if (threadIdx.x % kWarp == 0) s.red_lo[threadIdx.x / kWarp] = *lo, s.red_hi[threadIdx.x / kWarp] = *hi;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) *lo = fminf(*lo, s.red_lo[w]), *hi = fmaxf(*hi, s.red_hi[w]);
  __syncthreads();
}

__device__ int BlockMaxInt(int v, Shared& s) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % kWarp == 0) s.red_i[threadIdx.x / kWarp] = v;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) v = max(v, s.red_i[w]);
  __syncthreads();
  return v;
}

// Warp 0 finds the first bucket b < last where the cumulative mass reaches
// the target (b = last when none does): s.bucket, and s.before = the mass of
// the buckets before it. Each lane sums a run of buckets; a scan over the
// lanes picks the run, whose lane then walks it bucket by bucket.
__device__ void WalkBuckets(double target, bool strict, int last, Shared& s) {
  if (threadIdx.x >= kWarp) return;
  const int lane = threadIdx.x;
  const int first = lane * kBucketsPerLane;
  const int end = min(first + kBucketsPerLane, last);
  double run = 0;
  for (int b = first; b < end; ++b) run += s.mass[b];
  double incl = run;
  for (int o = 1; o < kWarp; o <<= 1) {
    const double t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0;
  const unsigned hit = __ballot_sync(0xffffffffu, first < end && Reached(incl, target, strict));
  const double total = __shfl_sync(0xffffffffu, incl, kWarp - 1);
  if (hit == 0) {
    if (lane == 0) s.bucket = last, s.before = total;
    return;
  }
  if (lane != __ffs(hit) - 1) return;
  // The run reaches the target: its first bucket that does, or (rounding
  // kept the walk short) its last bucket with weight.
  double m = excl;
  int pick = -1;
  double pick_before = m;
  for (int b = first; b < end; ++b) {
    if (s.mass[b] > 0) pick = b, pick_before = m;
    if (Reached(m + s.mass[b], target, strict)) {
      pick = b, pick_before = m;
      break;
    }
    m += s.mass[b];
  }
  s.bucket = pick >= 0 ? pick : last;
  s.before = pick >= 0 ? pick_before : total;
}

// Gathers and sorts the members of s.bucket unless the arrays hold them;
// s.overflow = 1 when there are none or more than fit.
__device__ void GatherMembers(const float* row, int64_t vocab, double top, double scale,
                              float temperature, double peak, Shared& s) {
  const int b = s.bucket;
  if (s.members == b) return;  // uniform: every thread reads the same
  __syncthreads();
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    if (Bucket(top, scale, x) != b) continue;
    const int k = atomicAdd(&s.count, 1);
    if (k < kTokenDrawMaxMembers) s.logit[k] = x, s.id[k] = static_cast<int>(i);
  }
  __syncthreads();
  const int n = s.count;
  if (n == 0 || n > kTokenDrawMaxMembers) {
    if (threadIdx.x == 0) s.overflow = 1;
    __syncthreads();
    return;
  }
  int p = 1;
  while (p < n) p <<= 1;
  for (int k = n + threadIdx.x; k < p; k += kThreads) s.logit[k] = -INFINITY, s.id[k] = INT_MAX;
  __syncthreads();
  // Bitonic sort of p entries into TokenPicker's order.
  for (int k = 2; k <= p; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < p; i += kThreads) {
        const int o = i ^ j;
        if (o <= i) continue;
        const bool ascending = (i & k) == 0;
        const bool swap = ascending ? Before(s.logit[o], s.id[o], s.logit[i], s.id[i])
                                    : Before(s.logit[i], s.id[i], s.logit[o], s.id[o]);
        if (swap) {
          const float tl = s.logit[i];
          const int ti = s.id[i];
          s.logit[i] = s.logit[o], s.id[i] = s.id[o];
          s.logit[o] = tl, s.id[o] = ti;
        }
      }
      __syncthreads();
    }
  }
  for (int k = threadIdx.x; k < n; k += kThreads) s.weight[k] = Weight(s.logit[k], temperature, peak);
  __syncthreads();
  if (threadIdx.x == 0) s.members = b;
  __syncthreads();
}

// TokenPicker::FindCut: s.bucket, s.rank, s.through; `limit_rank` >= 0
// stops the walk at that rank of bucket `last`.
__device__ void FindCut(const float* row, int64_t vocab, double top, double scale,
                        float temperature, double peak, double target, bool strict, int last,
                        int limit_rank, Shared& s) {
  WalkBuckets(target, strict, last, s);
  __syncthreads();
  GatherMembers(row, vocab, top, scale, temperature, peak, s);
  if (s.overflow != 0) return;
  if (threadIdx.x == 0) {
    const int end = (limit_rank >= 0 && s.bucket == last) ? limit_rank + 1 : s.count;
    double m = s.before;
    int rank = end - 1;
    for (int k = 0; k < end; ++k) {
      m += s.weight[k];
      if (Reached(m, target, strict)) {
        rank = k;
        break;
      }
    }
    s.rank = rank;
    s.through = m;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    DrawTokenRowsKernel(const float* logits, int64_t vocab, const DeviceTokenDraw* draws,
                        int32_t* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& s = *reinterpret_cast<Shared*>(smem);
  __shared__ DeviceTokenDraw s_draw;
  __shared__ int s_token;
  const int r = blockIdx.x;
  // One load of each from (perhaps host-mapped) memory, shared.
  if (threadIdx.x == 0) s_draw = draws[r], s_token = out[r];
  __syncthreads();
  const DeviceTokenDraw d = s_draw;
  // Greedy rows have their token, non-finite ones -1: nothing to draw.
  if (d.temperature == 0.0f || s_token < 0) return;
  if (d.top_k > 0 && d.top_k < vocab) {
    if (threadIdx.x == 0) out[r] = kDrawOnHost;
    return;
  }
  const float* row = logits + static_cast<int64_t>(r) * vocab;
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    lo = fminf(lo, row[i]);
    hi = fmaxf(hi, row[i]);
  }
  BlockRange(&lo, &hi, s);
  const double top = hi;
  const double peak = static_cast<double>(hi / d.temperature);  // the largest weight's exponent
  // A temperature so small that the quotient overflows: the greedy token
  // (TokenPicker's limit too), which GreedyArgmaxRows left in out[r].
  if (!isfinite(peak)) return;
  const double range = top - static_cast<double>(lo);
  const double scale = range > 0 ? kBuckets / range : 0.0;
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) s.mass[b] = 0;
  if (threadIdx.x == 0) s.members = -1, s.overflow = 0;
  __syncthreads();
  double sum = 0;
  int last = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    const double w = Weight(x, d.temperature, peak);
    const int b = Bucket(top, scale, x);
    atomicAdd(&s.mass[b], w);
    sum += w;
    last = max(last, b);
  }
  __syncthreads();
  sum = BlockSum(sum, s);
  last = BlockMaxInt(last, s);
  double kept = sum;
  int limit_bucket = last;
  int limit_rank = -1;
  if (d.top_p < 1.0f) {
    FindCut(row, vocab, top, scale, d.temperature, peak, d.top_p * sum, /*strict=*/false, last, -1,
            s);
    if (s.overflow != 0) {
      if (threadIdx.x == 0) out[r] = kDrawOnHost;
      return;
    }
    kept = s.through;
    limit_bucket = s.bucket;
    limit_rank = s.rank;
    __syncthreads();
  }
  FindCut(row, vocab, top, scale, d.temperature, peak, d.uniform * kept, /*strict=*/true,
          limit_bucket, limit_rank, s);
  if (threadIdx.x == 0) out[r] = s.overflow != 0 ? kDrawOnHost : s.id[s.rank];
}

}  // namespace

absl::Status DrawTokenRows(const float* logits, int64_t rows, int64_t vocab,
                           const DeviceTokenDraw* draws, int32_t* out, StreamHandle stream) {
  if (rows < 0 || rows > 65535 || vocab < 1 || vocab > 0x7fffffffLL ||
      (rows > 0 && (logits == nullptr || draws == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::DrawTokenRows: rows=", rows, " vocab=", vocab,
                     rows > 0 && draws == nullptr ? " without draws" : ""));
  }
  if (rows == 0) return absl::OkStatus();
  // More than the 48 KB of static shared memory: opted in (every launch, as
  // the setting is per device).
  VISMOE_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(DrawTokenRowsKernel,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(sizeof(Shared))));
  DrawTokenRowsKernel<<<static_cast<unsigned>(rows), kThreads, sizeof(Shared), stream>>>(
      logits, vocab, draws, out);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("DrawTokenRowsKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
