// Dense and grouped (MoE) bf16 GEMMs through cuBLAS with fp32 accumulation.
// y = x W^T for weights stored [out, in] row-major (nn.Linear, kOutIn) or
// y = x W_t for weights stored [in, out] (the fused Qwen3-VL-MoE expert
// tensors, kInOut) -- the layouts of cpu::Linear and cpu::LinearTransposed.
#ifndef VISMOE_ENGINE_OPS_CUDA_GEMM_H_
#define VISMOE_ENGINE_OPS_CUDA_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"

struct cublasContext;  // cublasHandle_t is cublasContext*

namespace vismoe::cuda {
struct CublasApi;
}  // namespace vismoe::cuda

namespace vismoe::cuda {

enum class WeightLayout { kOutIn, kInOut };
enum class GemmOut { kBf16, kF32 };

// One expert of a grouped GEMM: its weight and its block of permuted rows.
struct GemmGroup {
  const Bf16* w = nullptr;
  int64_t row_begin = 0;
  int64_t rows = 0;
};

// One expert's device weights, in either ExpertWeights layout
// (engine/offload/expert_provider.h): kInOut = fused gate_up [H, 2I] and down
// [I, H]; kOutIn = separate gate [I, H], up [I, H], down [H, I].
struct DeviceExpert {
  WeightLayout layout = WeightLayout::kInOut;
  const Bf16* gate_up = nullptr;  // kInOut only
  const Bf16* gate = nullptr;     // kOutIn only
  const Bf16* up = nullptr;       // kOutIn only
  const Bf16* down = nullptr;
  // GPT-OSS: [2I] added to gate_up's output, [H] to down's; null without.
  const Bf16* gate_up_bias = nullptr;
  const Bf16* down_bias = nullptr;
};

// GPT-OSS's activation: gate / up interleaved in gate_up's output columns and
// the clamped SwiGLU (cuda::ClampedSwigluInterleaved). kInOut experts as
// stored; kOutIn ones with "gate" and "up" the first and second halves of the
// [2I, H] gate_up's rows (widened MXFP4), so the columns keep that order.
struct ClampedSwigluAct {
  float alpha = 1.702f;
  float limit = 7.0f;
};

// One expert's share of a MoE layer: its weights and its block of rows in
// the permuted buffers (xp, the gate_up/act scratch and yp).
struct MoeExpertRows {
  DeviceExpert w;
  int64_t row_begin = 0;
  int64_t rows = 0;
};

// Owns a cuBLAS handle bound to one stream and a caller-provided workspace
// (carved from the start-up arena, so cuBLAS does not allocate on the hot path),
// plus a small device table of GEMM operand pointers for the grouped calls.
// Grouped GEMMs go through cublasGemmGroupedBatchedEx: problems of equal
// shape form one group, so e.g. a decode step's 8 one-row experts are one
// group of 8 in one call.
// Thread safety: not thread-safe; one per stream. Move-only.
class Blas {
 public:
  static absl::StatusOr<Blas> Create(StreamHandle stream, void* workspace, size_t workspace_bytes);
  Blas(Blas&& other) noexcept;
  Blas& operator=(Blas&& other) noexcept;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas();

  StreamHandle stream() const { return stream_; }

  // y [n, out] (with row stride ldy >= out; 0 = out) = alpha * x [n, in] . W + beta * y.
  // beta = 1 accumulates (fused residual add). y is bf16 or fp32 per `out_type`.
  // Decode-sized kOutIn shapes (GemvSupports, gemv.h) run our GEMV instead.
  absl::Status Linear(const Bf16* x, int64_t n, int64_t in, const Bf16* w, WeightLayout layout,
                      int64_t out, void* y, GemmOut out_type, float beta = 0.0f, int64_t ldy = 0);

  // For each group g: yp[rows of g] = xp[rows of g] . W_g (layout as Linear),
  // bf16 out, one grouped cuBLAS call (per 256 non-empty groups) on this stream.
  absl::Status GroupedLinear(const Bf16* xp, int64_t in, absl::Span<const GemmGroup> groups,
                             WeightLayout layout, int64_t out, Bf16* yp, int64_t ldy = 0);

  // SwiGLU experts over a permuted buffer (see moe_permute.h):
  // yp[rows of e] = (silu(xp W_gate) * (xp W_up)) W_down for each expert e with
  // experts[e] set and rows in [host_offsets[e], host_offsets[e+1]).
  // Scratch: gate_up [total_rows, 2 * inter], act [total_rows, inter].
  // REQUIRES: host_offsets has experts.size() + 1 entries; every expert with
  // rows has weights.
  absl::Status MoeExperts(const Bf16* xp, absl::Span<const int32_t> host_offsets,
                          absl::Span<const DeviceExpert> experts, int64_t hidden, int64_t inter,
                          Bf16* gate_up_scratch, Bf16* act_scratch, Bf16* yp);

  // The same computation for any set of experts, whose row blocks need not be
  // contiguous or ordered (the ready subset of a layer, in the provider's
  // order): one grouped GEMM for gate_up (two for separate gate/up weights),
  // one SwiGLU launch per contiguous run of rows, one grouped GEMM for down.
  // Scratch rows are addressed by row_begin as in MoeExperts. With `clamped`
  // (GPT-OSS), the clamped SwiGLU on interleaved columns instead, and each
  // expert's biases added (one launch per expert and projection).
  // REQUIRES: row blocks do not overlap; every expert with rows has weights.
  absl::Status MoeExpertsGrouped(const Bf16* xp, absl::Span<const MoeExpertRows> experts,
                                 int64_t hidden, int64_t inter, Bf16* gate_up_scratch,
                                 Bf16* act_scratch, Bf16* yp,
                                 const ClampedSwigluAct* clamped = nullptr);

  // Problems per grouped cuBLAS call (the size of the pointer table).
  static constexpr int kMaxGroupedProblems = 256;
  // Runs the grouped calls as one GEMM per problem, as happens by itself
  // (with a warning) when cuBLAS reports the grouped bf16 GEMM unsupported.
  void DisableGroupedGemm() { grouped_ = false; }
  // Every Linear through cuBLAS, the GEMV shapes too (also VISMOE_CUDA_GEMV=0).
  void DisableGemv() { gemv_ = false; }

 private:
  struct Problem;  // one GEMM of a grouped call (gemm.cc)

  Blas(const CublasApi* api, cublasContext* handle, StreamHandle stream)
      : api_(api), handle_(handle), stream_(stream) {}
  // Runs every problem, bf16 in/out with fp32 accumulation; problems of equal
  // shape share a group.
  absl::Status Grouped(std::vector<Problem> problems);

  const CublasApi* api_ = nullptr;  // the dlopen'ed cuBLAS (cublas_loader.h)
  cublasContext* handle_ = nullptr;
  StreamHandle stream_ = nullptr;
  DeviceBuffer pointer_table_;  // 3 * kMaxGroupedProblems device pointers
  bool grouped_ = true;         // false: one gemm_ex per problem
  bool gemv_ = true;            // false: no GemvOutIn for small kOutIn shapes
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_GEMM_H_
