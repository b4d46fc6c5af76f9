// Mixture-of-experts pieces of the CPU reference backend: the softmax top-k
// router and the SwiGLU expert, as transformers' Qwen3-MoE / Qwen3-VL-MoE
// compute them.
#ifndef VISMOE_ENGINE_OPS_CPU_MOE_H_
#define VISMOE_ENGINE_OPS_CPU_MOE_H_

#include <cstdint>
#include <vector>

#include "engine/core/routing.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/offload/expert_provider.h"

namespace vismoe::cpu {

// Every router's first step: sizes `out` for n tokens of `top_k` slots and
// fills out->logits [n, E] = x W_g^T (+ bias [E] when not null).
void RouterLogits(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                  const TensorView& gate, const TensorView* bias, int top_k, RouterResult* out);

// logits = x W_g^T (x [n, hidden], W_g [E, hidden]); p = softmax(logits) in
// fp32; top_k largest p per token (ties: lower expert index first); weights =
// p / sum(top-k p) when `renormalize`, else p.
void Route(ThreadPool* pool, const float* x, int64_t n, int64_t hidden, const TensorView& gate,
           int top_k, bool renormalize, RouterResult* out);

// PhiMoE's sparsemixer at inference (transformers' sparsemixer, training
// off), two picks from logits = x W_g^T: pick 1 is the largest logit m; its
// weight is its probability in a softmax over the logits not masked, a logit
// l being masked when (m - l) / max(|l|, m) > 2 * jitter_eps. Pick 2 does the
// same over the logits with pick 1 removed (its threshold from their max,
// the ratios from the original logits). out: top_k 2, weights as computed.
void RouteSparseMixer(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                      const TensorView& gate, float jitter_eps, RouterResult* out);

// GPT-OSS's router: logits = x W_g^T + bias; the top_k logits (ties: lower
// index first) pick the experts, whose weights are a softmax over those k.
void RouteTopKSoftmax(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                      const TensorView& gate, const TensorView& bias, int top_k, RouterResult* out);

// Top-k of one probability row (ties: lower index first), by decreasing value.
void TopK(const float* p, int num_experts, int k, int* idx, float* val);

// GPT-OSS's expert, beside its weights: biases of gate_up [2I] and down [H],
// and the clamped SwiGLU on interleaved gate (even) / up (odd) columns:
// (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit).
struct ClampedSwigluExpert {
  TensorView gate_up_bias;  // [2I]
  TensorView down_bias;     // [H]
  float alpha = 1.702f;
  float limit = 7.0f;
};

// y [n, hidden] = (silu(x . gate) * (x . up)) . down for one expert, any
// layout of ExpertWeights (block-scaled MXFP4 / e4m3 weights decoded as
// read); with `oss`, GPT-OSS's expert instead (the fused layouts only).
// x [n, hidden]; `intermediate` is I.
// REQUIRES: the views have the shapes ExpertWeights documents.
void ExpertForward(ThreadPool* pool, const ExpertWeights& w, const float* x, int64_t n,
                   int64_t hidden, int64_t intermediate, float* y,
                   const ClampedSwigluExpert* oss = nullptr);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_MOE_H_
