#include "engine/ops/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/core/dtype.h"
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

void RouterLogits(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                  const TensorView& gate, const TensorView* bias, int top_k, RouterResult* out) {
  const int num_experts = static_cast<int>(gate.dim(0));
  out->n = n;
  out->num_experts = num_experts;
  out->top_k = top_k;
  out->logits.resize(static_cast<size_t>(n) * num_experts);
  out->experts.resize(static_cast<size_t>(n) * top_k);
  out->weights.resize(static_cast<size_t>(n) * top_k);
  Linear(pool, x, n, hidden, gate, bias, out->logits.data());
}

void Route(ThreadPool* pool, const float* x, int64_t n, int64_t hidden, const TensorView& gate,
           int top_k, bool renormalize, RouterResult* out) {
  RouterLogits(pool, x, n, hidden, gate, nullptr, top_k, out);
  const int num_experts = out->num_experts;
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

namespace {

// One sparsemixer pick over `scores` (pick 1) or `scores` with pick 1 at
// -inf (pick 2, `taken` >= 0): the argmax (first on ties, as torch.max) and
// its masked-softmax weight.
void SparseMixerPick(const float* logits, int num_experts, int taken, float two_eps, int* pick,
                     float* weight) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int best = -1;
  for (int e = 0; e < num_experts; ++e) {
    if (e == taken) continue;
    if (best < 0 || logits[e] > logits[best]) best = e;
  }
  const float m = logits[best];
  std::vector<float> gates(num_experts);
  float mx = kNegInf;
  for (int e = 0; e < num_experts; ++e) {
    const float factor = std::max(std::fabs(logits[e]), m);
    const bool masked = (m - logits[e]) / factor > two_eps;  // NaN (0 / 0) keeps it
    gates[e] = masked || e == taken ? kNegInf : logits[e];
    mx = std::max(mx, gates[e]);
  }
  float sum = 0;
  for (int e = 0; e < num_experts; ++e) {
    gates[e] = gates[e] == kNegInf ? 0.0f : std::exp(gates[e] - mx);
    sum += gates[e];
  }
  *pick = best;
  *weight = gates[best] / sum;
}

}  // namespace

void RouteSparseMixer(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                      const TensorView& gate, float jitter_eps, RouterResult* out) {
  const int num_experts = static_cast<int>(gate.dim(0));
  RouterLogits(pool, x, n, hidden, gate, nullptr, 2, out);
  const float two_eps = 2 * jitter_eps;
  for (int64_t t = 0; t < n; ++t) {
    const float* l = out->logits.data() + t * num_experts;
    int* idx = out->experts.data() + t * 2;
    float* w = out->weights.data() + t * 2;
    SparseMixerPick(l, num_experts, -1, two_eps, &idx[0], &w[0]);
    SparseMixerPick(l, num_experts, idx[0], two_eps, &idx[1], &w[1]);
  }
}

namespace {

// rows [n, cols] += bias [cols] (any float dtype).
void AddBias(const TensorView& bias, int64_t n, int64_t cols, float* rows) {
  std::vector<float> b(cols);
  ToFloat(bias.dtype, bias.data, b.size(), b.data());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < cols; ++c) rows[t * cols + c] += b[c];
  }
}

// y [n, out] = x [n, in] times a fused expert matrix, whichever orientation
// it is stored in (kFused: [out, in]; kFusedTransposed: [in, out]).
void FusedLinear(ThreadPool* pool, const ExpertWeights& w, const TensorView& m, const float* x,
                 int64_t n, int64_t in, float* y) {
  if (w.layout == ExpertWeights::Layout::kFused) {
    Linear(pool, x, n, in, m, nullptr, y);
  } else {
    LinearTransposed(pool, x, n, in, m, y);
  }
}

void ClampedSwigluForward(ThreadPool* pool, const ExpertWeights& w, const ClampedSwigluExpert& oss,
                          const float* x, int64_t n, int64_t hidden, int64_t intermediate,
                          float* y) {
  std::vector<float> gu(static_cast<size_t>(n) * 2 * intermediate);
  std::vector<float> act(static_cast<size_t>(n) * intermediate);
  FusedLinear(pool, w, w.gate_up, x, n, hidden, gu.data());
  AddBias(oss.gate_up_bias, n, 2 * intermediate, gu.data());
  for (int64_t i = 0; i < n * intermediate; ++i) {
    const float gate = std::min(gu[2 * i], oss.limit);
    const float up = std::clamp(gu[2 * i + 1], -oss.limit, oss.limit);
    act[i] = (up + 1.0f) * (gate / (1.0f + std::exp(-oss.alpha * gate)));
  }
  FusedLinear(pool, w, w.down, act.data(), n, intermediate, y);
  AddBias(oss.down_bias, n, hidden, y);
}

}  // namespace

void RouteTopKSoftmax(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                      const TensorView& gate, const TensorView& bias, int top_k,
                      RouterResult* out) {
  RouterLogits(pool, x, n, hidden, gate, &bias, top_k, out);
  const int num_experts = out->num_experts;
  for (int64_t t = 0; t < n; ++t) {
    int* idx = out->experts.data() + t * top_k;
    float* w = out->weights.data() + t * top_k;
    TopK(out->logits.data() + t * num_experts, num_experts, top_k, idx, w);
    const float mx = w[0];  // the largest: TopK sorts by decreasing value
    float sum = 0;
    for (int i = 0; i < top_k; ++i) sum += w[i] = std::exp(w[i] - mx);
    for (int i = 0; i < top_k; ++i) w[i] /= sum;
  }
}

void ExpertForward(ThreadPool* pool, const ExpertWeights& w, const float* x, int64_t n,
                   int64_t hidden, int64_t intermediate, float* y, const ClampedSwigluExpert* oss) {
  if (oss != nullptr) return ClampedSwigluForward(pool, w, *oss, x, n, hidden, intermediate, y);
  std::vector<float> act(static_cast<size_t>(n) * intermediate);
  if (w.layout != ExpertWeights::Layout::kSeparate) {
    // gate_up outputs [0, I) are gate, [I, 2I) are up (chunk(2)).
    std::vector<float> gu(static_cast<size_t>(n) * 2 * intermediate);
    FusedLinear(pool, w, w.gate_up, x, n, hidden, gu.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* row = gu.data() + t * 2 * intermediate;
      SiluMul(row, row + intermediate, intermediate, act.data() + t * intermediate);
    }
    FusedLinear(pool, w, w.down, act.data(), n, intermediate, y);
  } else {
    std::vector<float> up(static_cast<size_t>(n) * intermediate);
    Linear(pool, x, n, hidden, w.gate, nullptr, act.data());
    Linear(pool, x, n, hidden, w.up, nullptr, up.data());
    SiluMul(act.data(), up.data(), n * intermediate, act.data());
    Linear(pool, act.data(), n, intermediate, w.down, nullptr, y);
  }
}

}  // namespace vismoe::cpu
