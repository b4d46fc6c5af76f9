#include "engine/backends/cuda/cuda_decoder_step.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/offload/expert_batch_runner.h"
#include "engine/ops/cuda/attention.h"
#include "engine/ops/cuda/embedding.h"
#include "engine/ops/cuda/greedy_argmax.h"
#include "engine/ops/cuda/moe_permute.h"
#include "engine/ops/cuda/norm.h"
#include "engine/ops/cuda/rope.h"
#include "engine/ops/cuda/token_draw_rows.h"

namespace vismoe::cuda {

CudaDecoderStep::CudaDecoderStep(const CudaDecoderOps& ops, std::vector<KvCache*> caches,
                                 std::vector<DeviceKvPool*> pools, std::vector<int64_t> seq_rows,
                                 std::unique_lock<std::mutex> lock)
    : ops_(ops),
      c_(ops.config_.text),
      caches_(std::move(caches)),
      pools_(std::move(pools)),
      seq_rows_(std::move(seq_rows)),
      lock_(std::move(lock)),
      st_(ops.stream_.get()),
      h_(c_.hidden_size) {}

CudaDecoderStep::~CudaDecoderStep() {
  // Leave no work queued that reads this step's scratch or a released slab.
  (void)ops_.stream_.Synchronize();
  ReleaseHeld();
  if (ops_.timer_ != nullptr) (void)ops_.timer_->Finish(st_, rows_in_);
  ops_.staging_.Reset();  // a step that failed may leave layers untaken
}

absl::Status CudaDecoderStep::Allocate(int64_t n) {
  DeviceArena& a = scratch();
  const size_t rows_h = static_cast<size_t>(n * h_);
  VISMOE_ASSIGN_OR_RETURN(hs_, a.AllocateArray<Bf16>(rows_h));
  VISMOE_ASSIGN_OR_RETURN(x_, a.AllocateArray<Bf16>(rows_h));
  VISMOE_ASSIGN_OR_RETURN(y_, a.AllocateArray<Bf16>(rows_h));
  if (!c_.mla.has_value()) {  // latent attention has its own (AllocateLatent)
    const int64_t qd = int64_t{c_.num_attention_heads} * c_.head_dim;
    const int64_t kvd = int64_t{c_.num_key_value_heads} * c_.head_dim;
    VISMOE_ASSIGN_OR_RETURN(qkv_, a.AllocateArray<Bf16>(n * (qd + 2 * kvd)));
    VISMOE_ASSIGN_OR_RETURN(attn_, a.AllocateArray<Bf16>(n * qd));
  }
  const int64_t nk = n * c_.num_experts_per_tok;
  VISMOE_ASSIGN_OR_RETURN(router_logits_, a.AllocateArray<float>(n * std::max(c_.num_experts, 1)));
  VISMOE_ASSIGN_OR_RETURN(top_experts_, a.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(top_weights_, a.AllocateArray<float>(nk));
  VISMOE_ASSIGN_OR_RETURN(counts_, a.AllocateArray<int32_t>(c_.num_experts));
  VISMOE_ASSIGN_OR_RETURN(offsets_, a.AllocateArray<int32_t>(c_.num_experts + 1));
  VISMOE_ASSIGN_OR_RETURN(row_token_, a.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(slot_row_, a.AllocateArray<int32_t>(nk));
  VISMOE_ASSIGN_OR_RETURN(xp_, a.AllocateArray<Bf16>(nk * h_));
  VISMOE_ASSIGN_OR_RETURN(yp_, a.AllocateArray<Bf16>(nk * h_));
  const int64_t inter = StepInterRows(c_);
  VISMOE_ASSIGN_OR_RETURN(gate_up_, a.AllocateArray<Bf16>(n * 2 * inter));
  VISMOE_ASSIGN_OR_RETURN(act_, a.AllocateArray<Bf16>(n * inter));
  if (ops_.device_moe_ && n <= kMaxDecodeRows) {
    MoeDecodeRouting& r = decode_routing_;
    r.experts = top_experts_;
    r.weights = top_weights_;
    r.offsets = offsets_;
    r.row_token = row_token_;
    r.slot_row = slot_row_;
    VISMOE_ASSIGN_OR_RETURN(r.active, a.AllocateArray<int32_t>(c_.num_experts));
    VISMOE_ASSIGN_OR_RETURN(r.active_count, a.AllocateArray<int32_t>(1));
    VISMOE_ASSIGN_OR_RETURN(decode_act_,
                            a.AllocateArray<float>(nk * int64_t{c_.moe_intermediate_size}));
    VISMOE_ASSIGN_OR_RETURN(decode_out_, a.AllocateArray<float>(nk * h_));
  }
  return c_.mla.has_value() ? AllocateLatent(n) : absl::OkStatus();
}

absl::Status CudaDecoderStep::UploadPositions(absl::Span<const int64_t> positions) {
  VISMOE_ASSIGN_OR_RETURN(positions_, scratch().AllocateArray<int64_t>(positions.size()));
  VISMOE_RETURN_IF_ERROR(
      CopyToDeviceAsync(positions_, positions.data(), positions.size() * sizeof(int64_t), st_));
  return c_.longrope.has_value() ? UploadRopeScales(positions) : absl::OkStatus();
}

// LongRoPE's mscale per row, as cpu::FamilyRope picks it: long when the
// sequence's length (its rope length, or else its last position + 1)
// exceeds original_max_position_embeddings. (Such steps are never graphs:
// PhiMoE's sparsemixer keeps DeviceMoe off.)
absl::Status CudaDecoderStep::UploadRopeScales(absl::Span<const int64_t> positions) {
  const TextConfig::LongRope& lr = *c_.longrope;
  rope_scales_host_.assign(static_cast<size_t>(n_), 1.0f);
  int64_t row = 0;
  for (size_t s = 0; s < seq_rows_.size(); ++s) {
    const int64_t rows = std::min(seq_rows_[s], n_ - row);
    int64_t length = s < rope_lengths_.size() ? rope_lengths_[s] : 0;
    for (int64_t i = row; i < row + rows; ++i) length = std::max(length, positions[i] + 1);
    const bool long_context = length > lr.original_max_position_embeddings;
    std::fill_n(rope_scales_host_.begin() + row, rows,
                static_cast<float>(long_context ? lr.long_mscale : lr.short_mscale));
    row += rows;
  }
  VISMOE_ASSIGN_OR_RETURN(rope_scales_, scratch().AllocateArray<float>(n_));
  return CopyToDeviceAsync(rope_scales_, rope_scales_host_.data(), n_ * sizeof(float), st_);
}

absl::Status CudaDecoderStep::Begin(const StepInput& in) {
  Time(OpTimer::Family::kEmbed);
  n_ = static_cast<int64_t>(in.tokens.size());
  rows_in_ = n_;
  for (const StepSequence& s : in.sequences) rope_lengths_.push_back(s.rope_length);
  VISMOE_RETURN_IF_ERROR(Allocate(n_));
  if (GraphEligible(in)) {  // a decode step: its launches may be a graph (step_graphs.h)
    VISMOE_RETURN_IF_ERROR(StageInputs(in));
    return Run(StepOp{StepOp::Kind::kBegin});
  }
  std::vector<int32_t> ids(in.tokens.begin(), in.tokens.end());
  VISMOE_ASSIGN_OR_RETURN(int32_t * ids_dev, scratch().AllocateArray<int32_t>(n_));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(ids_dev, ids.data(), ids.size() * sizeof(int32_t), st_));
  VISMOE_RETURN_IF_ERROR(UploadPositions(in.positions));
  VISMOE_RETURN_IF_ERROR(UploadBlockTables());
  VISMOE_RETURN_IF_ERROR(
      EmbeddingGather(ops_.embed_, c_.vocab_size, static_cast<int>(h_), ids_dev, n_, hs_, st_));
  if (in.visual_embeds != nullptr && !in.visual_rows.empty()) {
    VISMOE_RETURN_IF_ERROR(UploadVisual(in));
  }
  return absl::OkStatus();
}

// A pool's tables() has room for all of one step's tables: no block is in two
// caches. The caches' tables do not change during the step (the decoder takes
// blocks before it begins), so the copies may read them asynchronously.
absl::Status CudaDecoderStep::UploadBlockTables() {
  std::vector<std::pair<const DeviceKvPool*, int64_t>> used;  // entries taken per pool
  for (size_t s = 0; s < caches_.size(); ++s) {
    const std::vector<int32_t>& blocks = caches_[s]->blocks();
    auto it =
        std::find_if(used.begin(), used.end(), [&](const auto& u) { return u.first == pools_[s]; });
    if (it == used.end()) {
      used.emplace_back(pools_[s], 0);
      it = used.end() - 1;
    }
    int32_t* dst = pools_[s]->tables() + it->second;
    it->second += static_cast<int64_t>(blocks.size());
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(dst, blocks.data(), blocks.size() * sizeof(int32_t), st_));
    tables_.push_back(dst);
  }
  return absl::OkStatus();
}

// Visual rows replace the image-pad embeddings; DeepStack features wait on the
// device for their layers.
absl::Status CudaDecoderStep::UploadVisual(const StepInput& in) {
  const int64_t num_visual = static_cast<int64_t>(in.visual_rows.size());
  std::vector<Bf16> staged(static_cast<size_t>(num_visual * h_));
  auto upload = [&](const float* src) -> absl::StatusOr<Bf16*> {
    for (size_t i = 0; i < staged.size(); ++i) staged[i] = FloatToBf16(src[i]);
    VISMOE_ASSIGN_OR_RETURN(Bf16 * dst, scratch().AllocateArray<Bf16>(staged.size()));
    // Pageable source: the copy is staged before this returns, so `staged` may be reused.
    VISMOE_RETURN_IF_ERROR(
        CopyToDeviceAsync(dst, staged.data(), staged.size() * sizeof(Bf16), st_));
    return dst;
  };
  VISMOE_ASSIGN_OR_RETURN(Bf16 * visual, upload(in.visual_embeds));
  VISMOE_RETURN_IF_ERROR(SetVisualRows(in.visual_rows));
  VISMOE_RETURN_IF_ERROR(
      ScatterRows(visual, num_visual, static_cast<int>(h_), ds_dst_, hs_, n_, st_));
  for (const float* ds : in.deepstack) {
    if (ds == nullptr) {
      deepstack_.push_back(nullptr);
      continue;
    }
    VISMOE_ASSIGN_OR_RETURN(Bf16 * d, upload(ds));
    deepstack_.push_back(d);
  }
  if (!deepstack_.empty()) {
    VISMOE_ASSIGN_OR_RETURN(ds_tmp_, scratch().AllocateArray<Bf16>(staged.size()));
  }
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::SetVisualRows(absl::Span<const int64_t> visual_rows) {
  std::vector<int32_t> src, dst;
  for (size_t i = 0; i < visual_rows.size(); ++i) {
    if (visual_rows[i] < 0) continue;  // compressed away
    src.push_back(static_cast<int32_t>(i));
    dst.push_back(static_cast<int32_t>(visual_rows[i]));
  }
  ds_count_ = static_cast<int64_t>(src.size());
  if (ds_count_ == 0) return absl::OkStatus();
  // Fresh buffers: kernels queued earlier may still read the old ones.
  VISMOE_ASSIGN_OR_RETURN(ds_src_, scratch().AllocateArray<int32_t>(ds_count_));
  VISMOE_ASSIGN_OR_RETURN(ds_dst_, scratch().AllocateArray<int32_t>(ds_count_));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(ds_src_, src.data(), src.size() * sizeof(int32_t), st_));
  return CopyToDeviceAsync(ds_dst_, dst.data(), dst.size() * sizeof(int32_t), st_);
}

absl::Status CudaDecoderStep::KeepRows(absl::Span<const int64_t> kept,
                                       absl::Span<const int64_t> positions,
                                       absl::Span<const int64_t> visual_rows) {
  VISMOE_RETURN_IF_ERROR(Flush());
  const int64_t m = static_cast<int64_t>(kept.size());
  std::vector<int32_t> rows(kept.begin(), kept.end());
  VISMOE_ASSIGN_OR_RETURN(int32_t * rows_dev, scratch().AllocateArray<int32_t>(m));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(rows_dev, rows.data(), m * sizeof(int32_t), st_));
  VISMOE_ASSIGN_OR_RETURN(Bf16 * hs, scratch().AllocateArray<Bf16>(m * h_));
  VISMOE_RETURN_IF_ERROR(PermuteRows(hs_, static_cast<int>(h_), rows_dev, m, hs, st_));
  hs_ = hs;  // the old rows stay in the arena until the step ends
  // DeepStack goes on adding to the visual rows that survived.
  if (!deepstack_.empty()) VISMOE_RETURN_IF_ERROR(SetVisualRows(visual_rows));
  n_ = m;
  seq_rows_ = RowsAfterKeep(seq_rows_, kept);
  return UploadPositions(positions);  // (LongRoPE's scales read the rows kept)
}

