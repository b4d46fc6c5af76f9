#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/moe_router.h"
#include "engine/ops/cuda/router_topk.cuh"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::WarpRouteToken;

constexpr int kWarpsPerBlock = 4;

// One warp per token; probabilities in shared memory ([warps][E] floats).
__global__ void RouterKernel(const float* logits, int64_t n, int num_experts, int top_k,
                             bool renormalize, int32_t* experts, float* weights) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= n) return;  // whole warp leaves together: no block barrier below
  WarpRouteToken(logits + t * num_experts, num_experts, top_k, renormalize,
                 smem + warp * num_experts, experts + t * top_k, weights + t * top_k);
}

// The warp's arg-max of the lanes' (best, best_e) candidates, every lane
// getting it: the larger value, ties to the lower index; `none` marks a lane
// without a candidate (it never wins). The whole warp must call it.
__device__ __forceinline__ void WarpArgMax(int none, float* best, int* best_e) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, *best, o);
    const int oe = __shfl_xor_sync(0xffffffffu, *best_e, o);
    if (oe != none && (*best_e == none || ob > *best || (ob == *best && oe < *best_e))) {
      *best = ob;
      *best_e = oe;
    }
  }
}

// One warp per token: the k largest logits by an arg-max per slot over a
// shared copy of the row (a picked one set to NaN, which no comparison
// takes), then exp(l - l_max) / sum in slot order, as the CPU sums.
__global__ void TopKSoftmaxKernel(const float* logits, int64_t n, int num_experts, int top_k,
                                  int32_t* experts, float* weights) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= n) return;  // whole warp leaves together: no block barrier below
  const float* row = logits + t * num_experts;
  float* p = smem + warp * num_experts;
  for (int e = lane; e < num_experts; e += kWarp) p[e] = row[e];
  __syncwarp();
  int my_e = -1;  // lane r keeps slot r
  float my_l = -INFINITY;
  for (int r = 0; r < top_k; ++r) {
    // -inf logits are ranked (by index) as cpu::TopK ranks them; taken ones
    // (and NaN logits) never are.
    float best = -INFINITY;
    int best_e = num_experts;
    for (int e = lane; e < num_experts; e += kWarp) {
      if (!isnan(p[e]) && (best_e == num_experts || p[e] > best)) {
        best = p[e];  // ascending e: keeps the lowest index among ties
        best_e = e;
      }
    }
    WarpArgMax(num_experts, &best, &best_e);
    if (lane == r) my_e = best_e, my_l = best;
    if (lane == 0 && best_e < num_experts) p[best_e] = NAN;  // taken
    __syncwarp();
  }
  const float mx = __shfl_sync(0xffffffffu, my_l, 0);  // slot 0 holds the largest
  const float w = lane < top_k && my_e < num_experts ? expf(my_l - mx) : 0.0f;
  float sum = 0.0f;
  for (int r = 0; r < top_k; ++r) sum += __shfl_sync(0xffffffffu, w, r);
  if (lane < top_k) {
    experts[t * top_k + lane] = my_e;
    weights[t * top_k + lane] = w / sum;
  }
}

// One sparsemixer pick of a warp's token: the arg-max over the logits but
// `taken`, and its weight exp(l_pick - mx) / sum over the unmasked logits
// (cpu::SparseMixerPick's comparisons, so NaN (0 / 0) keeps a logit).
__device__ void SparseMixerPick(const float* l, int num_experts, int taken, float two_eps, int* pick,
                                float* weight) {
  const int lane = threadIdx.x % kWarp;
  float best = -INFINITY;
  int best_e = num_experts;
  for (int e = lane; e < num_experts; e += kWarp) {
    if (e != taken && (best_e == num_experts || l[e] > best)) {
      best = l[e];
      best_e = e;
    }
  }
  WarpArgMax(num_experts, &best, &best_e);
  const float m = best;
  auto kept = [&](int e) {  // in the pick's softmax
    const float a = fabsf(l[e]);
    const float factor = a < m ? m : a;  // std::max(|l|, m)
    return e != taken && !((m - l[e]) / factor > two_eps);
  };
  float mx = -INFINITY;
  for (int e = lane; e < num_experts; e += kWarp) {
    if (kept(e)) mx = fmaxf(mx, l[e]);
  }
  mx = detail::WarpMax(mx);
  float sum = 0.0f;
  for (int e = lane; e < num_experts; e += kWarp) {
    if (kept(e)) sum += expf(l[e] - mx);
  }
  sum = detail::WarpSum(sum);
  *pick = best_e;
  *weight = expf(m - mx) / sum;
}

