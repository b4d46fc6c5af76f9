#include "engine/backends/cpu/cpu_decoder_ops.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/host_deferred_moe.h"
#include "engine/backends/cpu/cpu_family_ops.h"
#include "engine/backends/cpu/cpu_latent_attention.h"
#include "engine/backends/cpu/cpu_speculation.h"
#include "engine/core/argmax.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/offload/host_store_mode.h"
#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/linear.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rms_norm.h"
#include "engine/ops/cpu/rope.h"

namespace vismoe::cpu {
namespace {

const TensorView* Bias(const TensorView& b) { return b.empty() ? nullptr : &b; }

// One forward step on host fp32 rows.
class CpuDecoderStep final : public DecoderStep {
 public:
  // REQUIRES: CheckStepSequences(in) is OK and every cache holds host rows.
  CpuDecoderStep(const CpuDecoderOps& ops, const StepInput& in)
      : ops_(ops),
        c_(ops.config().text),
        n_(static_cast<int64_t>(in.tokens.size())),
        h_(c_.hidden_size),
        visual_rows_(in.visual_rows.begin(), in.visual_rows.end()),
        deepstack_(in.deepstack.begin(), in.deepstack.end()),
        spec_(c_, ops.weights(), ops.pool()) {
    for (const StepSequence& seq : in.sequences) {
      caches_.push_back(seq.cache);
      seq_rows_.push_back(seq.rows);
      rope_lengths_.push_back(seq.rope_length);
    }
    Embed(in);
    SetPositions(in.positions);
    x_.resize(n_ * h_);
  }

  absl::Status KeepRows(absl::Span<const int64_t> kept, absl::Span<const int64_t> positions,
                        absl::Span<const int64_t> visual_rows) override;
  absl::Status Norm(int layer, NormSite site) override;
  absl::Status Attention(int layer) override;
  absl::Status Route(int layer, bool with_scores, RouterResult* routing) override;
  absl::Status Experts(int layer, Phase phase, const RouterResult& routing,
                       ExpertProvider* experts) override;
  absl::Status AddMoeOutput() override { return AddY(); }
  absl::Status DenseMlp(int layer) override;
  absl::Status AddDeepStack(int layer) override;
  absl::Status Logits(bool all_rows, std::vector<float>* logits) override;
  absl::Status DrawTokens(absl::Span<const TokenDraw> draws, std::vector<int>* tokens) override;
  absl::StatusOr<const float*> HostRows(StepRows which) override;
  bool PrepareDeviceMoe(int layer, ExpertProvider* experts) override {
    return ops_.deferred_moe() && experts->LayerPinned(layer);
  }
  absl::Status DeviceMoe(int layer, Phase phase, ExpertProvider* experts, bool observed) override {
    return deferred_.Run(*this, layer, phase, experts, observed, n_ * h_);
  }
  absl::StatusOr<bool> DeferredReady(int layer) override { return deferred_.Ready(layer); }
  absl::StatusOr<DeferredLayer> TakeDeferred(int layer) override { return deferred_.Take(layer); }
  absl::Status ArmSpeculation(const SpeculationPlan& plan) override;
  const SpeculationRecord* Speculation(int target_layer) const override {
    return spec_.Record(target_layer);
  }

 private:
  void Embed(const StepInput& in);
  void SetPositions(absl::Span<const int64_t> positions) {
    rope_ = FamilyRope(c_, positions.data(), n_, seq_rows_, rope_lengths_);
  }
  absl::Status AddY() {
    for (int64_t i = 0; i < n_ * h_; ++i) hs_[i] += y_[i];
    return absl::OkStatus();
  }
  using Routed = std::vector<std::pair<int64_t, int>>;  // an expert's (token, slot) pairs

