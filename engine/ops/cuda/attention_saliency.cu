#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/ops/cuda/attention_saliency.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda {
namespace {

using detail::BlockSum;
using detail::kWarp;
using detail::LoadBf16;

constexpr int kRowsPerBlock = 4;      // pass 1: one warp per (query row, head)
constexpr int kKeyThreads = 256;      // pass 2: one block per key
constexpr int kMaxHeadDim = 256;      // as cuda::Attention
constexpr int kMaxKeyFloats = 12000;  // one key row in < 48 KiB of shared memory

// Pass 1. Row r = i * heads + h (query row i, head h); one warp per row. Lane
// t walks keys j = t, t + 32, ... with an online (max, mass) pair; the 32
// pairs merge through a fixed xor-shuffle tree (max and + are commutative, so
// every lane ends with the same values, and runs are bit-identical).
__global__ void SaliencyRowStatsKernel(const Bf16* q, int64_t q_stride, const Bf16* k,
                                       int64_t kv_stride, int64_t nq, int64_t nk, int heads,
                                       int group, int head_dim, bool causal, int64_t q_pos0,
                                       float scale, float* row_max, float* row_mass) {
  extern __shared__ float qs[];  // [kRowsPerBlock][head_dim]
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (r >= nq * heads) return;  // the whole warp leaves together
  const int64_t i = r / heads;
  const int h = static_cast<int>(r % heads);
  float* qw = qs + warp * head_dim;
  const Bf16* qi = q + i * q_stride + static_cast<int64_t>(h) * head_dim;
  for (int d = lane; d < head_dim; d += kWarp) qw[d] = LoadBf16(qi, d);
  __syncwarp();
  const Bf16* kh = k + static_cast<int64_t>(h / group) * head_dim;
  int64_t visible = nk;
  if (causal && q_pos0 + i + 1 < nk) visible = q_pos0 + i + 1;
  float m = -INFINITY;
  float l = 0.0f;
  for (int64_t j = lane; j < visible; j += kWarp) {
    const Bf16* kj = kh + j * kv_stride;
    float s = 0.0f;
    for (int d = 0; d < head_dim; ++d) s += qw[d] * LoadBf16(kj, d);
    s *= scale;
    if (s > m) {
      l = l * expf(m - s) + 1.0f;  // m = -inf: 0 * 0 + 1
      m = s;
    } else {
      l += expf(s - m);
    }
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o);
    const float lo = __shfl_xor_sync(0xffffffffu, l, o);
    const float mx = fmaxf(m, mo);
    const float a = m == -INFINITY ? 0.0f : l * expf(m - mx);
    const float b = mo == -INFINITY ? 0.0f : lo * expf(mo - mx);
    m = mx;
    l = a + b;
  }
  if (lane == 0) {
    row_max[r] = m;
    row_mass[r] = l;
  }
}

// Pass 2. Block j (one key): stages k[j] (all kv heads) in shared memory; each
// thread sums the probabilities of a fixed, strided subset of the rows that
// see key j; a fixed block reduction adds them up. norm = 1 / (heads * nq).
__global__ void SaliencyKeyKernel(const Bf16* q, int64_t q_stride, const Bf16* k, int64_t kv_stride,
                                  int64_t nq, int heads, int kv_heads, int group, int head_dim,
                                  bool causal, int64_t q_pos0, float scale, const float* row_max,
                                  const float* row_mass, float norm, float* key_saliency) {
  extern __shared__ float ks[];  // [kv_heads * head_dim]
  __shared__ float scratch[32];
  const int64_t j = blockIdx.x;
  const Bf16* kj = k + j * kv_stride;
  const int width = kv_heads * head_dim;
  for (int d = threadIdx.x; d < width; d += blockDim.x) ks[d] = LoadBf16(kj, d);
  __syncthreads();
  // Causal: query i sees key j iff j <= q_pos0 + i.
  int64_t first = 0;
  if (causal && j - q_pos0 > 0) first = j - q_pos0;
  const int64_t rows = nq * heads;
  float acc = 0.0f;
  for (int64_t r = first * heads + threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t i = r / heads;
    const int h = static_cast<int>(r % heads);
    const Bf16* qi = q + i * q_stride + static_cast<int64_t>(h) * head_dim;
    const float* kh = ks + (h / group) * head_dim;
    float s = 0.0f;
    for (int d = 0; d < head_dim; ++d) s += LoadBf16(qi, d) * kh[d];
    s *= scale;
    acc += expf(s - row_max[r]) * (1.0f / row_mass[r]);
  }
  const float total = BlockSum(acc, scratch);
  if (threadIdx.x == 0) key_saliency[j] = total * norm;
}

}  // namespace

int64_t AttentionSaliencyScratchFloats(int num_heads, int64_t nq) {
  return 2 * static_cast<int64_t>(num_heads) * nq;
}

absl::Status AttentionKeySaliency(const AttentionShape& shape, const Bf16* q, int64_t nq,
                                  const Bf16* k, int64_t nk, bool causal, int64_t q_pos0,
                                  float* row_stats, float* key_saliency, StreamHandle stream) {
  const int heads = shape.num_heads;
  const int kv_heads = shape.num_kv_heads;
  const int hd = shape.head_dim;
  if (nq < 1 || nk < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || hd < 1 ||
      hd > kMaxHeadDim || kv_heads * hd > kMaxKeyFloats || q_pos0 < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda::AttentionKeySaliency: bad shape nq=", nq, " nk=", nk, " heads=", heads,
                     " kv_heads=", kv_heads, " head_dim=", hd, " q_pos0=", q_pos0));
  }
  const int64_t rows = nq * heads;
  const int64_t blocks1 = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks1 > 0x7fffffffLL || nk > 0x7fffffffLL) {
    return absl::InvalidArgumentError("cuda::AttentionKeySaliency: too many rows");
  }
  const int64_t q_stride = shape.q_row_stride > 0 ? shape.q_row_stride : int64_t{heads} * hd;
  const int64_t kv_stride = shape.kv_row_stride > 0 ? shape.kv_row_stride : int64_t{kv_heads} * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));  // as cpu::Attention
  const int group = heads / kv_heads;
  float* row_max = row_stats;
  float* row_mass = row_stats + rows;
  SaliencyRowStatsKernel<<<static_cast<unsigned>(blocks1), kRowsPerBlock * kWarp,
                           kRowsPerBlock * hd * sizeof(float), stream>>>(
      q, q_stride, k, kv_stride, nq, nk, heads, group, hd, causal, q_pos0, scale, row_max,
      row_mass);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("SaliencyRowStatsKernel");
  const float norm = 1.0f / static_cast<float>(rows);  // as cpu::Attention
  SaliencyKeyKernel<<<static_cast<unsigned>(nk), kKeyThreads,
                      static_cast<size_t>(kv_heads) * hd * sizeof(float), stream>>>(
      q, q_stride, k, kv_stride, nq, heads, kv_heads, group, hd, causal, q_pos0, scale, row_max,
      row_mass, norm, key_saliency);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("SaliencyKeyKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
