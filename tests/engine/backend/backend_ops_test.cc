// Every op of DecoderOps, on every compiled backend that can run here, over a
// table of models and step shapes (llama.cpp's test-backend-ops, our way).
// The CPU backend is checked against a plain double-precision reference
// written here from the math (llm.c's habit: a textbook loop beside each fast
// kernel); every other backend is checked against the CPU backend with a
// bf16-scaled tolerance. Ops run in the order the decoder runs them and each
// op's output is compared right after it; Experts takes the backend's own
// routing, so a near-tie in the router cannot make the MoE comparison fail.
// The reference reads expert weights from the checkpoint's host views
// whatever memory the backend reads them from. A second pass runs every
// pinned MoE layer through DeviceMoe (the device hit path; on the CPU the
// HostDeferredMoe protocol) and checks what TakeDeferred hands the host; a
// third rewrites each layer's routing as expert skipping and the commit miss
// policy do before Experts. A backend whose probe fails here (cuda without a
// GPU) is reported as skipped.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backends/registry.h"
#include "engine/core/dtype.h"
#include "engine/model/arch_spec.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_weights.h"
#include "engine/model/text_weights.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_expert_provider.h"
#include "engine/offload/resident_expert_provider.h"
#include "engine/ops/cpu/rope.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/reference_math.h"

namespace vismoe {
namespace {

using testing::AsDouble;
using testing::ExpectClose;
using testing::MatMulT;
using testing::Pattern;

// ---- The models of the table ------------------------------------------------

struct Model {
  std::string name;
  ModelConfig config;
  std::unique_ptr<Checkpoint> ckpt;
};

ModelConfig Load(const std::string& dir) {
  auto c = ModelConfig::Load(dir);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

// The fixtures as published (VL: M-RoPE, fused bf16 experts, DeepStack;
// text: plain RoPE, per-expert f16, and its FP8 release (block-scaled
// linears and experts, read in FP8 by DeviceMoe's kernels); OLMoE: q/k norms over the whole
// projection and clip_qkv; Mixtral: no q/k norms, an 8-token sliding window;
// PhiMoE: LayerNorms, attention and lm_head biases, the sparsemixer,
// LongRoPE over an original context of 24; GPT-OSS in MXFP4: sinks, sliding
// layers, YaRN, the biased top-k-then-softmax router, experts as published
// with biases and the clamped SwiGLU) and synthetic variants with the branches no fixture of a
// family the backends share has (a dense layer, attention biases, tied
// embeddings; attention sinks with a window). OLMoE, Mixtral and PhiMoE run
// on seeded synthetic weights of their fixtures' configs (the GPU bundle
// carries those configs, not their checkpoints); the others' checkpoints
// hold what synthesis does not make (M-RoPE with DeepStack, FP8, MXFP4).
std::vector<Model> Models() {
  std::vector<Model> out;
  for (const char* name :
       {"tiny-qwen3-vl-moe", "tiny-qwen3-moe", "tiny-qwen3-moe-fp8", "tiny-olmoe-clip",
        "tiny-mixtral-swa", "tiny-phimoe-longrope", "tiny-gpt-oss-mxfp4"}) {
    const std::string dir = testing::FixturesDir() + "/" + name;
    const std::string_view n(name);
    const bool synthetic =
        n == "tiny-olmoe-clip" || n == "tiny-mixtral-swa" || n == "tiny-phimoe-longrope";
    ModelConfig config = Load(dir);
    auto ckpt = synthetic
                    ? SynthesizeCheckpoint(config, 17, nullptr, std::string("synthetic:") + name)
                    : Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    if (ckpt.ok()) out.push_back({name, config, *std::move(ckpt)});
  }
  ModelConfig dense = Load(testing::FixturesDir() + "/tiny-qwen3-moe");
  dense.text.mlp_only_layers = {0};
  dense.text.attention_bias = true;
  dense.text.tie_word_embeddings = true;
  auto ckpt = SynthesizeCheckpoint(dense, 7, nullptr, "synthetic:dense");
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (ckpt.ok()) out.push_back({"synthetic-dense-bias-tied", dense, *std::move(ckpt)});
  ModelConfig sinks = Load(testing::FixturesDir() + "/tiny-qwen3-moe");
  sinks.text.attention_sinks = true;
  sinks.text.sliding_window = 4;
  auto sinks_ckpt = SynthesizeCheckpoint(sinks, 11, nullptr, "synthetic:sinks");
  EXPECT_TRUE(sinks_ckpt.ok()) << sinks_ckpt.status();
  if (sinks_ckpt.ok()) out.push_back({"synthetic-sinks-window", sinks, *std::move(sinks_ckpt)});
  // DeepSeek's shapes from their fixtures' configs, with seeded synthetic
  // weights (the GPU bundle carries the configs, not the checkpoints):
  // V2 (q_lora, group-limited softmax, YaRN with an attention factor), V3
  // (sigmoid with the selection bias, normalised, scaled), V3 "plain"
  // (rotate_half rope, attention biases, two dense layers, two shared
  // experts), V2-Lite (one q_proj, greedy softmax), and DeepSeek-VL2's language
  // models (multi-head attention with greedy softmax; latent attention with the
  // biased sigmoid), whose visual rows come from its tower.
  for (const char* name : {"tiny-deepseek-v2", "tiny-deepseek-v3", "tiny-deepseek-v3-plain",
                           "tiny-deepseek-v2-lite", "tiny-deepseek-vl2", "tiny-deepseek-vl2-mla"}) {
    ModelConfig config = Load(testing::FixturesDir() + "/" + name);
    auto synthetic = SynthesizeCheckpoint(config, 13, nullptr, std::string("synthetic:") + name);
    EXPECT_TRUE(synthetic.ok()) << synthetic.status();
    if (synthetic.ok()) {
      out.push_back({std::string("synthetic-") + (name + 5), config, *std::move(synthetic)});
    }
  }
  return out;
}

// ---- The reference ----------------------------------------------------------

void RmsNormRows(std::vector<double>& x, int64_t rows, int64_t dim, const TensorView& g, double eps,
                 int64_t stride, int64_t offset) {
  const std::vector<double> gd = AsDouble(g);
  for (int64_t r = 0; r < rows; ++r) {
    double* v = x.data() + r * stride + offset;
    double ss = 0;
    for (int64_t d = 0; d < dim; ++d) ss += v[d] * v[d];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t d = 0; d < dim; ++d) v[d] = v[d] * inv * gd[d];
  }
}

// torch.nn.LayerNorm: biased variance, weight and bias.
void LayerNormRows(std::vector<double>& x, int64_t rows, int64_t dim, const TensorView& g,
                   const TensorView& b, double eps) {
  const std::vector<double> gd = AsDouble(g), bd = AsDouble(b);
  for (int64_t r = 0; r < rows; ++r) {
    double* v = x.data() + r * dim;
    double mean = 0, var = 0;
    for (int64_t d = 0; d < dim; ++d) mean += v[d];
    mean /= dim;
    for (int64_t d = 0; d < dim; ++d) var += (v[d] - mean) * (v[d] - mean);
    const double inv = 1.0 / std::sqrt(var / dim + eps);
    for (int64_t d = 0; d < dim; ++d) v[d] = (v[d] - mean) * inv * gd[d] + bd[d];
  }
}

double Silu(double v) { return v / (1.0 + std::exp(-v)); }

// The math of one decoder step, in double, over the same TextWeights.
class ReferenceStep {
 public:
  ReferenceStep(const ModelConfig& config, const TextWeights& w,
                std::vector<std::vector<double>>* k_cache,
                std::vector<std::vector<double>>* v_cache, int64_t cache_len)
      : c_(config.text),
        w_(w),
        spec_(*ArchSpec::For(config)),
        qk_norm_(spec_.qk_norm),
        k_(k_cache),
        v_(v_cache),
        start_(cache_len) {}