absl::Status CudaDecoderStep::Norm(int layer, NormSite site) {
  return Run(StepOp{StepOp::Kind::kNorm, layer, static_cast<int>(site)});
}

absl::Status CudaDecoderStep::NormNow(int layer, NormSite site) {
  Time(OpTimer::Family::kNorm);
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  const bool input = site == NormSite::kInput;
  const Bf16* g = input ? w.input_norm : w.post_norm;
  if (ops_.norm_ == NormKind::kLayerNorm) {  // PhiMoE
    return LayerNorm(hs_, n_, static_cast<int>(h_), g, input ? w.input_norm_bias : w.post_norm_bias,
                     c_.rms_norm_eps, x_, st_);
  }
  return RmsNorm(hs_, h_, n_, 1, static_cast<int>(h_), g, c_.rms_norm_eps, x_, h_, st_);
}

absl::Status CudaDecoderStep::Attention(int layer) {
  return Run(StepOp{StepOp::Kind::kAttention, layer});
}

absl::Status CudaDecoderStep::AttentionNow(int layer) {
  Time(OpTimer::Family::kAttention);
  if (c_.mla.has_value()) return LatentAttentionNow(layer);
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  Blas& blas = *ops_.blas_;
  const int64_t n = n_, h = h_, hd = c_.head_dim;
  const int64_t qd = int64_t{c_.num_attention_heads} * hd,
                kvd = int64_t{c_.num_key_value_heads} * hd;
  const int64_t width = qd + 2 * kvd;  // fused q|k|v rows
  Bf16* q = qkv_;
  Bf16* k = qkv_ + qd;
  Bf16* v = qkv_ + qd + kvd;
  // q, k and v are stacked in the weights: one GEMM.
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, n, h, w.qkv, WeightLayout::kOutIn, width, qkv_, GemmOut::kBf16));
  if (w.qkv_bias != nullptr) VISMOE_RETURN_IF_ERROR(AddBias(qkv_, n, width, w.qkv_bias, st_));
  VISMOE_RETURN_IF_ERROR(NormRope(w));
  AttentionShape shape{c_.num_attention_heads, c_.num_key_value_heads, static_cast<int>(hd), width,
                       kvd};
  shape.window = c_.LayerWindow(layer);
  shape.sinks = w.sinks;
  shape.scale = static_cast<float>(c_.AttentionScale());
  int64_t row = 0;  // the sequence's first row
  for (size_t s = 0; s < caches_.size(); ++s) {
    const DeviceKvPool& pool = *pools_[s];
    const int64_t rows = seq_rows_[s];
    const int64_t start = caches_[s]->layer_length(layer);
    // A staged step reads the cache length from the device (step_graphs.h).
    const int32_t* start_dev =
        staged_.kv_start == nullptr ? nullptr : staged_.kv_start + s * c_.num_hidden_layers + layer;
    const PagedKv paged{tables_[s], pool.block_tokens(), pool.block_elems(), start_dev};
    Bf16* keys = pool.Keys(layer);
    Bf16* values = pool.Values(layer);
    VISMOE_RETURN_IF_ERROR(PagedKvWrite2(k + row * width, v + row * width, width, rows, kvd, keys,
                                         values, paged, start, st_));
    VISMOE_RETURN_IF_ERROR(PagedAttention(shape, q + row * width, rows, keys, values, paged,
                                          start + rows, /*causal=*/true, /*q_pos0=*/start,
                                          attn_ + row * qd, st_));
    row += rows;
  }
  // hs += o_proj(attn): the residual add is the GEMM's beta = 1.
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(attn_, n, qd, w.o, WeightLayout::kOutIn, h, hs_, GemmOut::kBf16, 1.0f));
  return w.o_bias == nullptr ? absl::OkStatus() : AddBias(hs_, n, h, w.o_bias, st_);
}

