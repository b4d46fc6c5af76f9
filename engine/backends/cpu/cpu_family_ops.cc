#include "engine/backends/cpu/cpu_family_ops.h"

#include <algorithm>
#include <vector>

#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/group_router.h"
#include "engine/ops/cpu/layer_norm.h"
#include "engine/ops/cpu/linear.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rms_norm.h"

namespace vismoe::cpu {

void FamilyNorm(ThreadPool* pool, const ArchSpec& spec, const float* in, int64_t rows, int64_t h,
                const TensorView& weight, const TensorView& bias, float eps, float* out) {
  if (spec.norm == NormKind::kLayerNorm) {
    LayerNorm(pool, in, rows, h, weight, bias, eps, out);
  } else {
    RmsNorm(pool, in, rows, h, weight, eps, out);
  }
}

void FamilyRoute(ThreadPool* pool, const ArchSpec& spec, const TextConfig& c, const float* x,
                 int64_t n, int64_t h, const DecoderLayerWeights& w, RouterResult* out) {
  GroupRouting g;
  g.top_k = c.num_experts_per_tok;
  g.n_group = c.n_group;
  g.topk_group = c.topk_group;
  g.group_limited = c.group_limited;
  g.normalize = c.norm_topk_prob;
  g.scale = c.routed_scaling_factor;
  switch (spec.router) {
    case RouterKind::kSparseMixer:
      return RouteSparseMixer(pool, x, n, h, w.router, c.router_jitter_noise, out);
    case RouterKind::kDeepseekSoftmax:
      return RouteGroupSoftmax(pool, x, n, h, w.router, g, out);
    case RouterKind::kDeepseekSigmoid:
      return RouteGroupSigmoid(pool, x, n, h, w.router, w.router_bias, g, out);
    case RouterKind::kTopKSoftmaxBiased:
      return RouteTopKSoftmax(pool, x, n, h, w.router, w.router_bias, c.num_experts_per_tok, out);
    case RouterKind::kSoftmaxTopK:
      break;
  }
  Route(pool, x, n, h, w.router, c.num_experts_per_tok, spec.renormalize_topk, out);
}

std::optional<ClampedSwigluExpert> FamilyExpertExtras(const TextConfig& c,
                                                      const DecoderLayerWeights& w, int e) {
  if (!c.clamped_swiglu.has_value()) return std::nullopt;
  ClampedSwigluExpert oss;
  oss.gate_up_bias = w.experts_gate_up_bias.Row(e);
  oss.down_bias = w.experts_down_bias.Row(e);
  oss.alpha = c.clamped_swiglu->alpha;
  oss.limit = c.clamped_swiglu->limit;
  return oss;
}

void AddSharedExperts(ThreadPool* pool, const TextConfig& c, const DecoderLayerWeights& w,
                      const float* in, int64_t n, int64_t h, float* x) {
  if (w.shared_gate.empty()) return;
  const int64_t si = int64_t{c.n_shared_experts} * c.moe_intermediate_size;
  std::vector<float> gate(n * si), up(n * si), y(n * h);
  Linear(pool, in, n, h, w.shared_gate, nullptr, gate.data());
  Linear(pool, in, n, h, w.shared_up, nullptr, up.data());
  SiluMul(gate.data(), up.data(), n * si, gate.data());
  Linear(pool, gate.data(), n, si, w.shared_down, nullptr, y.data());
  for (int64_t i = 0; i < n * h; ++i) x[i] += y[i];
}

RopeTable FamilyRope(const TextConfig& c, const int64_t* positions, int64_t n,
                     absl::Span<const int64_t> seq_rows, absl::Span<const int64_t> rope_lengths) {
  if (c.yarn.has_value()) {
    const TextConfig::Yarn& y = *c.yarn;
    RopeTable t = BuildRopeTable(
        positions, n, c.head_dim,
        YarnInvFreq(c.head_dim, c.rope_theta, y.factor, y.original_max_position_embeddings,
                    y.beta_fast, y.beta_slow, y.truncate));
    ScaleRopeRows(&t, 0, n, static_cast<float>(YarnAttentionFactor(y)));
    return t;
  }
  if (!c.longrope.has_value()) {
    return BuildRopeTable(positions, n, c.head_dim, c.rope_theta, c.mrope_section);
  }
  const TextConfig::LongRope& lr = *c.longrope;
  RopeTable t = BuildRopeTable(positions, n, c.head_dim, c.rope_theta, {}, &lr.short_factor);
  int64_t row = 0;
  for (size_t s = 0; s < seq_rows.size(); ++s) {
    const int64_t rows = seq_rows[s];
    int64_t length = s < rope_lengths.size() ? rope_lengths[s] : 0;
    for (int64_t i = row; i < row + rows && i < n; ++i) length = std::max(length, positions[i] + 1);
    const bool long_context = length > lr.original_max_position_embeddings;
    ScaleRopeRows(&t, row, std::min(rows, n - row),
                  static_cast<float>(long_context ? lr.long_mscale : lr.short_mscale));
    row += rows;
  }
  return t;
}

}  // namespace vismoe::cpu
