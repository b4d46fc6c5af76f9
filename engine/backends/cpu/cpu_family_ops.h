// The CPU backend's per-family variants of a decoder's norm, router and
// rotary table (engine/model/arch_spec.h), shared by the decoder step and
// speculative execution so both compute a family alike.
// Thread safety: reentrant; work is split over `pool` (null runs inline).
#ifndef VISMOE_ENGINE_BACKENDS_CPU_CPU_FAMILY_OPS_H_
#define VISMOE_ENGINE_BACKENDS_CPU_CPU_FAMILY_OPS_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "engine/core/routing.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/arch_spec.h"
#include "engine/model/model_config.h"
#include "engine/model/text_weights.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rope.h"

namespace vismoe::cpu {

// out [rows, h] = RMSNorm(in) * weight, or LayerNorm(in) * weight + bias
// (NormKind::kLayerNorm). `out` may alias `in`.
void FamilyNorm(ThreadPool* pool, const ArchSpec& spec, const float* in, int64_t rows, int64_t h,
                const TensorView& weight, const TensorView& bias, float eps, float* out);

// The family's router (RouterKind) of layer weights `w` over x [n, h].
void FamilyRoute(ThreadPool* pool, const ArchSpec& spec, const TextConfig& c, const float* x,
                 int64_t n, int64_t h, const DecoderLayerWeights& w, RouterResult* out);
// GPT-OSS's bias rows and clamped SwiGLU for expert `e` of layer weights
// `w`; nothing for the families without (TextConfig::clamped_swiglu).
std::optional<ClampedSwigluExpert> FamilyExpertExtras(const TextConfig& c,
                                                      const DecoderLayerWeights& w, int e);
// x [n, h] += the shared experts of `w` (DeepSeek) on `in` [n, h]; nothing
// when the layer has none.
void AddSharedExperts(ThreadPool* pool, const TextConfig& c, const DecoderLayerWeights& w,
                      const float* in, int64_t n, int64_t h, float* x);

// The rotary table of a step's n rows (`positions` [3][n] or [1][n]; the
// sequences' row counts and rope lengths in order). With LongRoPE, each
// sequence's rows are scaled by long_mscale when its length -- its rope
// length, or else its last position + 1 -- exceeds
// original_max_position_embeddings, else by short_mscale.
RopeTable FamilyRope(const TextConfig& c, const int64_t* positions, int64_t n,
                     absl::Span<const int64_t> seq_rows, absl::Span<const int64_t> rope_lengths);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_BACKENDS_CPU_CPU_FAMILY_OPS_H_