// The family's q/k norms (engine/model/arch_spec.h QkNormScope), OLMoE's
// clip_qkv after them, then the rotary embedding of q and k, in place in the
// fused rows -- the CPU op's order.
absl::Status CudaDecoderStep::NormRope(const CudaDecoderOps::Layer& w) {
  const int64_t n = n_, hd = c_.head_dim;
  const int nq = c_.num_attention_heads, nkv = c_.num_key_value_heads;
  const int64_t qd = nq * hd, kvd = nkv * hd, width = qd + 2 * kvd;
  const int* section = ops_.mrope_section_.empty() ? nullptr : ops_.mrope_section_.data();
  const QkNormScope scope = ops_.qk_norm_;
  // Qwen3: one fused launch (which neither clamps nor scales cos / sin).
  if (scope == QkNormScope::kPerHead && c_.clip_qkv <= 0 && ops_.rope_scale_ == 1.0f &&
      rope_scales_ == nullptr) {
    return QkNormRope(qkv_, n, nq, nkv, static_cast<int>(hd), width, w.q_norm, w.k_norm,
                      c_.rms_norm_eps, positions_, ops_.inv_freq_, section, st_);
  }
  if (scope != QkNormScope::kNone) {  // per head, or over the whole projection
    const bool per_head = scope == QkNormScope::kPerHead;
    VISMOE_RETURN_IF_ERROR(RmsNorm(qkv_, width, n, per_head ? nq : 1,
                                   static_cast<int>(per_head ? hd : qd), w.q_norm, c_.rms_norm_eps,
                                   qkv_, width, st_));
    VISMOE_RETURN_IF_ERROR(RmsNorm(qkv_ + qd, width, n, per_head ? nkv : 1,
                                   static_cast<int>(per_head ? hd : kvd), w.k_norm, c_.rms_norm_eps,
                                   qkv_ + qd, width, st_));
  }
  if (c_.clip_qkv > 0) {  // q, k and v: the whole fused rows
    VISMOE_RETURN_IF_ERROR(Clamp(qkv_, n * width, static_cast<float>(c_.clip_qkv), st_));
  }
  // q's heads then k's are adjacent in each row: one rotation over both.
  return ApplyRope(qkv_, n, nq + nkv, static_cast<int>(hd), width, positions_, ops_.inv_freq_,
                   section, st_, ops_.rope_scale_, rope_scales_);
}

