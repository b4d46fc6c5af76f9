#include "engine/ops/cpu/group_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/ops/cpu/moe.h"

namespace vismoe::cpu {
namespace {

// Sets scores outside the topk_group best groups to `masked`; a group's
// score is its largest entry, or the sum of its two largest (`top2`). Ties
// keep the lower group, as torch.topk does on CPU.
void MaskGroups(float* scores, int num_experts, const GroupRouting& g, bool top2, float masked) {
  const int size = num_experts / g.n_group;
  std::vector<float> group(g.n_group);
  for (int q = 0; q < g.n_group; ++q) {
    const float* s = scores + q * size;
    float first = -std::numeric_limits<float>::infinity(), second = first;
    for (int e = 0; e < size; ++e) {
      if (s[e] > first) {
        second = first;
        first = s[e];
      } else if (s[e] > second) {
        second = s[e];
      }
    }
    group[q] = top2 ? first + second : first;
  }
  std::vector<int> keep(g.topk_group);
  std::vector<float> unused(g.topk_group);
  TopK(group.data(), g.n_group, g.topk_group, keep.data(), unused.data());
  for (int q = 0; q < g.n_group; ++q) {
    if (std::find(keep.begin(), keep.end(), q) != keep.end()) continue;
    std::fill(scores + q * size, scores + (q + 1) * size, masked);
  }
}

}  // namespace

void RouteGroupSoftmax(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                       const TensorView& gate, const GroupRouting& g, RouterResult* out) {
  RouterLogits(pool, x, n, hidden, gate, nullptr, g.top_k, out);
  const int num_experts = out->num_experts;
  std::vector<float> p(num_experts);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = out->logits.data() + t * num_experts;
    const float mx = *std::max_element(l, l + num_experts);
    float sum = 0;
    for (int e = 0; e < num_experts; ++e) sum += p[e] = std::exp(l[e] - mx);
    for (int e = 0; e < num_experts; ++e) p[e] /= sum;
    if (g.group_limited) MaskGroups(p.data(), num_experts, g, /*top2=*/false, 0.0f);
    int* idx = out->experts.data() + t * g.top_k;
    float* w = out->weights.data() + t * g.top_k;
    TopK(p.data(), num_experts, g.top_k, idx, w);
    for (int i = 0; i < g.top_k; ++i) w[i] *= g.scale;
  }
}

void RouteGroupSigmoid(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                       const TensorView& gate, const TensorView& bias, const GroupRouting& g,
                       RouterResult* out) {
  RouterLogits(pool, x, n, hidden, gate, nullptr, g.top_k, out);
  const int num_experts = out->num_experts;
  std::vector<float> b(num_experts), s(num_experts), select(num_experts), unused(g.top_k);
  ToFloat(bias.dtype, bias.data, b.size(), b.data());
  for (int64_t t = 0; t < n; ++t) {
    const float* l = out->logits.data() + t * num_experts;
    for (int e = 0; e < num_experts; ++e) {
      s[e] = 1.0f / (1.0f + std::exp(-l[e]));
      select[e] = s[e] + b[e];
    }
    MaskGroups(select.data(), num_experts, g, /*top2=*/true,
               -std::numeric_limits<float>::infinity());
    int* idx = out->experts.data() + t * g.top_k;
    float* w = out->weights.data() + t * g.top_k;
    TopK(select.data(), num_experts, g.top_k, idx, unused.data());
    float sum = 0;
    for (int i = 0; i < g.top_k; ++i) sum += w[i] = s[idx[i]];
    for (int i = 0; i < g.top_k; ++i) {
      if (g.normalize) w[i] /= sum + 1e-20f;
      w[i] *= g.scale;
    }
  }
}

}  // namespace vismoe::cpu