  void Begin(const std::vector<int>& ids, const std::vector<int64_t>& positions) {
    n_ = static_cast<int64_t>(ids.size());
    const int64_t h = c_.hidden_size;
    hs_.assign(n_ * h, 0.0);
    for (int64_t t = 0; t < n_; ++t) {
      std::vector<float> row(h);
      const TensorView e = w_.embed.Row(ids[t]);
      ToFloat(e.dtype, e.data, h, row.data());
      std::copy(row.begin(), row.end(), hs_.begin() + t * h);
    }
    positions_ = positions;
  }
  // Visual rows take `embeds` [rows, hidden] in order.
  void ReplaceRows(const std::vector<int64_t>& rows, const std::vector<float>& embeds) {
    const int64_t h = c_.hidden_size;
    visual_rows_ = rows;
    for (size_t i = 0; i < rows.size(); ++i) {
      std::copy(embeds.begin() + i * h, embeds.begin() + (i + 1) * h, hs_.begin() + rows[i] * h);
    }
  }
  void AddDeepStack(const std::vector<float>& feature) {
    const int64_t h = c_.hidden_size;
    for (size_t i = 0; i < visual_rows_.size(); ++i) {
      if (visual_rows_[i] < 0) continue;
      for (int64_t d = 0; d < h; ++d) hs_[visual_rows_[i] * h + d] += feature[i * h + d];
    }
  }
  void KeepRows(const std::vector<int64_t>& kept, const std::vector<int64_t>& positions,
                const std::vector<int64_t>& visual_rows) {
    const int64_t h = c_.hidden_size;
    std::vector<double> hs(kept.size() * h);
    for (size_t i = 0; i < kept.size(); ++i) {
      std::copy(hs_.begin() + kept[i] * h, hs_.begin() + (kept[i] + 1) * h, hs.begin() + i * h);
    }
    hs_ = std::move(hs);
    n_ = static_cast<int64_t>(kept.size());
    positions_ = positions;
    visual_rows_ = visual_rows;
  }
  void Norm(int layer, NormSite site) {
    const DecoderLayerWeights& l = w_.layers[layer];
    const bool input = site == NormSite::kInput;
    x_ = hs_;
    if (spec_.norm == NormKind::kLayerNorm) {
      LayerNormRows(x_, n_, c_.hidden_size, input ? l.input_norm : l.post_norm,
                    input ? l.input_norm_bias : l.post_norm_bias, c_.rms_norm_eps);
      return;
    }
    RmsNormRows(x_, n_, c_.hidden_size, input ? l.input_norm : l.post_norm, c_.rms_norm_eps,
                c_.hidden_size, 0);
  }
  void Attention(int layer);
  // y = the MoE of x with the given routing (ids and combine weights), and
  // the shared experts (DeepSeek).
  void Experts(int layer, const RouterResult& r, ExpertProvider* experts);
  // The router's scores on x, whose top-k are the chosen experts: softmax
  // probabilities, GPT-OSS's biased logits, the sparsemixer's logits, or
  // DeepSeek's selection scores with the groups not kept masked.
  std::vector<double> RouterProbs(int layer) const;
  // The combine weights of the experts `r` chose (softmax top-k and
  // DeepSeek's routers); empty for the others.
  std::vector<double> RouterWeights(int layer, const RouterResult& r) const;
  void AddY() {
    for (size_t i = 0; i < hs_.size(); ++i) hs_[i] += y_[i];
  }
  void DenseMlp(int layer) {
    const DecoderLayerWeights& l = w_.layers[layer];
    const int64_t h = c_.hidden_size, in = c_.intermediate_size;
    std::vector<double> g = MatMulT(x_, n_, h, l.gate_proj, {});
    const std::vector<double> u = MatMulT(x_, n_, h, l.up_proj, {});
    for (size_t i = 0; i < g.size(); ++i) g[i] = Silu(g[i]) * u[i];
    y_ = MatMulT(g, n_, in, l.down_proj, {});
    AddY();
  }
  std::vector<double> Logits() const {
    const int64_t h = c_.hidden_size;
    std::vector<double> last(hs_.end() - h, hs_.end());
    if (spec_.norm == NormKind::kLayerNorm) {
      LayerNormRows(last, 1, h, w_.final_norm, w_.final_norm_bias, c_.rms_norm_eps);
    } else {
      RmsNormRows(last, 1, h, w_.final_norm, c_.rms_norm_eps, h, 0);
    }
    return MatMulT(last, 1, h, w_.lm_head, w_.lm_head_bias);
  }
  const std::vector<double>& hs() const { return hs_; }
  const std::vector<double>& x() const { return x_; }
  const std::vector<double>& y() const { return y_; }

 private:
  // RoPE on `heads` heads of head_dim per row (rows `stride` apart):
  // rotate_half, or the pairs (2j, 2j + 1) (DeepSeek's interleaved rope).
  void Rope(std::vector<double>& v, int heads, int64_t stride, bool pairs = false) const;
  // Multi-head latent attention as transformers writes it: every cached
  // latent expanded into per-head keys and values by kv_b_proj (the
  // backends fold kv_b_proj into the query and output instead).
  void LatentAttention(int layer);
  // DeepSeek's selection scores of x [n, E] with the groups not kept masked
  // (0 for softmax, -inf for sigmoid), and the unmasked weights' source
  // (probabilities or sigmoid scores) in `source`.
  std::vector<double> DeepseekScores(int layer, std::vector<double>* source) const;