absl::Status CudaDecoderStep::DenseMlp(int layer) {
  return Run(StepOp{StepOp::Kind::kDenseMlp, layer});
}

absl::Status CudaDecoderStep::DenseMlpNow(int layer) {
  Time(OpTimer::Family::kDenseMlp);
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  Blas& blas = *ops_.blas_;
  const int64_t n = n_, h = h_, in = c_.intermediate_size;
  VISMOE_RETURN_IF_ERROR(blas.Linear(x_, n, h, w.gate_proj, WeightLayout::kOutIn, in, gate_up_,
                                     GemmOut::kBf16, 0.0f, 2 * in));
  VISMOE_RETURN_IF_ERROR(blas.Linear(x_, n, h, w.up_proj, WeightLayout::kOutIn, in, gate_up_ + in,
                                     GemmOut::kBf16, 0.0f, 2 * in));
  VISMOE_RETURN_IF_ERROR(SiluMulFused(gate_up_, n, in, act_, st_));
  return blas.Linear(act_, n, in, w.down_proj, WeightLayout::kOutIn, h, hs_, GemmOut::kBf16, 1.0f);
}

absl::Status CudaDecoderStep::AddDeepStack(int layer) {
  VISMOE_RETURN_IF_ERROR(Flush());
  Time(OpTimer::Family::kOther);
  if (layer >= static_cast<int>(deepstack_.size()) || deepstack_[layer] == nullptr ||
      ds_count_ == 0) {
    return absl::OkStatus();
  }
  VISMOE_RETURN_IF_ERROR(
      PermuteRows(deepstack_[layer], static_cast<int>(h_), ds_src_, ds_count_, ds_tmp_, st_));
  return AddRowsAt(ds_tmp_, ds_count_, static_cast<int>(h_), ds_dst_, hs_, n_, st_);
}