__global__ void SparseMixerKernel(const float* logits, int64_t n, int num_experts, float two_eps,
                                  int32_t* experts, float* weights) {
  const int warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= n) return;  // whole warp leaves together: no block barrier below
  const float* l = logits + t * num_experts;
  int first = 0, second = 0;
  float w0 = 0.0f, w1 = 0.0f;
  SparseMixerPick(l, num_experts, -1, two_eps, &first, &w0);
  SparseMixerPick(l, num_experts, first, two_eps, &second, &w1);
  if (threadIdx.x % kWarp == 0) {
    experts[t * 2] = first;
    experts[t * 2 + 1] = second;
    weights[t * 2] = w0;
    weights[t * 2 + 1] = w1;
  }
}

// The warp's pick among candidates [0, count) of `v` skipping NaN (taken)
// entries, larger first, ties to the lower index; `count` when none.
__device__ __forceinline__ int WarpPick(const float* v, int count) {
  const int lane = threadIdx.x % kWarp;
  float best = -INFINITY;
  int best_e = count;
  for (int e = lane; e < count; e += kWarp) {
    if (!isnan(v[e]) && (best_e == count || v[e] > best)) {
      best = v[e];  // ascending e: keeps the lowest index among ties
      best_e = e;
    }
  }
  WarpArgMax(count, &best, &best_e);
  return best_e;
}

// One warp per token over its shared [3][E] floats: the selection scores,
// the weights' source (probabilities or unbiased sigmoid scores) and the
// group scores; cpu::RouteGroupSoftmax / RouteGroupSigmoid step by step.
__global__ void GroupRouterKernel(const float* logits, int64_t n, int num_experts, GroupRouting g,
                                  int32_t* experts, float* weights) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= n) return;  // whole warp leaves together: no block barrier below
  const float* l = logits + t * num_experts;
  float* sel = smem + warp * 3 * num_experts;
  float* val = sel + num_experts;
  float* group = val + num_experts;
  if (g.sigmoid) {
    for (int e = lane; e < num_experts; e += kWarp) {
      val[e] = 1.0f / (1.0f + expf(-l[e]));
      sel[e] = val[e] + g.bias[e];
    }
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < num_experts; e += kWarp) mx = fmaxf(mx, l[e]);
    mx = detail::WarpMax(mx);
    float sum = 0.0f;
    for (int e = lane; e < num_experts; e += kWarp) sum += val[e] = expf(l[e] - mx);
    sum = detail::WarpSum(sum);
    for (int e = lane; e < num_experts; e += kWarp) sel[e] = val[e] /= sum;
  }
  __syncwarp();
  if (g.sigmoid || g.group_limited) {
    const int size = num_experts / g.n_group;
    for (int q = lane; q < g.n_group; q += kWarp) {
      float first = -INFINITY, second = -INFINITY;
      for (int e = q * size; e < (q + 1) * size; ++e) {
        if (sel[e] > first) {
          second = first;
          first = sel[e];
        } else if (sel[e] > second) {
          second = sel[e];
        }
      }
      group[q] = g.sigmoid ? first + second : first;
    }
    __syncwarp();
    int my_group = g.n_group;  // lane r keeps the r-th kept group (n_group: none)
    for (int r = 0; r < g.topk_group; ++r) {
      const int pick = WarpPick(group, g.n_group);
      if (lane == r) my_group = pick;
      if (lane == 0 && pick < g.n_group) group[pick] = NAN;  // taken
      __syncwarp();
    }
    // `group` becomes the kept flags (1 kept, 0 not): no shuffle in loops
    // whose trip count differs between lanes.
    for (int q = lane; q < g.n_group; q += kWarp) group[q] = 0.0f;
    __syncwarp();
    if (lane < g.topk_group && my_group < g.n_group) group[my_group] = 1.0f;
    __syncwarp();
    const float masked = g.sigmoid ? -INFINITY : 0.0f;
    for (int e = lane; e < num_experts; e += kWarp) {
      if (group[e / size] == 0.0f) sel[e] = masked;
    }
    __syncwarp();
  }
  int my_e = num_experts;  // lane r keeps slot r
  float my_w = 0.0f;
  for (int r = 0; r < g.top_k; ++r) {
    const int pick = WarpPick(sel, num_experts);
    if (lane == r && pick < num_experts) my_e = pick, my_w = g.sigmoid ? val[pick] : sel[pick];
    __syncwarp();
    if (lane == 0 && pick < num_experts) sel[pick] = NAN;  // taken
    __syncwarp();
  }
  float sum = 0.0f;  // slot order, as the CPU sums
  for (int r = 0; r < g.top_k; ++r) sum += __shfl_sync(0xffffffffu, my_w, r);
  if (lane < g.top_k) {
    float w = my_w;
    if (g.sigmoid && g.normalize) w /= sum + 1e-20f;
    experts[t * g.top_k + lane] = my_e;
    weights[t * g.top_k + lane] = w * g.scale;
  }
}