  const TextConfig& c_;
  const TextWeights& w_;
  const ArchSpec spec_;
  const QkNormScope qk_norm_;
  std::vector<std::vector<double>>* k_;  // per layer, [tokens, kv_heads * head_dim]
  std::vector<std::vector<double>>* v_;
  int64_t start_ = 0;
  int64_t n_ = 0;
  std::vector<int64_t> positions_;    // [3][n]
  std::vector<int64_t> visual_rows_;  // row of each visual token, -1 once dropped
  std::vector<double> hs_, x_, y_;
};

// rotate_half RoPE; interleaved M-RoPE picks the h axis for j % 3 == 1 below
// 3 * section[1] and the w axis for j % 3 == 2 below 3 * section[2].
void ReferenceStep::Rope(std::vector<double>& v, int heads, int64_t stride, bool pairs) const {
  const int hd = c_.head_dim, half = hd / 2;
  // YaRN's and LongRoPE's frequencies as the CPU op defines them, and their
  // cos / sin scale: YaRN's attention factor, or LongRoPE's mscale by the
  // sequence's length (this step's one sequence: start + n).
  std::vector<float> freqs;
  double scale = 1.0;
  if (c_.yarn.has_value()) {
    const TextConfig::Yarn& y = *c_.yarn;
    freqs = cpu::YarnInvFreq(hd, c_.rope_theta, y.factor, y.original_max_position_embeddings,
                             y.beta_fast, y.beta_slow, y.truncate);
    scale = static_cast<float>(YarnAttentionFactor(y));
  } else if (c_.longrope.has_value()) {
    const TextConfig::LongRope& lr = *c_.longrope;
    freqs = cpu::LongRopeInvFreq(hd, c_.rope_theta, lr.short_factor);
    scale = static_cast<float>(start_ + n_ > lr.original_max_position_embeddings ? lr.long_mscale
                                                                                 : lr.short_mscale);
  }
  for (int64_t t = 0; t < n_; ++t) {
    for (int j = 0; j < half; ++j) {
      int axis = 0;
      if (!c_.mrope_section.empty()) {
        if (j % 3 == 1 && j < 3 * c_.mrope_section[1]) axis = 1;
        if (j % 3 == 2 && j < 3 * c_.mrope_section[2]) axis = 2;
      }
      const float inv_freq = freqs.empty()
                                 ? static_cast<float>(1.0 / std::pow(c_.rope_theta, 2.0 * j / hd))
                                 : freqs[j];
      const float angle = static_cast<float>(positions_[axis * n_ + t]) * inv_freq;
      const double cs = scale * std::cos(static_cast<double>(angle));
      const double sn = scale * std::sin(static_cast<double>(angle));
      for (int hh = 0; hh < heads; ++hh) {
        double* p = v.data() + t * stride + hh * hd;
        const int ia = pairs ? 2 * j : j, ib = pairs ? 2 * j + 1 : j + half;
        const double a = p[ia], b = p[ib];
        p[ia] = a * cs - b * sn;
        p[ib] = b * cs + a * sn;
      }
    }
  }
}

void ReferenceStep::Attention(int layer) {
  if (c_.mla.has_value()) return LatentAttention(layer);
  const DecoderLayerWeights& l = w_.layers[layer];
  const int64_t h = c_.hidden_size, hd = c_.head_dim;
  const int nh = c_.num_attention_heads, nkv = c_.num_key_value_heads;
  const int64_t qd = nh * hd, kvd = nkv * hd;
  std::vector<double> q = MatMulT(x_, n_, h, l.q, l.q_bias);
  std::vector<double> k = MatMulT(x_, n_, h, l.k, l.k_bias);
  std::vector<double> v = MatMulT(x_, n_, h, l.v, l.v_bias);
  switch (qk_norm_) {
    case QkNormScope::kPerHead:
      RmsNormRows(q, n_ * nh, hd, l.q_norm, c_.rms_norm_eps, hd, 0);
      RmsNormRows(k, n_ * nkv, hd, l.k_norm, c_.rms_norm_eps, hd, 0);
      break;
    case QkNormScope::kProjection:  // OLMoE
      RmsNormRows(q, n_, qd, l.q_norm, c_.rms_norm_eps, qd, 0);
      RmsNormRows(k, n_, kvd, l.k_norm, c_.rms_norm_eps, kvd, 0);
      break;
    case QkNormScope::kNone:
      break;
  }
  if (c_.clip_qkv > 0) {
    for (std::vector<double>* t : {&q, &k, &v}) {
      for (double& e : *t) e = std::clamp<double>(e, -c_.clip_qkv, c_.clip_qkv);
    }
  }
  Rope(q, nh, qd);
  Rope(k, nkv, kvd);
  std::vector<double>& kc = (*k_)[layer];
  std::vector<double>& vc = (*v_)[layer];
  kc.insert(kc.end(), k.begin(), k.end());
  vc.insert(vc.end(), v.begin(), v.end());
  std::vector<double> attn(n_ * qd, 0.0);
  const int64_t window = c_.LayerWindow(layer);
  for (int64_t t = 0; t < n_; ++t) {
    const int64_t keys = start_ + t + 1;  // causal
    // A sliding window sees the last `window` keys, its own included.
    const int64_t first = window > 0 ? std::max<int64_t>(0, keys - window) : 0;
    for (int hh = 0; hh < nh; ++hh) {
      const int kvh = hh / (nh / nkv);
      std::vector<double> s(keys - first);
      for (int64_t j = first; j < keys; ++j) {
        double d = 0;
        for (int64_t e = 0; e < hd; ++e) d += q[t * qd + hh * hd + e] * kc[j * kvd + kvh * hd + e];
        s[j - first] = d / std::sqrt(static_cast<double>(hd));
      }
      // A sink logit joins the softmax's denominator only.
      const double sink = l.sinks.empty() ? -INFINITY : AsDouble(l.sinks)[hh];
      const double mx = std::max(sink, *std::max_element(s.begin(), s.end()));
      double z = l.sinks.empty() ? 0.0 : std::exp(sink - mx);
      for (double& e : s) z += (e = std::exp(e - mx));
      for (int64_t j = first; j < keys; ++j) {
        for (int64_t e = 0; e < hd; ++e) {
          attn[t * qd + hh * hd + e] += s[j - first] / z * vc[j * kvd + kvh * hd + e];
        }
      }
    }
  }
  y_ = MatMulT(attn, n_, qd, l.o, l.o_bias);
  AddY();
}

void ReferenceStep::LatentAttention(int layer) {
  const DecoderLayerWeights& l = w_.layers[layer];
  const TextConfig::Mla& m = *c_.mla;
  const int64_t h = c_.hidden_size, nh = c_.num_attention_heads, r = m.kv_lora_rank;
  const int64_t dr = m.qk_rope_head_dim, dn = m.qk_nope_head_dim, dv = m.v_head_dim;
  const int64_t dqk = dn + dr, row = r + dr;
  constexpr double kLatentEps = 1e-6;  // transformers' q_a / kv_a norms
  std::vector<double> q;
  if (m.q_lora_rank > 0) {
    std::vector<double> qa = MatMulT(x_, n_, h, l.q_a, l.q_a_bias);
    RmsNormRows(qa, n_, m.q_lora_rank, l.q_a_norm, kLatentEps, m.q_lora_rank, 0);
    q = MatMulT(qa, n_, m.q_lora_rank, l.q, {});
  } else {
    q = MatMulT(x_, n_, h, l.q, {});
  }
  std::vector<double> ckv = MatMulT(x_, n_, h, l.kv_a, l.kv_a_bias);
  RmsNormRows(ckv, n_, r, l.kv_a_norm, kLatentEps, row, 0);
  std::vector<double> q_pe(n_ * nh * dr), k_pe(n_ * dr);
  for (int64_t t = 0; t < n_; ++t) {
    for (int64_t hh = 0; hh < nh; ++hh) {
      for (int64_t d = 0; d < dr; ++d)
        q_pe[(t * nh + hh) * dr + d] = q[(t * nh + hh) * dqk + dn + d];
    }
    for (int64_t d = 0; d < dr; ++d) k_pe[t * dr + d] = ckv[t * row + r + d];
  }
  Rope(q_pe, static_cast<int>(nh), nh * dr, m.rope_interleave);
  Rope(k_pe, 1, dr, m.rope_interleave);
  std::vector<double>& kc = (*k_)[layer];  // rows [latent | rope key]
  for (int64_t t = 0; t < n_; ++t) {
    kc.insert(kc.end(), ckv.begin() + t * row, ckv.begin() + t * row + r);
    kc.insert(kc.end(), k_pe.begin() + t * dr, k_pe.begin() + (t + 1) * dr);
  }
  // Every cached token's keys and values, expanded.
  const std::vector<double> kv_b = AsDouble(l.kv_b);  // [heads * (dn + dv), r]
  const int64_t tokens = static_cast<int64_t>(kc.size()) / row;
  std::vector<double> keys(tokens * nh * dn, 0.0), values(tokens * nh * dv, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t hh = 0; hh < nh; ++hh) {
      for (int64_t o = 0; o < dn + dv; ++o) {
        double s = 0;
        for (int64_t j = 0; j < r; ++j) s += kv_b[(hh * (dn + dv) + o) * r + j] * kc[t * row + j];
        if (o < dn) {
          keys[(t * nh + hh) * dn + o] = s;
        } else {
          values[(t * nh + hh) * dv + o - dn] = s;
        }
      }
    }
  }
  const double scale = c_.AttentionScale();
  std::vector<double> attn(n_ * nh * dv, 0.0);
  for (int64_t t = 0; t < n_; ++t) {
    const int64_t visible = start_ + t + 1;  // causal
    for (int64_t hh = 0; hh < nh; ++hh) {
      std::vector<double> s(visible);
      for (int64_t j = 0; j < visible; ++j) {
        double d = 0;
        for (int64_t e = 0; e < dn; ++e)
          d += q[(t * nh + hh) * dqk + e] * keys[(j * nh + hh) * dn + e];
        for (int64_t e = 0; e < dr; ++e) d += q_pe[(t * nh + hh) * dr + e] * kc[j * row + r + e];
        s[j] = d * scale;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double& e : s) z += (e = std::exp(e - mx));
      for (int64_t j = 0; j < visible; ++j) {
        for (int64_t e = 0; e < dv; ++e) {
          attn[(t * nh + hh) * dv + e] += s[j] / z * values[(j * nh + hh) * dv + e];
        }
      }
    }
  }
  y_ = MatMulT(attn, n_, nh * dv, l.o, l.o_bias);
  AddY();
}

std::vector<double> ReferenceStep::DeepseekScores(int layer, std::vector<double>* source) const {
  const int64_t e = c_.num_experts;
  const DecoderLayerWeights& l = w_.layers[layer];
  const bool sigmoid = spec_.router == RouterKind::kDeepseekSigmoid;
  const std::vector<double> logits = MatMulT(x_, n_, c_.hidden_size, l.router, {});
  const std::vector<double> bias = sigmoid ? AsDouble(l.router_bias) : std::vector<double>();
  std::vector<double> sel(logits.size());
  source->resize(logits.size());
  const int64_t size = e / c_.n_group;
  for (int64_t t = 0; t < n_; ++t) {
    const double* lt = logits.data() + t * e;
    double* src = source->data() + t * e;
    double* st = sel.data() + t * e;
    if (sigmoid) {
      for (int64_t i = 0; i < e; ++i) st[i] = (src[i] = 1.0 / (1.0 + std::exp(-lt[i]))) + bias[i];
    } else {
      const double mx = *std::max_element(lt, lt + e);
      double z = 0;
      for (int64_t i = 0; i < e; ++i) z += (src[i] = std::exp(lt[i] - mx));
      for (int64_t i = 0; i < e; ++i) st[i] = (src[i] /= z);
    }
    if (!sigmoid && !c_.group_limited) continue;
    // A group scores its largest (softmax) or two largest (sigmoid) selection scores.
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < c_.n_group; ++g) {
      std::vector<double> v(st + g * size, st + (g + 1) * size);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({-(sigmoid ? v[0] + v[1] : v[0]), g});  // ascending: best first
    }
    std::sort(groups.begin(), groups.end());
    std::vector<bool> kept(c_.n_group, false);
    for (int g = 0; g < c_.topk_group; ++g) kept[groups[g].second] = true;
    for (int64_t i = 0; i < e; ++i) {
      if (!kept[i / size]) st[i] = sigmoid ? -INFINITY : 0.0;
    }
  }
  return sel;
}

