// DeepSeek's parts of CudaDecoderStep (cuda_decoder_step.h): multi-head
// latent attention over the one-plane latent KV cache, and the shared
// experts. The math is the CPU reference's (engine/backends/cpu/
// cpu_latent_attention.h, cpu_family_ops.h) with bf16 activations.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/backends/cuda/cuda_decoder_step.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/latent_attention.h"
#include "engine/ops/cuda/norm.h"

namespace vismoe::cuda {
namespace {

// transformers' q_a_layernorm and kv_a_layernorm use this eps, whatever
// rms_norm_eps says (as cpu_latent_attention.cc).
constexpr float kLatentNormEps = 1e-6f;

}  // namespace

absl::Status CudaDecoderStep::AllocateLatent(int64_t n) {
  DeviceArena& a = scratch();
  const LatentShape s = LatentShapeOf(c_);
  const int64_t chunk = std::min(n, CudaDecoderOps::kLatentChunkRows);
  if (c_.mla->q_lora_rank > 0) {
    VISMOE_ASSIGN_OR_RETURN(mla_.qa, a.AllocateArray<Bf16>(n * c_.mla->q_lora_rank));
  }
  VISMOE_ASSIGN_OR_RETURN(mla_.q, a.AllocateArray<Bf16>(n * s.q_stride()));
  VISMOE_ASSIGN_OR_RETURN(mla_.ckv, a.AllocateArray<Bf16>(n * s.row_elems()));
  VISMOE_ASSIGN_OR_RETURN(mla_.out, a.AllocateArray<Bf16>(n * s.num_heads * s.v_dim));
  VISMOE_ASSIGN_OR_RETURN(mla_.q_abs, a.AllocateArray<float>(chunk * s.num_heads * s.rank));
  VISMOE_ASSIGN_OR_RETURN(mla_.o_lat, a.AllocateArray<float>(chunk * s.num_heads * s.rank));
  return absl::OkStatus();
}

// q and the new cache rows [latent | k_pe] from x; the latent normed and both
// rope parts rotated in place; each sequence's rows written to its cache and
// attended (absorbed, in chunks of kLatentChunkRows step rows); hs += o_proj.
absl::Status CudaDecoderStep::LatentAttentionNow(int layer) {
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  const TextConfig::Mla& m = *c_.mla;
  Blas& blas = *ops_.blas_;
  const int64_t n = n_, h = h_;
  const LatentShape s = LatentShapeOf(c_);
  const int64_t qs = s.q_stride(), re = s.row_elems(), od = int64_t{s.num_heads} * s.v_dim;
  if (m.q_lora_rank > 0) {
    const int64_t qr = m.q_lora_rank;
    VISMOE_RETURN_IF_ERROR(
        blas.Linear(x_, n, h, w.q_a, WeightLayout::kOutIn, qr, mla_.qa, GemmOut::kBf16));
    if (w.q_a_bias != nullptr) VISMOE_RETURN_IF_ERROR(AddBias(mla_.qa, n, qr, w.q_a_bias, st_));
    VISMOE_RETURN_IF_ERROR(RmsNorm(mla_.qa, qr, n, 1, static_cast<int>(qr), w.q_a_norm,
                                   kLatentNormEps, mla_.qa, qr, st_));
    VISMOE_RETURN_IF_ERROR(
        blas.Linear(mla_.qa, n, qr, w.q, WeightLayout::kOutIn, qs, mla_.q, GemmOut::kBf16));
  } else {
    VISMOE_RETURN_IF_ERROR(
        blas.Linear(x_, n, h, w.q, WeightLayout::kOutIn, qs, mla_.q, GemmOut::kBf16));
  }
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(x_, n, h, w.kv_a, WeightLayout::kOutIn, re, mla_.ckv, GemmOut::kBf16));
  if (w.kv_a_bias != nullptr) VISMOE_RETURN_IF_ERROR(AddBias(mla_.ckv, n, re, w.kv_a_bias, st_));
  VISMOE_RETURN_IF_ERROR(
      RmsNorm(mla_.ckv, re, n, 1, s.rank, w.kv_a_norm, kLatentNormEps, mla_.ckv, re, st_));
  // Each q head's rope part (after its nope part), then the one rope key.
  VISMOE_RETURN_IF_ERROR(RopeHeads(mla_.q, n, s.num_heads, s.nope_dim + s.rope_dim, s.nope_dim,
                                   s.rope_dim, qs, m.rope_interleave, positions_, ops_.inv_freq_,
                                   ops_.rope_scale_, st_));
  VISMOE_RETURN_IF_ERROR(RopeHeads(mla_.ckv, n, 1, re, s.rank, s.rope_dim, re, m.rope_interleave,
                                   positions_, ops_.inv_freq_, ops_.rope_scale_, st_));
  // Each sequence's new rows into its own cache (the chunks below may span
  // sequences); a staged step reads the cache length from the device
  // (step_graphs.h), and a chunk's positions are then offsets from it.
  const size_t seqs = caches_.size();
  std::vector<PagedKv> paged(seqs);
  std::vector<int64_t> first(seqs), start(seqs);
  int64_t row = 0;
  for (size_t q = 0; q < seqs; ++q) {
    const DeviceKvPool& pool = *pools_[q];
    const int32_t* start_dev =
        staged_.kv_start == nullptr ? nullptr : staged_.kv_start + q * c_.num_hidden_layers + layer;
    paged[q] = PagedKv{tables_[q], pool.block_tokens(), pool.block_elems(), start_dev};
    first[q] = row;
    start[q] = caches_[q]->layer_length(layer);
    VISMOE_RETURN_IF_ERROR(PagedKvWrite(mla_.ckv + row * re, re, seq_rows_[q], re, pool.Keys(layer),
                                        paged[q], start[q], st_));
    row += seq_rows_[q];
  }
  // Per chunk of step rows: one absorb and one expand over all its rows
  // (kv_b_proj read once), the attention per sequence over its cache.
  const int64_t lat = int64_t{s.num_heads} * s.rank;
  for (int64_t c0 = 0; c0 < n; c0 += CudaDecoderOps::kLatentChunkRows) {
    const int64_t rows = std::min(n - c0, CudaDecoderOps::kLatentChunkRows);
    VISMOE_RETURN_IF_ERROR(LatentAbsorbQuery(s, mla_.q + c0 * qs, rows, w.kv_b, mla_.q_abs, st_));
    for (size_t q = 0; q < seqs; ++q) {
      const int64_t lo = std::max(c0, first[q]);
      const int64_t hi = std::min(c0 + rows, first[q] + seq_rows_[q]);
      if (lo >= hi) continue;
      const int64_t offset = lo - first[q];  // the rows' offset in their sequence's step rows
      VISMOE_RETURN_IF_ERROR(LatentPagedAttention(
          s, mla_.q_abs + (lo - c0) * lat, mla_.q + lo * qs, hi - lo, pools_[q]->Keys(layer),
          paged[q], paged[q].start == nullptr ? start[q] + offset : offset,
          mla_.o_lat + (lo - c0) * lat, st_));
    }
    VISMOE_RETURN_IF_ERROR(
        LatentExpandOutput(s, mla_.o_lat, rows, w.kv_b, mla_.out + c0 * od, st_));
  }
  // hs += o_proj(out): the residual add is the GEMM's beta = 1.
  VISMOE_RETURN_IF_ERROR(
      blas.Linear(mla_.out, n, od, w.o, WeightLayout::kOutIn, h, hs_, GemmOut::kBf16, 1.0f));
  return w.o_bias == nullptr ? absl::OkStatus() : AddBias(hs_, n, h, w.o_bias, st_);
}