  // Computes the plan's experts in its order into their rows of `slot_out`:
  // runs of ready experts side by side, the others one at a time.
  absl::Status RunPlan(int layer, const LayerPlan& plan, const std::vector<Routed>& routed,
                       const RouterResult& r, ExpertProvider* experts,
                       std::vector<float>* slot_out);
  // The end of the run of plan entries from `begin` that RunSideBySide takes
  // (`begin` when there is none).
  size_t ReadyRunEnd(int layer, const LayerPlan& plan, size_t begin,
                     const std::vector<Routed>& routed, ExpertProvider* experts);
  // Plan entries [begin, end): acquired (or their host weights fetched) on
  // this thread, computed one per pool thread, released on this thread.
  absl::Status RunSideBySide(int layer, const LayerPlan& plan, size_t begin, size_t end,
                             const std::vector<Routed>& routed, const RouterResult& r,
                             ExpertProvider* experts, std::vector<float>* slot_out);
  // Computes expert `e` (from HostWeights() when `on_host`, else acquired)
  // over its routed (token, slot) pairs `tok` with the pool splitting each
  // kernel; writes weight * output into their rows of `slot_out`.
  absl::Status RunExpert(int layer, int e, bool on_host, const Routed& tok, const RouterResult& r,
                         ExpertProvider* experts, std::vector<float>* slot_out);
  double ComputeExpert(ThreadPool* pool, int layer, int e, const ExpertWeights& w,
                       const Routed& tok, const RouterResult& r, std::vector<float>* xs,
                       std::vector<float>* ys, std::vector<float>* slot_out) const;
  // Speculative execution: writes weight * the output computed ahead into
  // slot (t, j)'s row of `slot_out`; false when there is none.
  bool TakeSpeculative(int layer, const RouterResult& r, int64_t t, int j,
                       std::vector<float>* slot_out);
  // Sums the (token, slot) outputs per token in ascending expert order.
  void CombineSlots(const RouterResult& r, const std::vector<float>& slot_out);

