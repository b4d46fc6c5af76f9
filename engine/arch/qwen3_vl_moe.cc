#include "engine/arch/qwen3_vl_moe.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/linear.h"
#include "engine/ops/cpu/rms_norm.h"

namespace vismoe {

std::string Qwen3VlMoeModel::TextPrefix(const ModelConfig& config) {
  return config.model_type == "qwen3_vl_moe" ? "model.language_model." : "model.";
}

absl::StatusOr<std::unique_ptr<Qwen3VlMoeModel>> Qwen3VlMoeModel::Create(const ModelConfig& config,
                                                                         const Checkpoint& ckpt,
                                                                         ThreadPool* pool) {
  std::unique_ptr<Qwen3VlMoeModel> m(new Qwen3VlMoeModel(config, pool));
  const TextConfig& c = config.text;
  const std::string p = TextPrefix(config);
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t qd = int64_t{c.num_attention_heads} * hd, kvd = int64_t{c.num_key_value_heads} * hd;
  VISMOE_ASSIGN_OR_RETURN(m->embed_, ckpt.Get(p + "embed_tokens.weight", {c.vocab_size, h}));
  VISMOE_ASSIGN_OR_RETURN(m->final_norm_, ckpt.Get(p + "norm.weight", {h}));
  if (ckpt.Has("lm_head.weight") || !c.tie_word_embeddings) {
    VISMOE_ASSIGN_OR_RETURN(m->lm_head_, ckpt.Get("lm_head.weight", {c.vocab_size, h}));
  } else {
    m->lm_head_ = m->embed_;
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string lp = absl::StrCat(p, "layers.", l, ".");
    const std::string ap = lp + "self_attn.";
    Layer w;
    VISMOE_ASSIGN_OR_RETURN(w.input_norm, ckpt.Get(lp + "input_layernorm.weight", {h}));
    VISMOE_ASSIGN_OR_RETURN(w.post_norm, ckpt.Get(lp + "post_attention_layernorm.weight", {h}));
    VISMOE_ASSIGN_OR_RETURN(w.q, ckpt.Get(ap + "q_proj.weight", {qd, h}));
    VISMOE_ASSIGN_OR_RETURN(w.k, ckpt.Get(ap + "k_proj.weight", {kvd, h}));
    VISMOE_ASSIGN_OR_RETURN(w.v, ckpt.Get(ap + "v_proj.weight", {kvd, h}));
    VISMOE_ASSIGN_OR_RETURN(w.o, ckpt.Get(ap + "o_proj.weight", {h, qd}));
    if (c.attention_bias) {
      VISMOE_ASSIGN_OR_RETURN(w.q_bias, ckpt.Get(ap + "q_proj.bias", {qd}));
      VISMOE_ASSIGN_OR_RETURN(w.k_bias, ckpt.Get(ap + "k_proj.bias", {kvd}));
      VISMOE_ASSIGN_OR_RETURN(w.v_bias, ckpt.Get(ap + "v_proj.bias", {kvd}));
      VISMOE_ASSIGN_OR_RETURN(w.o_bias, ckpt.Get(ap + "o_proj.bias", {h}));
    }
    VISMOE_ASSIGN_OR_RETURN(w.q_norm, ckpt.Get(ap + "q_norm.weight", {hd}));
    VISMOE_ASSIGN_OR_RETURN(w.k_norm, ckpt.Get(ap + "k_norm.weight", {hd}));
    w.moe = c.IsMoeLayer(l);
    if (w.moe) {
      VISMOE_ASSIGN_OR_RETURN(w.router, ckpt.Get(lp + "mlp.gate.weight", {c.num_experts, h}));
    } else {
      const int64_t in = c.intermediate_size;
      VISMOE_ASSIGN_OR_RETURN(w.gate_proj, ckpt.Get(lp + "mlp.gate_proj.weight", {in, h}));
      VISMOE_ASSIGN_OR_RETURN(w.up_proj, ckpt.Get(lp + "mlp.up_proj.weight", {in, h}));
      VISMOE_ASSIGN_OR_RETURN(w.down_proj, ckpt.Get(lp + "mlp.down_proj.weight", {h, in}));
    }
    m->layers_.push_back(w);
  }
  return m;
}

std::unique_ptr<KvCache> Qwen3VlMoeModel::NewKvCache(int64_t capacity) const {
  const TextConfig& c = config_.text;
  return std::make_unique<KvCache>(c.num_hidden_layers, capacity,
                                   int64_t{c.num_key_value_heads} * c.head_dim);
}

void Qwen3VlMoeModel::Attention(int layer, const Layer& w, const std::vector<float>& x, int64_t n,
                                const cpu::RopeTable& rope, KvCache* cache,
                                std::vector<float>* out) const {
  const TextConfig& c = config_.text;
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t qd = int64_t{c.num_attention_heads} * hd, kvd = int64_t{c.num_key_value_heads} * hd;
  auto bias = [](const TensorView& b) { return b.empty() ? nullptr : &b; };
  std::vector<float> q(n * qd), k(n * kvd), v(n * kvd);
  cpu::Linear(pool_, x.data(), n, h, w.q, bias(w.q_bias), q.data());
  cpu::Linear(pool_, x.data(), n, h, w.k, bias(w.k_bias), k.data());
  cpu::Linear(pool_, x.data(), n, h, w.v, bias(w.v_bias), v.data());
  // Per-head RMSNorm (weight [head_dim]) before the rotary embedding.
  cpu::RmsNorm(pool_, q.data(), n * c.num_attention_heads, hd, w.q_norm, c.rms_norm_eps, q.data());
  cpu::RmsNorm(pool_, k.data(), n * c.num_key_value_heads, hd, w.k_norm, c.rms_norm_eps, k.data());
  cpu::ApplyRope(pool_, rope, q.data(), n, c.num_attention_heads, c.head_dim, qd);
  cpu::ApplyRope(pool_, rope, k.data(), n, c.num_key_value_heads, c.head_dim, kvd);
  const int64_t start = cache->layer_length(layer);
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(k.data() + t * kvd, kvd, cache->KeyRow(layer, start + t));
    std::copy_n(v.data() + t * kvd, kvd, cache->ValueRow(layer, start + t));
  }
  std::vector<float> attn(n * qd);
  cpu::AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim, qd, kvd};
  cpu::Attention(pool_, shape, q.data(), n, cache->Keys(layer), cache->Values(layer), start + n,
                 /*causal=*/true, /*q_pos0=*/start, attn.data());
  out->resize(n * h);
  cpu::Linear(pool_, attn.data(), n, qd, w.o, bias(w.o_bias), out->data());
}

