#include "engine/ops/cuda/gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/cublas_loader.h"
#include "engine/ops/cuda/cuda_status.h"

namespace vismoe::cuda {

absl::StatusOr<Blas> Blas::Create(StreamHandle stream, void* workspace, size_t workspace_bytes) {
  absl::StatusOr<const CublasApi*> loaded = LoadCublas();
  if (!loaded.ok()) return loaded.status();
  const CublasApi& api = **loaded;
  cublasHandle_t h = nullptr;
  VISMOE_CUBLAS_RETURN_IF_ERROR(api.create(&h));
  Blas blas(&api, h, stream);  // owns h from here on
  VISMOE_CUBLAS_RETURN_IF_ERROR(api.set_stream(h, stream));
  if (workspace != nullptr && workspace_bytes > 0) {
    VISMOE_CUBLAS_RETURN_IF_ERROR(api.set_workspace(h, workspace, workspace_bytes));
  }
  // Deterministic results for a given shape: no atomics-based reductions.
  VISMOE_CUBLAS_RETURN_IF_ERROR(api.set_atomics_mode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  return blas;
}

Blas::Blas(Blas&& o) noexcept
    : api_(o.api_),
      handle_(std::exchange(o.handle_, nullptr)),
      stream_(std::exchange(o.stream_, nullptr)) {}
Blas& Blas::operator=(Blas&& o) noexcept {
  if (this != &o) {
    if (handle_ != nullptr) api_->destroy(handle_);
    api_ = o.api_;
    handle_ = std::exchange(o.handle_, nullptr);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}
Blas::~Blas() {
  if (handle_ != nullptr) api_->destroy(handle_);
}

// cuBLAS is column-major. Row-major y [n, out] is column-major Y' = y^T
// [out, n]; x [n, in] is column-major x^T [in, n]. So y^T = W x^T with
//   kOutIn: W [out, in] row-major = column-major W^T [in, out], ld in -> op T;
//   kInOut: W_t [in, out] row-major = column-major W [out, in], ld out -> op N.
absl::Status Blas::Linear(const Bf16* x, int64_t n, int64_t in, const Bf16* w, WeightLayout layout,
                          int64_t out, void* y, GemmOut out_type, float beta, int64_t ldy) {
  if (n < 0 || in <= 0 || out <= 0 || n > 0x7fffffffLL || in > 0x7fffffffLL || out > 0x7fffffffLL ||
      (ldy != 0 && ldy < out)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::Blas::Linear: bad shape n=", n,
                                                   " in=", in, " out=", out, " ldy=", ldy));
  }
  if (n == 0) return absl::OkStatus();
  const float alpha = 1.0f;
  const bool out_in = layout == WeightLayout::kOutIn;
  VISMOE_CUBLAS_RETURN_IF_ERROR(
      api_->gemm_ex(handle_, out_in ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(out),
                   static_cast<int>(n), static_cast<int>(in), &alpha, w, CUDA_R_16BF,
                   static_cast<int>(out_in ? in : out), x, CUDA_R_16BF, static_cast<int>(in), &beta,
                   y, out_type == GemmOut::kF32 ? CUDA_R_32F : CUDA_R_16BF,
                   static_cast<int>(ldy ? ldy : out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status Blas::GroupedLinear(const Bf16* xp, int64_t in, absl::Span<const GemmGroup> groups,
                                 WeightLayout layout, int64_t out, Bf16* yp, int64_t ldy) {
  const int64_t ld = ldy ? ldy : out;
  for (const GemmGroup& g : groups) {
    if (g.rows == 0) continue;
    if (g.w == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cuda::Blas::GroupedLinear: group at row ",
                                                     g.row_begin, " has rows but no weight"));
    }
    absl::Status st = Linear(xp + g.row_begin * in, g.rows, in, g.w, layout, out,
                             yp + g.row_begin * ld, GemmOut::kBf16, 0.0f, ld);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Blas::MoeExperts(const Bf16* xp, absl::Span<const int32_t> host_offsets,
                              absl::Span<const DeviceExpert> experts, int64_t hidden, int64_t inter,
                              Bf16* gate_up_scratch, Bf16* act_scratch, Bf16* yp) {
  if (host_offsets.size() != experts.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::Blas::MoeExperts: ", host_offsets.size(),
                                                   " offsets for ", experts.size(), " experts"));
  }
  const int64_t total_rows = host_offsets.back();
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t begin = host_offsets[e];
    const int64_t rows = host_offsets[e + 1] - begin;
    if (rows == 0) continue;
    const DeviceExpert& w = experts[e];
    Bf16* gu = gate_up_scratch + begin * 2 * inter;
    const Bf16* x = xp + begin * hidden;
    if (w.layout == WeightLayout::kInOut) {
      if (w.gate_up == nullptr || w.down == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("cuda::Blas::MoeExperts: expert ", e, " has rows but no weights"));
      }
      absl::Status st =
          Linear(x, rows, hidden, w.gate_up, WeightLayout::kInOut, 2 * inter, gu, GemmOut::kBf16);
      if (!st.ok()) return st;
    } else {
      if (w.gate == nullptr || w.up == nullptr || w.down == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("cuda::Blas::MoeExperts: expert ", e, " has rows but no weights"));
      }
      // gate and up land interleaved by row in the [rows, 2I] scratch (ldy = 2I).
      absl::Status st = Linear(x, rows, hidden, w.gate, WeightLayout::kOutIn, inter, gu,
                               GemmOut::kBf16, 0.0f, 2 * inter);
      if (!st.ok()) return st;
      st = Linear(x, rows, hidden, w.up, WeightLayout::kOutIn, inter, gu + inter, GemmOut::kBf16,
                  0.0f, 2 * inter);
      if (!st.ok()) return st;
    }
  }
  // One activation launch over all rows of all experts.
  absl::Status st = SiluMulFused(gate_up_scratch, total_rows, inter, act_scratch, stream_);
  if (!st.ok()) return st;
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t begin = host_offsets[e];
    const int64_t rows = host_offsets[e + 1] - begin;
    if (rows == 0) continue;
    const DeviceExpert& w = experts[e];
    st = Linear(act_scratch + begin * inter, rows, inter, w.down, w.layout, hidden,
                yp + begin * hidden, GemmOut::kBf16);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
