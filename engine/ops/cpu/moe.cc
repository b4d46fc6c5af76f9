#include "engine/ops/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/linear.h"

namespace vismoe::cpu {

void TopK(const float* p, int num_experts, int k, int* idx, float* val) {
  std::vector<int> order(num_experts);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [p](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  for (int i = 0; i < k; ++i) {
    idx[i] = order[i];
    val[i] = p[order[i]];
  }
}

void Route(ThreadPool* pool, const float* x, int64_t n, int64_t hidden, const TensorView& gate,
           int top_k, bool renormalize, RouterResult* out) {
  const int num_experts = static_cast<int>(gate.dim(0));
  out->n = n;
  out->num_experts = num_experts;
  out->top_k = top_k;
  out->logits.resize(static_cast<size_t>(n) * num_experts);
  out->experts.resize(static_cast<size_t>(n) * top_k);
  out->weights.resize(static_cast<size_t>(n) * top_k);
  Linear(pool, x, n, hidden, gate, nullptr, out->logits.data());
  std::vector<float> p(num_experts);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = out->logits.data() + t * num_experts;
    const float mx = *std::max_element(l, l + num_experts);
    float sum = 0;
    for (int e = 0; e < num_experts; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    for (int e = 0; e < num_experts; ++e) p[e] /= sum;
    int* idx = out->experts.data() + t * top_k;
    float* w = out->weights.data() + t * top_k;
    TopK(p.data(), num_experts, top_k, idx, w);
    if (renormalize) {
      float s = 0;
      for (int i = 0; i < top_k; ++i) s += w[i];
      for (int i = 0; i < top_k; ++i) w[i] /= s;
    }
  }
}

void ExpertForward(ThreadPool* pool, const ExpertWeights& w, const float* x, int64_t n,
                   int64_t hidden, int64_t intermediate, float* y) {
  std::vector<float> act(static_cast<size_t>(n) * intermediate);
  if (w.layout == ExpertWeights::Layout::kFusedTransposed) {
    // gate_up [H, 2I]: columns [0, I) are gate, [I, 2I) are up (chunk(2)).
    std::vector<float> gu(static_cast<size_t>(n) * 2 * intermediate);
    LinearTransposed(pool, x, n, hidden, w.gate_up, gu.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* row = gu.data() + t * 2 * intermediate;
      SiluMul(row, row + intermediate, intermediate, act.data() + t * intermediate);
    }
    LinearTransposed(pool, act.data(), n, intermediate, w.down, y);
  } else {
    std::vector<float> up(static_cast<size_t>(n) * intermediate);
    Linear(pool, x, n, hidden, w.gate, nullptr, act.data());
    Linear(pool, x, n, hidden, w.up, nullptr, up.data());
    SiluMul(act.data(), up.data(), n * intermediate, act.data());
    Linear(pool, act.data(), n, intermediate, w.down, nullptr, y);
  }
}

}  // namespace vismoe::cpu