std::vector<double> ReferenceStep::RouterWeights(int layer, const RouterResult& r) const {
  const int64_t e = c_.num_experts;
  const int k = r.top_k;
  std::vector<double> w(r.experts.size());
  if (spec_.router == RouterKind::kDeepseekSoftmax ||
      spec_.router == RouterKind::kDeepseekSigmoid) {
    std::vector<double> source;
    const std::vector<double> sel = DeepseekScores(layer, &source);
    const bool sigmoid = spec_.router == RouterKind::kDeepseekSigmoid;
    for (int64_t t = 0; t < n_; ++t) {
      double sum = 0;
      for (int j = 0; j < k; ++j) {
        const int64_t id = r.experts[t * k + j];
        // Softmax: the masked probability (0 outside the kept groups).
        w[t * k + j] = sigmoid ? source[t * e + id] : sel[t * e + id];
        sum += w[t * k + j];
      }
      for (int j = 0; j < k; ++j) {
        if (sigmoid && c_.norm_topk_prob) w[t * k + j] /= sum + 1e-20;
        w[t * k + j] *= c_.routed_scaling_factor;
      }
    }
    return w;
  }
  if (spec_.router != RouterKind::kSoftmaxTopK) return {};
  const std::vector<double> p = RouterProbs(layer);
  for (int64_t t = 0; t < n_; ++t) {
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += (w[t * k + j] = p[t * e + r.experts[t * k + j]]);
    if (spec_.renormalize_topk) {
      for (int j = 0; j < k; ++j) w[t * k + j] /= sum;
    }
  }
  return w;
}