absl::Status Qwen3VlMoeModel::Moe(const DecoderInput& input, int layer, const Layer& w,
                                  const std::vector<float>& x, int64_t n, ExpertProvider* experts,
                                  std::vector<float>* out) const {
  const TextConfig& c = config_.text;
  const int64_t h = c.hidden_size;
  cpu::RouterResult r;
  // transformers' Qwen3-VL-MoE router always renormalises the top-k weights.
  const bool renorm = c.norm_topk_prob || config_.model_type == "qwen3_vl_moe";
  cpu::Route(pool_, x.data(), n, h, w.router, c.num_experts_per_tok, renorm, &r);
  if (input.observer != nullptr) input.observer->OnRouting(input.phase, layer, x.data(), r);
  // Each (token, slot) output is kept apart and the slots are summed per token
  // in ascending expert order afterwards: the order transformers accumulates
  // in, and independent of the order the provider hands experts out.
  const int k = r.top_k;
  std::vector<std::vector<std::pair<int64_t, int>>> routed(c.num_experts);  // (token, slot)
  for (int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < k; ++j) routed[r.experts[t * k + j]].push_back({t, j});
  }
  std::vector<int> active;
  for (int e = 0; e < c.num_experts; ++e) {
    if (!routed[e].empty()) active.push_back(e);
  }
  VISMOE_ASSIGN_OR_RETURN(std::vector<int> order, experts->BeginLayer(input.phase, layer, active));
  std::vector<float> slot_out(static_cast<size_t>(n) * k * h);
  std::vector<float> xs, ys;
  for (int e : order) {
    if (e < 0 || e >= c.num_experts || routed[e].empty()) {
      experts->EndLayer(layer);
      return absl::InternalError(
          absl::StrCat("expert provider returned undeclared expert ", e, " for layer ", layer));
    }
    const auto& tok = routed[e];
    const int64_t m = static_cast<int64_t>(tok.size());
    xs.resize(m * h);
    ys.resize(m * h);
    for (int64_t i = 0; i < m; ++i) std::copy_n(x.data() + tok[i].first * h, h, xs.data() + i * h);
    auto weights = experts->Acquire(layer, e);
    if (!weights.ok()) {
      experts->EndLayer(layer);
      return weights.status();
    }
    cpu::ExpertForward(pool_, *weights, xs.data(), m, h, c.moe_intermediate_size, ys.data());
    experts->Release(layer, e);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = tok[i].first;
      const int j = tok[i].second;
      const float wt = r.weights[t * k + j];
      float* o = slot_out.data() + (t * k + j) * h;
      const float* yr = ys.data() + i * h;
      for (int64_t d = 0; d < h; ++d) o[d] = yr[d] * wt;
    }
  }
  experts->EndLayer(layer);
  if (order.size() != active.size()) {
    return absl::InternalError(absl::StrCat("expert provider returned ", order.size(),
                                            " experts for layer ", layer, ", expected ",
                                            active.size()));
  }
  out->assign(n * h, 0.0f);
  std::vector<int> slots(k);
  for (int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < k; ++j) slots[j] = j;
    std::sort(slots.begin(), slots.end(),
              [&](int a, int b) { return r.experts[t * k + a] < r.experts[t * k + b]; });
    float* o = out->data() + t * h;
    for (int j : slots) {
      const float* so = slot_out.data() + (t * k + j) * h;
      for (int64_t d = 0; d < h; ++d) o[d] += so[d];
    }
  }
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeModel::KeepRows(const std::vector<int64_t>& kept, int64_t* n,
                                       std::vector<float>* hs, std::vector<int64_t>* positions,
                                       std::vector<int64_t>* visual_rows) const {
  const int64_t h = config_.text.hidden_size;
  const int64_t old_n = *n;
  const int64_t m = static_cast<int64_t>(kept.size());
  if (m == 0) return absl::InvalidArgumentError("Forward: token compression kept no rows");
  for (int64_t i = 0; i < m; ++i) {
    if (kept[i] < 0 || kept[i] >= old_n || (i > 0 && kept[i] <= kept[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Forward: kept row ", kept[i], " at index ", i,
                       " is out of [0, ", old_n, ") or not strictly ascending"));
    }
  }
  std::vector<int64_t> new_row(old_n, -1);
  std::vector<float> new_hs(m * h);
  std::vector<int64_t> new_pos(3 * m);
  for (int64_t i = 0; i < m; ++i) {
    new_row[kept[i]] = i;
    std::copy_n(hs->data() + kept[i] * h, h, new_hs.data() + i * h);
    for (int a = 0; a < 3; ++a) new_pos[a * m + i] = (*positions)[a * old_n + kept[i]];
  }
  for (int64_t& r : *visual_rows) r = r < 0 ? -1 : new_row[r];
  *hs = std::move(new_hs);
  *positions = std::move(new_pos);
  *n = m;
  return absl::OkStatus();
}