  const CpuDecoderOps& ops_;
  const TextConfig& c_;
  std::vector<KvCache*> caches_;   // one per sequence
  std::vector<int64_t> seq_rows_;  // rows of each sequence in flight
  std::vector<int64_t> rope_lengths_;  // StepSequence::rope_length of each
  int64_t n_;                      // rows in flight; shrinks when tokens are compressed away
  const int64_t h_;
  std::vector<float> hs_, x_, y_;
  std::vector<float> xs_, ys_;  // one expert's gathered rows and outputs
  RopeTable rope_;
  std::vector<int64_t> visual_rows_;  // row of each visual token, -1 once dropped
  std::vector<const float*> deepstack_;
  CpuSpeculation spec_;       // idle unless armed (speculative execution)
  HostDeferredMoe deferred_;  // pinned layers run through DeviceMoe (ops_.deferred_moe())
};

void CpuDecoderStep::Embed(const StepInput& in) {
  const TensorView& embed = ops_.weights().embed;
  hs_.resize(n_ * h_);
  size_t v = 0;  // next visual row
  for (int64_t t = 0; t < n_; ++t) {
    if (in.visual_embeds != nullptr && v < in.visual_rows.size() && in.visual_rows[v] == t) {
      std::copy_n(in.visual_embeds + v * h_, h_, hs_.data() + t * h_);
      ++v;
      continue;
    }
    const TensorView row = embed.Row(in.tokens[t]);
    ToFloat(row.dtype, row.data, h_, hs_.data() + t * h_);
  }
}

absl::Status CpuDecoderStep::KeepRows(absl::Span<const int64_t> kept,
                                      absl::Span<const int64_t> positions,
                                      absl::Span<const int64_t> visual_rows) {
  const int64_t m = static_cast<int64_t>(kept.size());
  std::vector<float> new_hs(m * h_);
  for (int64_t i = 0; i < m; ++i)
    std::copy_n(hs_.data() + kept[i] * h_, h_, new_hs.data() + i * h_);
  hs_ = std::move(new_hs);
  n_ = m;
  spec_.Reset();  // armed rows are stale
  seq_rows_ = RowsAfterKeep(seq_rows_, kept);
  visual_rows_.assign(visual_rows.begin(), visual_rows.end());
  SetPositions(positions);
  x_.resize(n_ * h_);
  return absl::OkStatus();
}

absl::Status CpuDecoderStep::Norm(int layer, NormSite site) {
  const DecoderLayerWeights& w = ops_.weights().layers[layer];
  const bool input = site == NormSite::kInput;
  FamilyNorm(ops_.pool(), ops_.weights().spec, hs_.data(), n_, h_,
             input ? w.input_norm : w.post_norm, input ? w.input_norm_bias : w.post_norm_bias,
             c_.rms_norm_eps, x_.data());
  return absl::OkStatus();
}

absl::Status CpuDecoderStep::Attention(int layer) {
  const DecoderLayerWeights& w = ops_.weights().layers[layer];
  ThreadPool* pool = ops_.pool();
  if (c_.mla.has_value()) {
    const int64_t od = int64_t{c_.num_attention_heads} * c_.mla->v_head_dim;
    std::vector<float> attn(n_ * od);
    VISMOE_RETURN_IF_ERROR(
        LatentAttention(pool, c_, w, rope_, x_.data(), n_, layer, caches_, seq_rows_, attn.data()));
    y_.resize(n_ * h_);
    Linear(pool, attn.data(), n_, od, w.o, Bias(w.o_bias), y_.data());
    return AddY();
  }
  const int64_t n = n_, h = h_, hd = c_.head_dim;
  const int64_t qd = int64_t{c_.num_attention_heads} * hd,
                kvd = int64_t{c_.num_key_value_heads} * hd;
  std::vector<float> q(n * qd), k(n * kvd), v(n * kvd);
  Linear(pool, x_.data(), n, h, w.q, Bias(w.q_bias), q.data());
  Linear(pool, x_.data(), n, h, w.k, Bias(w.k_bias), k.data());
  Linear(pool, x_.data(), n, h, w.v, Bias(w.v_bias), v.data());
  // RMSNorm before the rotary embedding: per head (weight [head_dim]), or
  // OLMoE's over the whole projection (weight [heads * head_dim]).
  // Mixtral has none.
  const QkNormScope norm = ops_.weights().spec.qk_norm;
  if (norm == QkNormScope::kProjection) {
    RmsNorm(pool, q.data(), n, qd, w.q_norm, c_.rms_norm_eps, q.data());
    RmsNorm(pool, k.data(), n, kvd, w.k_norm, c_.rms_norm_eps, k.data());
  } else if (norm == QkNormScope::kPerHead) {
    RmsNorm(pool, q.data(), n * c_.num_attention_heads, hd, w.q_norm, c_.rms_norm_eps, q.data());
    RmsNorm(pool, k.data(), n * c_.num_key_value_heads, hd, w.k_norm, c_.rms_norm_eps, k.data());
  }
  if (c_.clip_qkv > 0) {  // OLMoE: after the norms, before RoPE
    for (std::vector<float>* t : {&q, &k, &v}) {
      for (float& x : *t) x = std::clamp(x, -c_.clip_qkv, c_.clip_qkv);
    }
  }
  ApplyRope(pool, rope_, q.data(), n, c_.num_attention_heads, c_.head_dim, qd);
  ApplyRope(pool, rope_, k.data(), n, c_.num_key_value_heads, c_.head_dim, kvd);
  std::vector<float> attn(n * qd);
  AttentionShape shape{c_.num_attention_heads, c_.num_key_value_heads, c_.head_dim, qd, kvd};
  shape.window = c_.LayerWindow(layer);
  std::vector<float> sinks;
  if (!w.sinks.empty()) {
    sinks.resize(c_.num_attention_heads);
    ToFloat(w.sinks.dtype, w.sinks.data, sinks.size(), sinks.data());
    shape.sinks = sinks.data();
  }
  int64_t row = 0;  // the sequence's first row
  for (size_t s = 0; s < caches_.size(); ++s) {
    KvCache* cache = caches_[s];
    const int64_t rows = seq_rows_[s];
    const int64_t start = cache->layer_length(layer);
    for (int64_t t = 0; t < rows; ++t) {
      std::copy_n(k.data() + (row + t) * kvd, kvd, cache->KeyRow(layer, start + t));
      std::copy_n(v.data() + (row + t) * kvd, kvd, cache->ValueRow(layer, start + t));
    }
    const KvPool& kv = *cache->pool();
    const PagedKv paged{kv.Keys(layer), kv.Values(layer), cache->blocks().data(), kv.block_tokens(),
                        kv.block_elems()};
    PagedAttention(pool, shape, q.data() + row * qd, rows, paged, start + rows, /*causal=*/true,
                   /*q_pos0=*/start, attn.data() + row * qd);
    row += rows;
  }
  y_.resize(n * h);
  Linear(pool, attn.data(), n, qd, w.o, Bias(w.o_bias), y_.data());
  return AddY();
}

absl::Status CpuDecoderStep::Route(int layer, bool /*with_scores*/, RouterResult* routing) {
  const DecoderLayerWeights& w = ops_.weights().layers[layer];
  FamilyRoute(ops_.pool(), ops_.weights().spec, c_, x_.data(), n_, h_, w, routing);
  return absl::OkStatus();
}

absl::Status CpuDecoderStep::Experts(int layer, Phase phase, const RouterResult& r,
                                     ExpertProvider* experts) {
  const int k = r.top_k;
  std::vector<Routed> routed(c_.num_experts);
  std::vector<float> slot_out(static_cast<size_t>(n_) * k * h_);
  for (int64_t t = 0; t < n_; ++t) {
    for (int j = 0; j < k; ++j) {
      // A skipped slot's expert is not computed for the token; one skipped
      // by every token is not declared, so the provider never fetches it.
      // Likewise a slot whose output was computed ahead (speculation).
      if (r.IsSkipped(t, j) ||
          (r.IsSpeculative(t, j) && TakeSpeculative(layer, r, t, j, &slot_out))) {
        continue;
      }
      routed[r.experts[t * k + j]].push_back({t, j});
    }
  }
  std::vector<int> active;
  std::vector<int64_t> tokens;
  for (int e = 0; e < c_.num_experts; ++e) {
    if (routed[e].empty()) continue;
    active.push_back(e);
    tokens.push_back(static_cast<int64_t>(routed[e].size()));
  }
  VISMOE_ASSIGN_OR_RETURN(LayerPlan plan, experts->BeginRoutedLayer(phase, layer, active, tokens));
  const absl::Status st = RunPlan(layer, plan, routed, r, experts, &slot_out);
  experts->EndLayer(layer);
  VISMOE_RETURN_IF_ERROR(st);
  if (plan.order.size() != active.size()) {
    return absl::InternalError(absl::StrCat("expert provider returned ", plan.order.size(),
                                            " experts for layer ", layer, ", expected ",
                                            active.size()));
  }
  CombineSlots(r, slot_out);
  AddSharedExperts(ops_.pool(), c_, ops_.weights().layers[layer], x_.data(), n_, h_, y_.data());
  return absl::OkStatus();
}

absl::Status CpuDecoderStep::RunPlan(int layer, const LayerPlan& plan,
                                     const std::vector<Routed>& routed, const RouterResult& r,
                                     ExpertProvider* experts, std::vector<float>* slot_out) {
  for (size_t i = 0; i < plan.order.size();) {
    // (A run holds only declared experts: ReadyRunEnd stops at any other.)
    if (const int e = plan.order[i]; e < 0 || e >= c_.num_experts || routed[e].empty()) {
      return absl::InternalError(
          absl::StrCat("expert provider returned undeclared expert ", e, " for layer ", layer));
    }
    const size_t end = ReadyRunEnd(layer, plan, i, routed, experts);
    if (end - i >= 2) {
      VISMOE_RETURN_IF_ERROR(RunSideBySide(layer, plan, i, end, routed, r, experts, slot_out));
      i = end;
      continue;
    }
    const int e = plan.order[i];
    VISMOE_RETURN_IF_ERROR(RunExpert(layer, e, plan.OnHost(i), routed[e], r, experts, slot_out));
    ++i;
  }
  return absl::OkStatus();
}

// Experts computed side by side: each on one thread (the kernels run inline),
// so a decode step streams several experts' weights at once, one sequential
// stream per core, with one hand-off per run instead of three per expert. Only
// for experts usable without a wait (resident, landed, or on the host) and
// with few rows each; prefill-sized experts split their kernels instead.
size_t CpuDecoderStep::ReadyRunEnd(int layer, const LayerPlan& plan, size_t begin,
                                   const std::vector<Routed>& routed, ExpertProvider* experts) {
  constexpr size_t kMaxRowsSideBySide = 16;
  ThreadPool* pool = ops_.pool();
  if (pool == nullptr || pool->size() < 2) return begin;
  size_t end = begin;
  for (; end < plan.order.size(); ++end) {
    const int e = plan.order[end];
    if (e < 0 || e >= c_.num_experts || routed[e].empty() ||
        routed[e].size() > kMaxRowsSideBySide || !(plan.OnHost(end) || experts->Ready(layer, e))) {
      break;
    }
  }
  return end;
}

absl::Status CpuDecoderStep::RunSideBySide(int layer, const LayerPlan& plan, size_t begin,
                                           size_t end, const std::vector<Routed>& routed,
                                           const RouterResult& r, ExpertProvider* experts,
                                           std::vector<float>* slot_out) {
  const size_t count = end - begin;
  std::vector<ExpertWeights> weights;
  weights.reserve(count);
  auto release = [&] {  // every expert acquired so far (host experts are not pinned)
    for (size_t i = 0; i < weights.size(); ++i) {
      if (!plan.OnHost(begin + i)) experts->Release(layer, plan.order[begin + i]);
    }
  };
  for (size_t i = begin; i < end; ++i) {
    absl::StatusOr<ExpertWeights> w = plan.OnHost(i) ? experts->HostWeights(layer, plan.order[i])
                                                     : experts->Acquire(layer, plan.order[i]);
    if (!w.ok()) {
      release();
      return w.status();
    }
    weights.push_back(*std::move(w));
  }
  std::vector<double> seconds(count);
  ParallelFor(ops_.pool(), static_cast<int64_t>(count), 1, [&](int64_t a, int64_t b) {
    std::vector<float> xs, ys;
    for (int64_t i = a; i < b; ++i) {
      const Routed& tok = routed[plan.order[begin + i]];
      seconds[i] = ComputeExpert(nullptr, layer, plan.order[begin + i], weights[i], tok, r, &xs,
                                 &ys, slot_out);
    }
  });
  release();
  for (size_t i = 0; i < count; ++i) {
    // The measured time is one thread's, as it will be when this runs alone.
    experts->OnHostExpertTime(static_cast<int64_t>(routed[plan.order[begin + i]].size()),
                              seconds[i]);
    if (spec_.Timed(layer)) spec_.AddCompute(layer, seconds[i]);
  }
  return absl::OkStatus();
}

absl::Status CpuDecoderStep::RunExpert(int layer, int e, bool on_host, const Routed& tok,
                                       const RouterResult& r, ExpertProvider* experts,
                                       std::vector<float>* slot_out) {
  // A host expert is read where the host store keeps it; the same kernels on
  // the same bytes as a slab, so the result is the same.
  absl::StatusOr<ExpertWeights> weights;
  if (on_host) {
    weights = experts->HostWeights(layer, e);
  } else {
    // A wait for a copy is where speculation computes the next layer's
    // predicted experts.
    const CpuSpeculation::Wait wait = spec_.BeforeAcquire(layer, e, experts, hs_.data());
    weights = experts->Acquire(layer, e);
    spec_.AfterAcquire(layer, wait);
  }
  if (!weights.ok()) return weights.status();
  const double seconds =
      ComputeExpert(ops_.pool(), layer, e, *weights, tok, r, &xs_, &ys_, slot_out);
  // Every expert here runs on the host's kernels: each is a sample of the
  // host-compute cost model.
  experts->OnHostExpertTime(static_cast<int64_t>(tok.size()), seconds);
  if (spec_.Timed(layer)) spec_.AddCompute(layer, seconds);  // t_compute of a target
  if (!on_host) experts->Release(layer, e);
  return absl::OkStatus();
}

// Gathers the expert's rows into xs, runs it into ys and writes
// weight * output into its (token, slot) rows of slot_out (rows no other
// expert writes). Returns the seconds the expert's kernels took.
double CpuDecoderStep::ComputeExpert(ThreadPool* pool, int layer, int e, const ExpertWeights& w,
                                     const Routed& tok, const RouterResult& r,
                                     std::vector<float>* xs, std::vector<float>* ys,
                                     std::vector<float>* slot_out) const {
  const int64_t h = h_;
  const int k = r.top_k;
  const int64_t m = static_cast<int64_t>(tok.size());
  xs->resize(m * h);
  ys->resize(m * h);
  for (int64_t i = 0; i < m; ++i) std::copy_n(x_.data() + tok[i].first * h, h, xs->data() + i * h);
  const auto start = std::chrono::steady_clock::now();
  const std::optional<ClampedSwigluExpert> oss =
      FamilyExpertExtras(c_, ops_.weights().layers[layer], e);
  ExpertForward(pool, w, xs->data(), m, h, c_.moe_intermediate_size, ys->data(),
                oss.has_value() ? &*oss : nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int64_t i = 0; i < m; ++i) {
    const int64_t t = tok[i].first;
    const int j = tok[i].second;
    const float wt = r.weights[t * k + j];
    float* o = slot_out->data() + (t * k + j) * h;
    const float* yr = ys->data() + i * h;
    for (int64_t d = 0; d < h; ++d) o[d] = yr[d] * wt;
  }
  return seconds;
}

bool CpuDecoderStep::TakeSpeculative(int layer, const RouterResult& r, int64_t t, int j,
                                     std::vector<float>* slot_out) {
  const int k = r.top_k;
  const int e = r.experts[t * k + j];
  const float* spec = spec_.Output(layer, t, e);
  if (spec == nullptr) return false;  // not computed ahead after all: compute it now
  const SpeculatedPair* pair = spec_.Record(layer)->Find(t, e);
  spec_.AddCompute(layer, pair->seconds);  // t_compute counts the kept outputs too
  const float wt = r.weights[t * k + j];
  float* o = slot_out->data() + (t * k + j) * h_;
  for (int64_t d = 0; d < h_; ++d) o[d] = spec[d] * wt;
  return true;
}

absl::Status CpuDecoderStep::ArmSpeculation(const SpeculationPlan& plan) {
  const int layers = c_.num_hidden_layers;
  if (plan.from_layer < 0 || plan.from_layer >= layers || plan.target_layer <= plan.from_layer ||
      plan.target_layer >= layers || !c_.IsMoeLayer(plan.target_layer)) {
    return absl::InvalidArgumentError(absl::StrCat("ArmSpeculation: from layer ", plan.from_layer,
                                                   " to layer ", plan.target_layer,
                                                   " is not a later MoE layer"));
  }
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    if (plan.rows[i] < 0 || plan.rows[i] >= n_ || (i > 0 && plan.rows[i] <= plan.rows[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("ArmSpeculation: row ", plan.rows[i],
                                                     " out of [0, ", n_, ") or not ascending"));
    }
  }
  spec_.Arm(plan);
  return absl::OkStatus();
}

void CpuDecoderStep::CombineSlots(const RouterResult& r, const std::vector<float>& slot_out) {
  const int k = r.top_k;
  y_.assign(n_ * h_, 0.0f);
  std::vector<int> slots(k);
  for (int64_t t = 0; t < n_; ++t) {
    for (int j = 0; j < k; ++j) slots[j] = j;
    std::sort(slots.begin(), slots.end(),
              [&](int a, int b) { return r.experts[t * k + a] < r.experts[t * k + b]; });
    float* o = y_.data() + t * h_;
    for (int j : slots) {
      if (r.IsSkipped(t, j)) continue;  // adds nothing (paper 001: removed from the sum)
      const float* so = slot_out.data() + (t * k + j) * h_;
      for (int64_t d = 0; d < h_; ++d) o[d] += so[d];
    }
  }
}

absl::Status CpuDecoderStep::DenseMlp(int layer) {
  const DecoderLayerWeights& w = ops_.weights().layers[layer];
  ThreadPool* pool = ops_.pool();
  const int64_t in = c_.intermediate_size;
  std::vector<float> gate(n_ * in), up(n_ * in);
  Linear(pool, x_.data(), n_, h_, w.gate_proj, nullptr, gate.data());
  Linear(pool, x_.data(), n_, h_, w.up_proj, nullptr, up.data());
  SiluMul(gate.data(), up.data(), n_ * in, gate.data());
  y_.resize(n_ * h_);
  Linear(pool, gate.data(), n_, in, w.down_proj, nullptr, y_.data());
  return AddY();
}

absl::Status CpuDecoderStep::AddDeepStack(int layer) {
  if (layer >= static_cast<int>(deepstack_.size()) || deepstack_[layer] == nullptr) {
    return absl::OkStatus();
  }
  const float* ds = deepstack_[layer];
  for (size_t i = 0; i < visual_rows_.size(); ++i) {
    if (visual_rows_[i] < 0) continue;  // compressed away
    float* row = hs_.data() + visual_rows_[i] * h_;
    for (int64_t d = 0; d < h_; ++d) row[d] += ds[i * h_ + d];
  }
  return absl::OkStatus();
}

absl::Status CpuDecoderStep::Logits(bool all_rows, std::vector<float>* logits) {
  const TextWeights& w = ops_.weights();
  const float* src = hs_.data();
  int64_t rows = n_;
  std::vector<float> last;  // the last row of each sequence
  if (!all_rows) {
    rows = static_cast<int64_t>(seq_rows_.size());
    last.resize(rows * h_);
    int64_t end = 0;
    for (int64_t s = 0; s < rows; ++s) {
      end += seq_rows_[s];
      std::copy_n(hs_.data() + (end - 1) * h_, h_, last.data() + s * h_);
    }
    src = last.data();
  }
  std::vector<float> normed(rows * h_);
  FamilyNorm(ops_.pool(), w.spec, src, rows, h_, w.final_norm, w.final_norm_bias, c_.rms_norm_eps,
             normed.data());
  logits->resize(rows * c_.vocab_size);
  Linear(ops_.pool(), normed.data(), rows, h_, w.lm_head, Bias(w.lm_head_bias), logits->data());
  return absl::OkStatus();
}

absl::Status CpuDecoderStep::DrawTokens(absl::Span<const TokenDraw> draws,
                                        std::vector<int>* tokens) {
  if (draws.size() != seq_rows_.size()) {
    return absl::InternalError(
        absl::StrCat(draws.size(), " draws for ", seq_rows_.size(), " sequences"));
  }
  return DecoderStep::DrawTokens(draws, tokens);
}

absl::StatusOr<const float*> CpuDecoderStep::HostRows(StepRows which) {
  switch (which) {
    case StepRows::kResidual:
      return hs_.data();
    case StepRows::kNormed:
      return x_.data();
    case StepRows::kMoeOutput:
      return y_.data();
  }
  return absl::InvalidArgumentError("HostRows: unknown activation");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuDecoderOps>> CpuDecoderOps::Create(const ModelConfig& config,
                                                                     const Checkpoint& checkpoint,
                                                                     ThreadPool* pool,
                                                                     bool deferred_moe) {
  VISMOE_ASSIGN_OR_RETURN(TextWeights weights, TextWeights::Load(config, checkpoint));
  std::unique_ptr<CpuDecoderOps> ops(new CpuDecoderOps(config, std::move(weights), pool));
  ops->deferred_moe_ = deferred_moe;
  return ops;
}

absl::StatusOr<std::unique_ptr<KvPool>> CpuDecoderOps::CreateKvPool(int64_t blocks,
                                                                    int64_t block_tokens) const {
  if (blocks <= 0 || blocks > INT32_MAX || block_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV pool: bad shape blocks=", blocks, " block_tokens=", block_tokens));
  }
  const TextConfig& c = config_.text;
  const int64_t row_elems = c.KvRowElems();
  const double bytes = static_cast<double>(c.KvPlanes()) * c.num_hidden_layers *
                       static_cast<double>(blocks) * static_cast<double>(block_tokens) * row_elems *
                       sizeof(float);
  const int64_t available = HostMemoryAvailable();
  const std::string too_big =
      absl::StrCat("a KV cache of ", blocks * block_tokens, " tokens needs ", bytes / (1 << 20),
                   " MiB of host memory",
                   available > 0 ? absl::StrCat(", ", available >> 20, " MiB are free") : "",
                   ": lower kv_cache_tokens or max_context_tokens");
  if (available > 0 && bytes > static_cast<double>(available)) {
    return absl::ResourceExhaustedError(too_big);
  }
  try {
    return std::make_unique<KvPool>(c.num_hidden_layers, blocks, block_tokens, row_elems,
                                    c.KvPlanes());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(too_big);
  }
}

absl::StatusOr<std::unique_ptr<DecoderStep>> CpuDecoderOps::BeginStep(
    const StepInput& input) const {
  VISMOE_RETURN_IF_ERROR(CheckStepSequences(input));
  for (const StepSequence& seq : input.sequences) {
    if (!seq.cache->has_host_rows()) {
      return absl::InvalidArgumentError("CPU step: the KV cache must hold host rows");
    }
  }
  return std::unique_ptr<DecoderStep>(new CpuDecoderStep(*this, input));
}

}  // namespace vismoe::cpu