std::vector<double> ReferenceStep::RouterProbs(int layer) const {
  if (spec_.router == RouterKind::kDeepseekSoftmax ||
      spec_.router == RouterKind::kDeepseekSigmoid) {
    std::vector<double> source;
    return DeepseekScores(layer, &source);
  }
  const int64_t e = c_.num_experts;
  const DecoderLayerWeights& l = w_.layers[layer];
  const bool biased = spec_.router == RouterKind::kTopKSoftmaxBiased;
  std::vector<double> p =
      MatMulT(x_, n_, c_.hidden_size, l.router, biased ? l.router_bias : TensorView{});
  // Both rank the experts by their logits (the sparsemixer's second pick is the
  // best of the rest).
  if (biased || spec_.router == RouterKind::kSparseMixer) return p;
  for (int64_t t = 0; t < n_; ++t) {
    double* r = p.data() + t * e;
    const double mx = *std::max_element(r, r + e);
    double z = 0;
    for (int64_t i = 0; i < e; ++i) z += (r[i] = std::exp(r[i] - mx));
    for (int64_t i = 0; i < e; ++i) r[i] /= z;
  }
  return p;
}

void ReferenceStep::Experts(int layer, const RouterResult& r, ExpertProvider* experts) {
  const int64_t h = c_.hidden_size, in = c_.moe_intermediate_size;
  std::vector<int> active;
  for (int id : r.experts) active.push_back(id);
  std::sort(active.begin(), active.end());
  active.erase(std::unique(active.begin(), active.end()), active.end());
  ASSERT_TRUE(experts->BeginLayer(Phase::kPrefill, layer, active).ok());
  y_.assign(n_ * h, 0.0);
  // GPT-OSS's experts: biases and the clamped SwiGLU.
  const bool clamped = c_.clamped_swiglu.has_value();
  const DecoderLayerWeights& lw = w_.layers[layer];
  const std::vector<double> gate_up_bias =
      clamped ? AsDouble(lw.experts_gate_up_bias) : std::vector<double>();
  const std::vector<double> down_bias =
      clamped ? AsDouble(lw.experts_down_bias) : std::vector<double>();
  auto ClampedSwiglu = [this](double gate, double up) {
    const double limit = c_.clamped_swiglu->limit, alpha = c_.clamped_swiglu->alpha;
    gate = std::min(gate, limit);
    up = std::clamp(up, -limit, limit);
    return (up + 1.0) * gate / (1.0 + std::exp(-alpha * gate));
  };
  for (int e : active) {
    auto w = experts->Acquire(layer, e);
    ASSERT_TRUE(w.ok()) << w.status();
    // fused: gate_up [H, 2I], down [I, H]; out_major (GPT-OSS's MXFP4): gate_up
    // [2I, H], down [H, I]; else separate gate / up [I, H], down [H, I].
    const bool fused = w->layout == ExpertWeights::Layout::kFusedTransposed;
    const bool out_major = w->layout == ExpertWeights::Layout::kFused;
    const std::vector<double> gu =
        fused || out_major ? AsDouble(w->gate_up) : std::vector<double>();
    const std::vector<double> g = fused || out_major ? std::vector<double>() : AsDouble(w->gate);
    const std::vector<double> u = fused || out_major ? std::vector<double>() : AsDouble(w->up);
    const std::vector<double> d = AsDouble(w->down);
    auto gate_up_at = [&](int64_t k, int64_t col) {  // input k, fused output column col
      return out_major ? gu[col * h + k] : gu[k * 2 * in + col];
    };
    experts->Release(layer, e);
    for (int64_t t = 0; t < n_; ++t) {
      for (int j = 0; j < r.top_k; ++j) {
        if (r.experts[t * r.top_k + j] != e || r.IsSkipped(t, j)) continue;
        std::vector<double> act(in);
        for (int64_t i = 0; i < in; ++i) {
          // GPT-OSS: gate / up interleaved (columns 2i, 2i + 1); others: gate first.
          const int64_t gc = clamped ? 2 * i : i, uc = clamped ? 2 * i + 1 : in + i;
          double a = 0, b = 0;
          for (int64_t k = 0; k < h; ++k) {
            const double xv = x_[t * h + k];
            a += xv * (fused || out_major ? gate_up_at(k, gc) : g[i * h + k]);
            b += xv * (fused || out_major ? gate_up_at(k, uc) : u[i * h + k]);
          }
          act[i] = clamped ? ClampedSwiglu(a + gate_up_bias[e * 2 * in + gc],
                                           b + gate_up_bias[e * 2 * in + uc])
                           : Silu(a) * b;
        }
        const double wt = r.weights[t * r.top_k + j];
        for (int64_t o = 0; o < h; ++o) {
          double s = clamped ? down_bias[e * h + o] : 0.0;
          for (int64_t i = 0; i < in; ++i) s += act[i] * (fused ? d[i * h + o] : d[o * in + i]);
          y_[t * h + o] += wt * s;
        }
      }
    }
  }
  experts->EndLayer(layer);
  if (lw.shared_gate.empty()) return;
  // DeepSeek's shared experts: every token, weight 1.
  const int64_t si = int64_t{c_.n_shared_experts} * in;
  std::vector<double> g = MatMulT(x_, n_, h, lw.shared_gate, {});
  const std::vector<double> u = MatMulT(x_, n_, h, lw.shared_up, {});
  for (size_t i = 0; i < g.size(); ++i) g[i] = Silu(g[i]) * u[i];
  const std::vector<double> shared = MatMulT(g, n_, si, lw.shared_down, {});
  for (size_t i = 0; i < y_.size(); ++i) y_[i] += shared[i];
}