absl::StatusOr<const Bf16*> CudaDecoderStep::LastRows() {
  const int64_t rows = static_cast<int64_t>(seq_rows_.size());
  if (rows == n_) return hs_;  // one row per sequence: every row is a last row
  std::vector<int32_t> last(rows);
  int64_t end = 0;
  for (int64_t s = 0; s < rows; ++s) last[s] = static_cast<int32_t>((end += seq_rows_[s]) - 1);
  VISMOE_ASSIGN_OR_RETURN(int32_t * last_dev, scratch().AllocateArray<int32_t>(rows));
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(last_dev, last.data(), rows * sizeof(int32_t), st_));
  VISMOE_ASSIGN_OR_RETURN(Bf16 * gathered, scratch().AllocateArray<Bf16>(rows * h_));
  VISMOE_RETURN_IF_ERROR(PermuteRows(hs_, static_cast<int>(h_), last_dev, rows, gathered, st_));
  return gathered;
}

absl::Status CudaDecoderStep::LmHead(const Bf16* src, int64_t r, int64_t m, Bf16* normed,
                                     float* out) {
  VISMOE_RETURN_IF_ERROR(ops_.norm_ == NormKind::kLayerNorm
                             ? LayerNorm(src + r * h_, m, static_cast<int>(h_), ops_.final_norm_,
                                         ops_.final_norm_bias_, c_.rms_norm_eps, normed, st_)
                             : RmsNorm(src + r * h_, h_, m, 1, static_cast<int>(h_),
                                       ops_.final_norm_, c_.rms_norm_eps, normed, h_, st_));
  VISMOE_RETURN_IF_ERROR(ops_.blas_->Linear(normed, m, h_, ops_.lm_head_, WeightLayout::kOutIn,
                                            c_.vocab_size, out, GemmOut::kF32));
  return ops_.lm_head_bias_ == nullptr ? absl::OkStatus()
                                       : AddBiasF32(out, m, c_.vocab_size, ops_.lm_head_bias_, st_);
}

