#include "engine/backends/cpu/cpu_latent_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/ops/cpu/dot.h"
#include "engine/ops/cpu/linear.h"
#include "engine/ops/cpu/rms_norm.h"

namespace vismoe::cpu {
namespace {

// transformers' q_a_layernorm and kv_a_layernorm use this eps, whatever
// rms_norm_eps says.
constexpr float kLatentNormEps = 1e-6f;

const TensorView* Bias(const TensorView& b) { return b.empty() ? nullptr : &b; }

// Rows [row0, row0 + rows) of the [rows_total, cols] view `w`.
TensorView RowsOf(const TensorView& w, int64_t row0, int64_t rows) {
  TensorView v{nullptr, w.dtype, {rows, w.dim(1)}, {}};
  v.data =
      static_cast<const char*>(w.data) + static_cast<size_t>(row0 * w.dim(1)) * DTypeSize(w.dtype);
  return v;
}

// The step's queries and new cache rows.
struct Projected {
  std::vector<float> q;       // [n, heads, qk_head_dim]; its rope parts are stale
  std::vector<float> q_pe;    // [n, heads, rope], rotated
  std::vector<float> latent;  // [n, kv_lora_rank], normed
  std::vector<float> k_pe;    // [n, rope], rotated
};

Projected Project(ThreadPool* pool, const TextConfig& c, const DecoderLayerWeights& w,
                  const RopeTable& rope, const float* x, int64_t n) {
  const TextConfig::Mla& m = *c.mla;
  const int64_t h = c.hidden_size, nh = c.num_attention_heads, dqk = m.qk_head_dim();
  const int64_t r = m.kv_lora_rank, dr = m.qk_rope_head_dim, dn = m.qk_nope_head_dim;
  Projected p;
  p.q.resize(n * nh * dqk);
  if (m.q_lora_rank > 0) {
    std::vector<float> qa(n * m.q_lora_rank);
    Linear(pool, x, n, h, w.q_a, Bias(w.q_a_bias), qa.data());
    RmsNorm(pool, qa.data(), n, m.q_lora_rank, w.q_a_norm, kLatentNormEps, qa.data());
    Linear(pool, qa.data(), n, m.q_lora_rank, w.q, nullptr, p.q.data());
  } else {
    Linear(pool, x, n, h, w.q, nullptr, p.q.data());
  }
  std::vector<float> ckv(n * (r + dr));
  Linear(pool, x, n, h, w.kv_a, Bias(w.kv_a_bias), ckv.data());
  p.latent.resize(n * r);
  p.k_pe.resize(n * dr);
  p.q_pe.resize(n * nh * dr);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(ckv.data() + i * (r + dr), r, p.latent.data() + i * r);
    std::copy_n(ckv.data() + i * (r + dr) + r, dr, p.k_pe.data() + i * dr);
    for (int64_t hh = 0; hh < nh; ++hh) {
      std::copy_n(p.q.data() + (i * nh + hh) * dqk + dn, dr, p.q_pe.data() + (i * nh + hh) * dr);
    }
  }
  RmsNorm(pool, p.latent.data(), n, r, w.kv_a_norm, kLatentNormEps, p.latent.data());
  const auto rotate = m.rope_interleave ? ApplyRopePairs : ApplyRope;
  rotate(pool, rope, p.q_pe.data(), n, static_cast<int>(nh), static_cast<int>(dr), nh * dr);
  rotate(pool, rope, p.k_pe.data(), n, 1, static_cast<int>(dr), dr);
  return p;
}

// One sequence: `rows` queries from step row `row0`, the cache holding
// `start` earlier rows and now these.
void AttendSequence(ThreadPool* pool, const TextConfig& c, const TensorView& kv_b,
                    const Projected& p, int64_t row0, int64_t rows, const KvCache& cache, int layer,
                    int64_t start, float* out) {
  const TextConfig::Mla& m = *c.mla;
  const int64_t nh = c.num_attention_heads, dqk = m.qk_head_dim(), dn = m.qk_nope_head_dim;
  const int64_t r = m.kv_lora_rank, dr = m.qk_rope_head_dim, dv = m.v_head_dim;
  const int64_t total = start + rows;
  std::vector<const float*> kv(total);  // each cached token's [latent | rope key]
  for (int64_t t = 0; t < total; ++t) kv[t] = cache.KeyRow(layer, t);
  // q_nope W_uk_h per head: [rows, heads, r].
  std::vector<float> absorbed(rows * nh * r), nope(rows * dn), tmp(rows * std::max(r, dv));
  for (int64_t hh = 0; hh < nh; ++hh) {
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(p.q.data() + ((row0 + i) * nh + hh) * dqk, dn, nope.data() + i * dn);
    }
    LinearTransposed(pool, nope.data(), rows, dn, RowsOf(kv_b, hh * (dn + dv), dn), tmp.data());
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(tmp.data() + i * r, r, absorbed.data() + (i * nh + hh) * r);
    }
  }
  const float scale = static_cast<float>(c.AttentionScale());
  std::vector<float> latent_out(rows * nh * r);
  ParallelFor(pool, rows * nh, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s(total);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t i = u / nh, hh = u % nh;
      const int64_t visible = start + i + 1;  // causal
      const float* qa = absorbed.data() + u * r;
      const float* qp = p.q_pe.data() + ((row0 + i) * nh + hh) * dr;
      float mx = -INFINITY;
      for (int64_t t = 0; t < visible; ++t) {
        s[t] = (Dot(qa, kv[t], r) + Dot(qp, kv[t] + r, dr)) * scale;
        mx = std::max(mx, s[t]);
      }
      float sum = 0;
      for (int64_t t = 0; t < visible; ++t) sum += s[t] = std::exp(s[t] - mx);
      float* o = latent_out.data() + u * r;
      std::fill(o, o + r, 0.0f);
      for (int64_t t = 0; t < visible; ++t) Axpy(s[t] / sum, kv[t], o, r);
    }
  });
  // W_uv_h (sum_t p_t c_t) per head into out [rows, heads * dv].
  std::vector<float> lat(rows * r);
  for (int64_t hh = 0; hh < nh; ++hh) {
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(latent_out.data() + (i * nh + hh) * r, r, lat.data() + i * r);
    }
    Linear(pool, lat.data(), rows, r, RowsOf(kv_b, hh * (dn + dv) + dn, dv), nullptr, tmp.data());
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(tmp.data() + i * dv, dv, out + ((row0 + i) * nh + hh) * dv);
    }
  }
}

}  // namespace