// ---- Comparison -------------------------------------------------------------

// ---- The table ----------------------------------------------------------------

struct Shape {
  int64_t prefix;  // tokens already in the KV cache
  int64_t n;       // tokens of the step under test
  // Rows 2 .. n-3 are visual (embeddings replaced, DeepStack added, distinct
  // t/h/w positions), and before layer 1 every other visual row is dropped
  // (KeepRows). Models with a vision tower only.
  bool visual = false;
};
// {20, 6} ends past tiny-phimoe-longrope's original context of 24 (its long mscale).
const Shape kShapes[] = {{0, 1}, {0, 7}, {5, 1}, {3, 19}, {20, 6}, {0, 16, true}, {4, 23, true}};

std::vector<int> Tokens(int64_t n, int vocab, int64_t salt) {
  std::vector<int> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int>((37 * (i + salt) + 11) % (vocab - 64));
  return ids;
}

// The visual part of a step: which rows, their embeddings, DeepStack
// features, positions that differ per axis, and what compression keeps.
struct VisualStep {
  std::vector<int64_t> rows;
  std::vector<float> embeds;
  std::vector<std::vector<float>> deepstack;
  std::vector<const float*> deepstack_ptrs;
  std::vector<int64_t> positions;  // [3][n]
  std::vector<int64_t> kept;
  std::vector<int64_t> kept_positions;    // [3][kept]
  std::vector<int64_t> kept_visual_rows;  // new row of each visual token, -1 if dropped
};

VisualStep MakeVisual(const ModelConfig& config, int64_t start, int64_t n) {
  const int64_t h = config.text.hidden_size;
  VisualStep v;
  for (int64_t r = 2; r < n - 2; ++r) v.rows.push_back(r);
  const int64_t nv = static_cast<int64_t>(v.rows.size());
  v.embeds = Pattern(nv * h, 1, 0.5f);
  for (size_t k = 0; k < config.vision.deepstack_visual_indexes.size(); ++k) {
    v.deepstack.push_back(Pattern(nv * h, 2 + static_cast<int64_t>(k), 0.25f));
  }
  for (const auto& d : v.deepstack) v.deepstack_ptrs.push_back(d.data());
  v.positions.resize(3 * n);
  for (int64_t t = 0; t < n; ++t) {
    const bool vis = t >= 2 && t < n - 2;
    const int64_t i = t - 2;
    v.positions[t] = start + (vis ? 2 : t);
    v.positions[n + t] = start + (vis ? 2 + i / 4 : t);
    v.positions[2 * n + t] = start + (vis ? 2 + i % 4 : t);
  }
  std::vector<int64_t> new_row(n, -1);
  for (int64_t t = 0; t < n; ++t) {
    const bool vis = t >= 2 && t < n - 2;
    if (vis && (t - 2) % 2 == 1) continue;  // drop every other visual row
    new_row[t] = static_cast<int64_t>(v.kept.size());
    v.kept.push_back(t);
  }
  const int64_t m = static_cast<int64_t>(v.kept.size());
  v.kept_positions.resize(3 * m);
  for (int a = 0; a < 3; ++a) {
    for (int64_t i = 0; i < m; ++i) v.kept_positions[a * m + i] = v.positions[a * n + v.kept[i]];
  }
  for (int64_t r : v.rows) v.kept_visual_rows.push_back(new_row[r]);
  return v;
}

std::vector<int64_t> TextPositions(int64_t start, int64_t n) {
  std::vector<int64_t> p(3 * n);
  for (int a = 0; a < 3; ++a) std::iota(p.begin() + a * n, p.begin() + (a + 1) * n, start);
  return p;
}

// Experts in the memory the backend reads them from: the checkpoint's views
// on the host, or every expert pinned in device memory (also on the host
// with `pinned`, for DeviceMoe).
struct Experts {
  std::unique_ptr<ResidentExpertProvider> resident;
  OffloadDeviceParts parts;
  std::unique_ptr<OffloadExpertProvider> device;
  bool needs_device = false;  // the backend reads experts from the device provider
  ExpertProvider* get() {
    if (device != nullptr) return device.get();
    return needs_device ? nullptr : resident.get();  // no silent fallback to host views
  }
};

Experts MakeExperts(const Backend& backend, const Model& m, bool pinned) {
  Experts x;
  const ExpertNaming naming = ArchSpec::For(m.config)->experts;
  auto resident = ResidentExpertProvider::Create(*m.ckpt, m.config.text, naming);
  EXPECT_TRUE(resident.ok()) << resident.status();
  if (!resident.ok()) return x;
  x.resident = *std::move(resident);
  if (!backend.experts_in_device_memory() && !pinned) return x;
  x.needs_device = true;
  auto parts = backend.CreateOffloadDevice(BackendOptions{});
  auto sizes = MeasureModelSizes(*m.ckpt, m.config.text, naming);
  EXPECT_TRUE(parts.ok() && sizes.ok());
  if (!parts.ok() || !sizes.ok()) return x;
  x.parts = *std::move(parts);
  MemoryPlanOptions po;
  po.pinned_layers = static_cast<int>(sizes->moe_layers.size());
  po.budget_bytes = sizes->resident_bytes + sizes->expert_bytes * sizes->num_experts *
                                                static_cast<int64_t>(sizes->moe_layers.size());
  auto plan = MakeMemoryPlan(*sizes, po);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return x;
  OffloadDevice d{x.parts.host_allocator.get(), x.parts.device_allocator.get(), x.parts.copy.get(),
                  x.parts.expert_dtype};
  auto p = OffloadExpertProvider::Create(*x.resident, m.config.text, *plan, OffloadOptions(),
                                         nullptr, nullptr, d);
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) x.device = *std::move(p);
  return x;
}