absl::Status CudaDecoderStep::Logits(bool all_rows, std::vector<float>* logits) {
  VISMOE_RETURN_IF_ERROR(Flush());
  Time(OpTimer::Family::kLogits);
  const int64_t vocab = c_.vocab_size;
  const Bf16* src = hs_;
  int64_t rows = n_;
  if (!all_rows) {  // the last row of each sequence, gathered
    rows = static_cast<int64_t>(seq_rows_.size());
    VISMOE_ASSIGN_OR_RETURN(src, LastRows());
  }
  const int64_t chunk = std::min(rows, CudaDecoderOps::kLogitRowsPerChunk);
  VISMOE_ASSIGN_OR_RETURN(Bf16 * normed, scratch().AllocateArray<Bf16>(chunk * h_));
  VISMOE_ASSIGN_OR_RETURN(float* out, scratch().AllocateArray<float>(chunk * vocab));
  logits->resize(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t m = std::min(chunk, rows - r);
    VISMOE_RETURN_IF_ERROR(LmHead(src, r, m, normed, out));
    VISMOE_RETURN_IF_ERROR(CopyToHostAsync(logits->data() + r * vocab, out,
                                           static_cast<size_t>(m * vocab) * sizeof(float), st_));
    // The next chunk reuses `normed` and `out`: the copy must be done (a
    // pageable destination makes it synchronous anyway).
    VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  }
  ReleaseHeld();
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::DrawTokens(absl::Span<const TokenDraw> draws,
                                         std::vector<int>* tokens) {
  const int64_t vocab = c_.vocab_size;
  const int64_t rows = static_cast<int64_t>(seq_rows_.size());
  if (static_cast<int64_t>(draws.size()) != rows) {
    return absl::InternalError(absl::StrCat(draws.size(), " draws for ", rows, " sequences"));
  }
  bool sampled = false;
  for (const TokenDraw& d : draws) sampled = sampled || d.temperature > 0.0f;
  // Without the device's draw: every row's logits to the host, drawn there.
  if (sampled && !ops_.device_sampling_) return DecoderStep::DrawTokens(draws, tokens);
  VISMOE_RETURN_IF_ERROR(Flush());
  Time(OpTimer::Family::kLogits);
  if (static_cast<size_t>(rows) * sizeof(int32_t) > ops_.greedy_ids_.size()) {
    return absl::InternalError(absl::StrCat(rows, " sequences in one step: more than sized for"));
  }
  auto* host_draws = static_cast<DeviceTokenDraw*>(ops_.token_draws_.data());
  for (int64_t r = 0; r < rows; ++r) {
    const TokenDraw& d = draws[r];
    host_draws[r] = {d.temperature, d.top_k, d.top_p, 0, d.uniform};
  }
  VISMOE_ASSIGN_OR_RETURN(const Bf16* src, LastRows());
  const int64_t chunk = std::min(rows, CudaDecoderOps::kLogitRowsPerChunk);
  VISMOE_ASSIGN_OR_RETURN(Bf16 * normed, scratch().AllocateArray<Bf16>(chunk * h_));
  VISMOE_ASSIGN_OR_RETURN(float* out, scratch().AllocateArray<float>(chunk * vocab));
  VISMOE_ASSIGN_OR_RETURN(char* argmax_work,
                          scratch().AllocateArray<char>(GreedyArgmaxWorkspaceBytes(chunk)));
  auto* ids = static_cast<int32_t*>(ops_.greedy_ids_.device_data());
  const auto* dev_draws = static_cast<const DeviceTokenDraw*>(ops_.token_draws_.device_data());
  // Rows the kernel leaves to the host (kDrawOnHost): a top_k draw's logits
  // come back with its chunk; a crowded bucket's (rare) from its chunk
  // computed again -- the same shape, so the same logits.
  std::vector<std::vector<float>> host_rows(static_cast<size_t>(rows));
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
  auto keep_row = [&](int64_t i, int64_t first) -> absl::Status {
    host_rows[i].resize(static_cast<size_t>(vocab));
    return CopyToHostAsync(host_rows[i].data(), out + (i - first) * vocab, row_bytes, st_);
  };
  // Stream order lets the next chunk reuse `normed` and `out`: no wait inside.
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t m = std::min(chunk, rows - r);
    VISMOE_RETURN_IF_ERROR(LmHead(src, r, m, normed, out));
    VISMOE_RETURN_IF_ERROR(GreedyArgmaxRows(out, m, vocab, ids + r, argmax_work, st_));
    if (!sampled) continue;
    VISMOE_RETURN_IF_ERROR(DrawTokenRows(out, m, vocab, dev_draws + r, ids + r, st_));
    for (int64_t i = r; i < r + m; ++i) {
      const TokenDraw& d = draws[i];
      if (d.temperature > 0.0f && d.top_k > 0 && d.top_k < vocab) {
        VISMOE_RETURN_IF_ERROR(keep_row(i, r));
      }
    }
  }
  VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  const auto* host = static_cast<const int32_t*>(ops_.greedy_ids_.data());
  tokens->assign(host, host + rows);
  auto crowded = [&](int64_t i) { return (*tokens)[i] == kDrawOnHost && host_rows[i].empty(); };
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t m = std::min(chunk, rows - r);
    bool again = false;
    for (int64_t i = r; i < r + m; ++i) again = again || crowded(i);
    if (!again) continue;
    VISMOE_RETURN_IF_ERROR(LmHead(src, r, m, normed, out));
    for (int64_t i = r; i < r + m; ++i) {
      if (crowded(i)) VISMOE_RETURN_IF_ERROR(keep_row(i, r));
    }
    VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  }
  TokenPicker picker;
  for (int64_t i = 0; i < rows; ++i) {
    if ((*tokens)[i] == kDrawOnHost) (*tokens)[i] = DrawToken(host_rows[i], draws[i], &picker);
  }
  ReleaseHeld();
  return absl::OkStatus();
}

absl::StatusOr<const float*> CudaDecoderStep::HostRows(StepRows which) {
  VISMOE_RETURN_IF_ERROR(Flush());
  Time(OpTimer::Family::kOther);
  const Bf16* src = which == StepRows::kResidual ? hs_ : which == StepRows::kNormed ? x_ : y_;
  VISMOE_RETURN_IF_ERROR(DownloadF32(src, n_ * h_, &host_rows_));
  ReleaseHeld();  // the stream has caught up
  return host_rows_.data();
}

absl::Status CudaDecoderStep::DownloadF32(const Bf16* src, int64_t count,
                                          std::vector<float>* out) const {
  std::vector<Bf16> tmp(static_cast<size_t>(count));
  VISMOE_RETURN_IF_ERROR(CopyToHostAsync(tmp.data(), src, tmp.size() * sizeof(Bf16), st_));
  VISMOE_RETURN_IF_ERROR(ops_.stream_.Synchronize());
  out->resize(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) (*out)[i] = Bf16ToFloat(tmp[i]);
  return absl::OkStatus();
}

void CudaDecoderStep::Time(OpTimer::Family family) {
  if (ops_.timer_ != nullptr) ops_.timer_->Mark(family, st_);
}

}  // namespace vismoe::cuda