absl::Status CheckRouterShape(const char* op, int num_experts, int top_k) {
  if (num_experts <= 0 || num_experts > 1024 || top_k <= 0 || top_k > num_experts || top_k > 32) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::", op, ": num_experts=", num_experts,
                                                   " top_k=", top_k,
                                                   " (need 0 < top_k <= min(E, 32), E <= 1024)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeRouterTopKSoftmax(const float* logits, int64_t n, int num_experts, int top_k,
                                  int32_t* experts, float* weights, StreamHandle stream) {
  if (absl::Status st = CheckRouterShape("MoeRouterTopKSoftmax", num_experts, top_k); !st.ok()) {
    return st;
  }
  if (n <= 0) return absl::OkStatus();
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const size_t shmem = static_cast<size_t>(kWarpsPerBlock) * num_experts * sizeof(float);
  TopKSoftmaxKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, shmem, stream>>>(
      logits, n, num_experts, top_k, experts, weights);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("TopKSoftmaxKernel");
  return absl::OkStatus();
}

absl::Status MoeRouterSparseMixer(const float* logits, int64_t n, int num_experts,
                                  float jitter_eps, int32_t* experts, float* weights,
                                  StreamHandle stream) {
  if (absl::Status st = CheckRouterShape("MoeRouterSparseMixer", num_experts, 2); !st.ok()) {
    return st;
  }
  if (n <= 0) return absl::OkStatus();
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  SparseMixerKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(
      logits, n, num_experts, 2 * jitter_eps, experts, weights);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("SparseMixerKernel");
  return absl::OkStatus();
}

absl::Status MoeRouterTopK(const float* logits, int64_t n, int num_experts, int top_k,
                           bool renormalize, int32_t* experts, float* weights,
                           StreamHandle stream) {
  if (absl::Status st = CheckRouterShape("MoeRouterTopK", num_experts, top_k); !st.ok()) return st;
  if (n <= 0) return absl::OkStatus();
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const size_t shmem = static_cast<size_t>(kWarpsPerBlock) * num_experts * sizeof(float);
  RouterKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, shmem, stream>>>(
      logits, n, num_experts, top_k, renormalize, experts, weights);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RouterKernel");
  return absl::OkStatus();
}

absl::Status MoeRouterGroup(const float* logits, int64_t n, int num_experts, const GroupRouting& g,
                            int32_t* experts, float* weights, StreamHandle stream) {
  if (absl::Status st = CheckRouterShape("MoeRouterGroup", num_experts, g.top_k); !st.ok()) {
    return st;
  }
  const bool grouped = g.sigmoid || g.group_limited;  // else n_group is not read, as on the CPU
  if (grouped && (g.n_group <= 0 || num_experts % g.n_group != 0 || g.topk_group <= 0 ||
                  g.topk_group > std::min(g.n_group, kWarp) ||
                  (g.sigmoid && (g.bias == nullptr || num_experts / g.n_group < 2)))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda::MoeRouterGroup: ", num_experts, " experts in n_group=", g.n_group,
        " groups, topk_group=", g.topk_group,
        " (n_group divides the experts, 0 < topk_group <= min(n_group, 32)",
        g.sigmoid ? "; sigmoid: a bias and >= 2 experts per group)" : ")"));
  }
  if (n <= 0) return absl::OkStatus();
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const size_t shmem = static_cast<size_t>(kWarpsPerBlock) * 3 * num_experts * sizeof(float);
  GroupRouterKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, shmem, stream>>>(
      logits, n, num_experts, g, experts, weights);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("GroupRouterKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