// Runs `ops` and the reference side by side on one shape, comparing each op.
class OpRunner {
 public:
  // `experts` serves the backend, `host` (the checkpoint's views) the
  // reference; `device_moe` runs pinned MoE layers through DeviceMoe.
  // `rewrites`: the routing of each MoE layer is rewritten before Experts,
  // as expert skipping and the commit miss policy rewrite it (RewriteRouting).
  OpRunner(const Model& m, DecoderOps& ops, ExpertProvider* experts, ExpertProvider* host,
           double rel, bool device_moe, bool rewrites = false)
      : m_(m),
        c_(m.config.text),
        ops_(ops),
        experts_(experts),
        host_(host),
        rel_(rel),
        device_moe_(device_moe),
        rewrites_(rewrites) {
    auto w = TextWeights::Load(m.config, *m.ckpt);
    EXPECT_TRUE(w.ok()) << w.status();
    if (w.ok()) weights_ = std::make_unique<TextWeights>(*std::move(w));
    k_.resize(c_.num_hidden_layers);
    v_.resize(c_.num_hidden_layers);
  }

  void Run(const Shape& shape);

 private:
  void Step(DecoderStep& step, ReferenceStep& ref, int64_t n, bool compare,
            const VisualStep* visual);
  void AddDeepStack(DecoderStep& step, ReferenceStep& ref, int layer, const VisualStep* visual);
  // The MoE block of layer l, through Route + Experts or DeviceMoe.
  void Moe(DecoderStep& step, ReferenceStep& ref, int l, int64_t n, bool compare);
  void CheckRouting(ReferenceStep& ref, int l, int64_t n, const RouterResult& r);
  void RewriteRouting(int l, RouterResult* r) const;
  void Compare(DecoderStep& step, StepRows rows, const std::vector<double>& want,
               const std::string& what) {
    if (!compare_) return;
    auto got = step.HostRows(rows);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, want, rel_, what);
  }

  const Model& m_;
  const TextConfig& c_;
  DecoderOps& ops_;
  ExpertProvider* experts_;
  ExpertProvider* host_;
  const double rel_;
  const bool device_moe_;
  const bool rewrites_;
  std::unique_ptr<TextWeights> weights_;
  std::vector<std::vector<double>> k_, v_;
  bool compare_ = false;
};

void OpRunner::Step(DecoderStep& step, ReferenceStep& ref, int64_t n, bool compare,
                    const VisualStep* visual) {
  compare_ = compare;
  Compare(step, StepRows::kResidual, ref.hs(), "embedding");
  for (int l = 0; l < c_.num_hidden_layers; ++l) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    if (visual != nullptr && l == 1) {
      ASSERT_TRUE(
          step.KeepRows(visual->kept, visual->kept_positions, visual->kept_visual_rows).ok());
      ref.KeepRows(visual->kept, visual->kept_positions, visual->kept_visual_rows);
      n = static_cast<int64_t>(visual->kept.size());
      Compare(step, StepRows::kResidual, ref.hs(), "keep rows");
    }
    ASSERT_TRUE(step.Norm(l, NormSite::kInput).ok());
    ref.Norm(l, NormSite::kInput);
    Compare(step, StepRows::kNormed, ref.x(), "input norm");
    ASSERT_TRUE(step.Attention(l).ok());
    ref.Attention(l);
    Compare(step, StepRows::kResidual, ref.hs(), "attention");
    ASSERT_TRUE(step.Norm(l, NormSite::kPostAttention).ok());
    ref.Norm(l, NormSite::kPostAttention);
    Compare(step, StepRows::kNormed, ref.x(), "post-attention norm");
    if (!c_.IsMoeLayer(l)) {
      ASSERT_TRUE(step.DenseMlp(l).ok());
      ref.DenseMlp(l);
      Compare(step, StepRows::kResidual, ref.hs(), "dense MLP");
      AddDeepStack(step, ref, l, visual);
      continue;
    }
    Moe(step, ref, l, n, compare);
    if (::testing::Test::HasFatalFailure()) return;
    AddDeepStack(step, ref, l, visual);
  }
  std::vector<float> logits;
  ASSERT_TRUE(step.Logits(/*all_rows=*/false, &logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(c_.vocab_size));
  if (compare) ExpectClose(logits.data(), ref.Logits(), rel_, "logits");
}

// Expert skipping's and the commit miss policy's rewrites, on fixed slots:
// a token's later slots skipped by turns (slot 0 never: a token keeps an
// expert), and every fourth token's last slot committed to the next expert
// its row does not hold, its weight kept. Both backends and the reference
// then compute the rewritten routing.
void OpRunner::RewriteRouting(int l, RouterResult* r) const {
  const int k = r->top_k, e_count = r->num_experts;
  r->skipped.assign(r->experts.size(), 0);
  r->committed.assign(r->experts.size(), 0);
  for (int64_t t = 0; t < r->n; ++t) {
    int* row = r->experts.data() + t * k;
    for (int j = 1; j < k; ++j) r->skipped[t * k + j] = (t + j + l) % 3 == 0 ? 1 : 0;
    if (t % 4 != 1 || k < 2 || k >= e_count) continue;
    int e = row[k - 1];
    do {
      e = (e + 1) % e_count;
    } while (std::find(row, row + k, e) != row + k);
    row[k - 1] = e;
    r->committed[t * k + k - 1] = 1;
    r->skipped[t * k + k - 1] = 0;
  }
}

void OpRunner::CheckRouting(ReferenceStep& ref, int l, int64_t n, const RouterResult& r) {
  ASSERT_EQ(r.experts.size(), static_cast<size_t>(n * c_.num_experts_per_tok));
  const std::vector<double> p = ref.RouterProbs(l);
  for (int64_t t = 0; t < n; ++t) {
    // The chosen experts hold the top-k probabilities (up to a near-tie).
    std::vector<double> row(p.begin() + t * c_.num_experts, p.begin() + (t + 1) * c_.num_experts);
    std::vector<double> sorted = row;
    std::sort(sorted.rbegin(), sorted.rend());
    for (int j = 0; j < r.top_k; ++j) {
      EXPECT_NEAR(row[r.experts[t * r.top_k + j]], sorted[j], 1e-3 * std::fabs(sorted[0]) + rel_)
          << "token " << t << " slot " << j;
    }
  }
  // And their combine weights, where the reference computes them.
  const std::vector<double> want = ref.RouterWeights(l, r);
  if (want.empty()) return;
  ASSERT_EQ(r.weights.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(r.weights[i], want[i], (1e-4 + rel_) * std::fabs(want[i]) + 1e-7) << "slot " << i;
  }
}