absl::Status LatentAttention(ThreadPool* pool, const TextConfig& c, const DecoderLayerWeights& w,
                             const RopeTable& rope, const float* x, int64_t n, int layer,
                             absl::Span<KvCache* const> caches, absl::Span<const int64_t> seq_rows,
                             float* out) {
  // An FP8 kv_b_proj (DeepSeek-V3's release) is read per head and
  // transposed, off its scale blocks: dequantised for the call, to the values
  // Linear would read. Its bytes are read once per step either way.
  std::vector<float> kv_b_f32;
  TensorView kv_b = w.kv_b;
  if (kv_b.dtype == DType::kF8E4M3) {
    kv_b_f32 = DequantizeF8(w.kv_b);
    kv_b = TensorView{kv_b_f32.data(), DType::kF32, w.kv_b.shape, {}};
  }
  const Projected p = Project(pool, c, w, rope, x, n);
  const int64_t r = c.mla->kv_lora_rank, dr = c.mla->qk_rope_head_dim;
  int64_t row0 = 0;
  for (size_t s = 0; s < caches.size(); ++s) {
    KvCache* cache = caches[s];
    const int64_t rows = seq_rows[s], start = cache->layer_length(layer);
    for (int64_t i = 0; i < rows; ++i) {
      float* row = cache->KeyRow(layer, start + i);
      std::copy_n(p.latent.data() + (row0 + i) * r, r, row);
      std::copy_n(p.k_pe.data() + (row0 + i) * dr, dr, row + r);
    }
    AttendSequence(pool, c, kv_b, p, row0, rows, *cache, layer, start, out);
    row0 += rows;
  }
  return absl::OkStatus();
}

}  // namespace vismoe::cpu