absl::Status CudaDecoderStep::SharedExperts(int layer, bool accumulate) {
  const CudaDecoderOps::Layer& w = ops_.layers_[layer];
  if (w.shared_gate == nullptr) return absl::OkStatus();
  Blas& blas = *ops_.blas_;
  const int64_t n = n_, h = h_;
  const int64_t si = int64_t{c_.n_shared_experts} * c_.moe_intermediate_size;
  // Stream order: the routed experts' GEMMs have read gate_up_ and act_ already.
  VISMOE_RETURN_IF_ERROR(blas.Linear(x_, n, h, w.shared_gate, WeightLayout::kOutIn, si, gate_up_,
                                     GemmOut::kBf16, 0.0f, 2 * si));
  VISMOE_RETURN_IF_ERROR(blas.Linear(x_, n, h, w.shared_up, WeightLayout::kOutIn, si, gate_up_ + si,
                                     GemmOut::kBf16, 0.0f, 2 * si));
  VISMOE_RETURN_IF_ERROR(SiluMulFused(gate_up_, n, si, act_, st_));
  return blas.Linear(act_, n, si, w.shared_down, WeightLayout::kOutIn, h, y_, GemmOut::kBf16,
                     accumulate ? 1.0f : 0.0f);
}

}  // namespace vismoe::cuda