absl::Status Qwen3VlMoeModel::Forward(const DecoderInput& input, KvCache* cache,
                                      ExpertProvider* experts, std::vector<float>* logits) const {
  const TextConfig& c = config_.text;
  const int64_t n_in = static_cast<int64_t>(input.tokens.size());
  int64_t n = n_in;  // rows in flight; shrinks when tokens are compressed away
  const int64_t h = c.hidden_size;
  if (n == 0) return absl::InvalidArgumentError("Forward: no tokens");
  VISMOE_RETURN_IF_ERROR(cache->CheckRoom(n));
  std::vector<int64_t> positions = input.positions;
  if (positions.empty()) {
    positions.resize(3 * n);
    for (int a = 0; a < 3; ++a) {
      for (int64_t i = 0; i < n; ++i) positions[a * n + i] = cache->length() + i;
    }
  } else if (static_cast<int64_t>(positions.size()) != 3 * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: positions has ", positions.size(), " entries, expected 3 * ", n));
  }

  // Embeddings, with visual rows substituted in order.
  std::vector<float> hs(n * h);
  std::vector<int64_t> visual_rows;
  for (int64_t t = 0; t < n; ++t) {
    const int id = input.tokens[t];
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: token id ", id, " outside the vocabulary [0, ", c.vocab_size, ")"));
    }
    if (input.visual_embeds != nullptr && id == config_.image_token_id) {
      visual_rows.push_back(t);
      continue;
    }
    const TensorView row = embed_.Row(id);
    ToFloat(row.dtype, row.data, h, hs.data() + t * h);
  }
  if (input.visual_embeds != nullptr) {
    if (static_cast<int64_t>(visual_rows.size()) != input.num_visual) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: ", visual_rows.size(),
                                                     " image tokens but ", input.num_visual,
                                                     " visual embeddings"));
    }
    for (size_t i = 0; i < visual_rows.size(); ++i) {
      std::copy_n(input.visual_embeds + i * h, h, hs.data() + visual_rows[i] * h);
    }
  }
  if (input.deepstack.size() > layers_.size()) {
    return absl::InvalidArgumentError("Forward: more DeepStack features than decoder layers");
  }

  cpu::RopeTable rope =
      cpu::BuildRopeTable(positions.data(), n, c.head_dim, c.rope_theta, c.mrope_section);
  std::vector<float> x(n * h), y;
  bool compressed = false;
  for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
    if (input.is_cancelled && input.is_cancelled()) return absl::CancelledError("cancelled");
    if (input.select_kept_rows && l == input.compress_before_layer) {
      VISMOE_ASSIGN_OR_RETURN(std::vector<int64_t> kept, input.select_kept_rows());
      VISMOE_RETURN_IF_ERROR(KeepRows(kept, &n, &hs, &positions, &visual_rows));
      rope = cpu::BuildRopeTable(positions.data(), n, c.head_dim, c.rope_theta, c.mrope_section);
      x.resize(n * h);
      compressed = true;
    }
    const Layer& w = layers_[l];
    cpu::RmsNorm(pool_, hs.data(), n, h, w.input_norm, c.rms_norm_eps, x.data());
    Attention(l, w, x, n, rope, cache, &y);
    for (int64_t i = 0; i < n * h; ++i) hs[i] += y[i];
    if (w.moe && input.observer != nullptr) {
      input.observer->OnPostAttention(input.phase, l, hs.data(), n);
    }
    cpu::RmsNorm(pool_, hs.data(), n, h, w.post_norm, c.rms_norm_eps, x.data());
    if (w.moe) {
      VISMOE_RETURN_IF_ERROR(Moe(input, l, w, x, n, experts, &y));
      if (input.observer != nullptr) input.observer->OnMoeOutput(input.phase, l, y.data(), n);
    } else {
      const int64_t in = c.intermediate_size;
      std::vector<float> gate(n * in), up(n * in);
      cpu::Linear(pool_, x.data(), n, h, w.gate_proj, nullptr, gate.data());
      cpu::Linear(pool_, x.data(), n, h, w.up_proj, nullptr, up.data());
      cpu::SiluMul(gate.data(), up.data(), n * in, gate.data());
      y.resize(n * h);
      cpu::Linear(pool_, gate.data(), n, in, w.down_proj, nullptr, y.data());
    }
    for (int64_t i = 0; i < n * h; ++i) hs[i] += y[i];
    if (l < static_cast<int>(input.deepstack.size()) && input.deepstack[l] != nullptr) {
      const float* ds = input.deepstack[l];
      for (size_t i = 0; i < visual_rows.size(); ++i) {
        if (visual_rows[i] < 0) continue;  // compressed away
        float* row = hs.data() + visual_rows[i] * h;
        for (int64_t d = 0; d < h; ++d) row[d] += ds[i * h + d];
      }
    }
  }
  if (compressed) {
    cache->Advance(n_in, input.compress_before_layer, n);
  } else {
    cache->Advance(n);
  }

  const int64_t first = input.all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  std::vector<float> normed(rows * h);
  cpu::RmsNorm(pool_, hs.data() + first * h, rows, h, final_norm_, c.rms_norm_eps, normed.data());
  logits->resize(rows * c.vocab_size);
  cpu::Linear(pool_, normed.data(), rows, h, lm_head_, nullptr, logits->data());
  return absl::OkStatus();
}

}  // namespace vismoe
