#include "engine/backends/cpu/cpu_family_ops.h"

#include <algorithm>

#include "engine/ops/cpu/layer_norm.h"
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
                 int64_t n, int64_t h, const TensorView& router, RouterResult* out) {
  if (spec.router == RouterKind::kSparseMixer) {
    RouteSparseMixer(pool, x, n, h, router, c.router_jitter_noise, out);
  } else {
    Route(pool, x, n, h, router, c.num_experts_per_tok, spec.renormalize_topk, out);
  }
}

RopeTable FamilyRope(const TextConfig& c, const int64_t* positions, int64_t n,
                     absl::Span<const int64_t> seq_rows, absl::Span<const int64_t> rope_lengths) {
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