void OpRunner::Moe(DecoderStep& step, ReferenceStep& ref, int l, int64_t n, bool compare) {
  if (device_moe_) {
    ASSERT_TRUE(step.PrepareDeviceMoe(l, experts_)) << "layer " << l << " is pinned";
    const std::vector<double> residual = ref.hs();
    ASSERT_TRUE(step.DeviceMoe(l, Phase::kPrefill, experts_, /*observed=*/true).ok());
    auto d = step.TakeDeferred(l);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(d->routing.weights.size(), d->routing.experts.size());
    ASSERT_EQ(d->routing.logits.size(), static_cast<size_t>(n * c_.num_experts));
    if (compare) {
      CheckRouting(ref, l, n, d->routing);
      ExpectClose(d->residual, residual, rel_, "deferred residual");
      ExpectClose(d->normed, ref.x(), rel_, "deferred normed rows");
    }
    ref.Experts(l, d->routing, host_);
    if (compare) ExpectClose(d->moe_out, ref.y(), rel_, "deferred MoE output");
    ref.AddY();
    Compare(step, StepRows::kResidual, ref.hs(), "DeviceMoe residual add");
    return;
  }
  RouterResult r;
  ASSERT_TRUE(step.Route(l, /*with_scores=*/true, &r).ok());
  if (compare) CheckRouting(ref, l, n, r);
  if (rewrites_) RewriteRouting(l, &r);
  ASSERT_EQ(r.experts.size(), static_cast<size_t>(n * c_.num_experts_per_tok));
  ASSERT_TRUE(step.Experts(l, Phase::kPrefill, r, experts_).ok());
  ref.Experts(l, r, host_);
  Compare(step, StepRows::kMoeOutput, ref.y(), "experts");
  ASSERT_TRUE(step.AddMoeOutput().ok());
  ref.AddY();
  Compare(step, StepRows::kResidual, ref.hs(), "MoE residual add");
}

void OpRunner::AddDeepStack(DecoderStep& step, ReferenceStep& ref, int layer,
                            const VisualStep* visual) {
  if (visual == nullptr || layer >= static_cast<int>(visual->deepstack.size())) return;
  ASSERT_TRUE(step.AddDeepStack(layer).ok());
  ref.AddDeepStack(visual->deepstack[layer]);
  Compare(step, StepRows::kResidual, ref.hs(), "DeepStack");
}

void OpRunner::Run(const Shape& shape) {
  auto cache = ops_.CreateKvCache(shape.prefix + shape.n);
  ASSERT_TRUE(cache.ok()) << cache.status();
  int64_t done = 0;
  for (const auto& [n, compare] : {std::pair{shape.prefix, false}, std::pair{shape.n, true}}) {
    if (n == 0) continue;
    const std::vector<int> ids = Tokens(n, c_.vocab_size, done);
    const bool visual = compare && shape.visual;
    const VisualStep vis = visual ? MakeVisual(m_.config, done, n) : VisualStep();
    const std::vector<int64_t> pos = visual ? vis.positions : TextPositions(done, n);
    StepInput in;
    in.tokens = ids;
    in.positions = pos;
    if (visual) {
      in.visual_rows = vis.rows;
      in.visual_embeds = vis.embeds.data();
      in.deepstack = vis.deepstack_ptrs;
    }
    auto step = ops_.BeginStep(in, cache->get());
    ASSERT_TRUE(step.ok()) << step.status();
    ReferenceStep ref(m_.config, *weights_, &k_, &v_, done);
    ref.Begin(ids, pos);
    if (visual) ref.ReplaceRows(vis.rows, vis.embeds);
    Step(**step, ref, n, compare, visual ? &vis : nullptr);
    (*cache)->Advance(n);
    done += n;
  }
}

class BackendOpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Every model of the table on every shape, pinned MoE layers through
  // DeviceMoe when `device_moe`, the routing rewritten (OpRunner) with
  // `rewrites`.
  void RunTable(bool device_moe, bool rewrites = false);
};

void BackendOpsTest::RunTable(bool device_moe, bool rewrites) {
  const Backend* backend = nullptr;
  for (const Backend* b : RegisteredBackends()) {
    if (GetParam() == b->name()) backend = b;
  }
  if (backend == nullptr) GTEST_SKIP() << "backend " << GetParam() << " is not compiled in";
  auto probe = backend->Probe();
  if (!probe.ok())
    GTEST_SKIP() << "backend " << GetParam() << " cannot run here: " << probe.status();
  const bool cpu = GetParam() == "cpu";
  // fp32 kernels against double; bf16 activations against the fp32 CPU backend.
  const double rel = cpu ? 2e-4 : 4e-2;
  for (Model& m : Models()) {
    SCOPED_TRACE(m.name);
    // DeviceMoe's kernels are softmax top-k or DeepSeek's routing and SwiGLU
    // experts; GPT-OSS's and PhiMoE's MoE layers always take Route + Experts.
    const ArchSpec spec = *ArchSpec::For(m.config);
    if (device_moe &&
        (spec.router == RouterKind::kSparseMixer || spec.router == RouterKind::kTopKSoftmaxBiased ||
         m.config.text.clamped_swiglu.has_value())) {
      continue;
    }
    BackendOptions bo;
    bo.max_tokens_per_step = 64;
    bo.cpu_deferred_moe = device_moe;
    auto ops = backend->CreateDecoderOps(m.config, *m.ckpt, bo);
    ASSERT_TRUE(ops.ok()) << ops.status();
    Experts experts = MakeExperts(*backend, m, /*pinned=*/device_moe);
    ASSERT_NE(experts.get(), nullptr);
    for (const Shape& s : kShapes) {
      if (s.visual && !m.config.has_vision) continue;
      SCOPED_TRACE(::testing::Message()
                   << "prefix " << s.prefix << ", n " << s.n << (s.visual ? ", visual" : ""));
      OpRunner runner(m, **ops, experts.get(), experts.resident.get(), rel, device_moe, rewrites);
      runner.Run(s);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(BackendOpsTest, EveryOpMatchesTheReference) { RunTable(/*device_moe=*/false); }

TEST_P(BackendOpsTest, DeviceMoeMatchesTheReference) { RunTable(/*device_moe=*/true); }

// Experts over a routing rewritten as expert skipping (skipped slots add
// nothing, their experts fetched only where another slot keeps them) and the
// commit miss policy (slots moved to other experts; the CUDA backend uploads
// the routing and rebuilds its permutation) rewrite it.
TEST_P(BackendOpsTest, SkippedAndCommittedSlotsMatchTheReference) {
  RunTable(/*device_moe=*/false, /*rewrites=*/true);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOpsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace vismoe
