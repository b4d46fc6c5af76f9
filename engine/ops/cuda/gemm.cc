#include "engine/ops/cuda/gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/cublas_loader.h"
#include "engine/ops/cuda/gemv.h"
#include "engine/ops/cuda/pointer_table.h"
#include "spdlog/spdlog.h"

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
  absl::StatusOr<DeviceBuffer> table =
      DeviceBuffer::Allocate(3 * kMaxGroupedProblems * sizeof(void*));
  if (!table.ok()) return table.status();
  blas.pointer_table_ = *std::move(table);
  blas.grouped_ = api.gemm_grouped_batched_ex != nullptr;
  // VISMOE_CUDA_GEMV=0: every Linear through cuBLAS (A/B timing on a device).
  const char* gemv = std::getenv("VISMOE_CUDA_GEMV");
  blas.gemv_ = gemv == nullptr || std::string(gemv) != "0";
  return blas;
}

Blas::Blas(Blas&& o) noexcept
    : api_(o.api_),
      handle_(std::exchange(o.handle_, nullptr)),
      stream_(std::exchange(o.stream_, nullptr)),
      pointer_table_(std::move(o.pointer_table_)),
      grouped_(o.grouped_),
      gemv_(o.gemv_) {}
Blas& Blas::operator=(Blas&& o) noexcept {
  if (this != &o) {
    if (handle_ != nullptr) api_->destroy(handle_);
    api_ = o.api_;
    handle_ = std::exchange(o.handle_, nullptr);
    stream_ = std::exchange(o.stream_, nullptr);
    pointer_table_ = std::move(o.pointer_table_);
    grouped_ = o.grouped_;
    gemv_ = o.gemv_;
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
  if (gemv_ && layout == WeightLayout::kOutIn && GemvSupports(n, in, out, x, w)) {
    return GemvOutIn(x, n, in, w, out, y, out_type == GemmOut::kF32, beta, ldy ? ldy : out,
                     stream_);
  }
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

// One GEMM of a grouped call, in cuBLAS's column-major terms (see Linear):
// C [m, n] = op(A) [m, k] . B [k, n], all bf16.
struct Blas::Problem {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* c = nullptr;
  int ldc = 0;

  auto Shape() const { return std::make_tuple(trans_a, m, n, k, lda, ldb, ldc); }
};

namespace {

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace

absl::Status Blas::Grouped(std::vector<Problem> problems) {
  problems.erase(std::remove_if(problems.begin(), problems.end(),
                                [](const Problem& p) { return p.n == 0; }),
                 problems.end());
  // Equal shapes next to each other (stable: the order within a group, and so
  // which problem is which, stays the caller's).
  std::stable_sort(problems.begin(), problems.end(),
                   [](const Problem& x, const Problem& y) { return x.Shape() < y.Shape(); });
  void** table = pointer_table_.as<void*>();
  for (size_t begin = 0; begin < problems.size(); begin += kMaxGroupedProblems) {
    const size_t count =
        std::min<size_t>(kMaxGroupedProblems, problems.size() - begin);
    std::vector<const void*> ptrs(3 * count);
    std::vector<cublasOperation_t> trans_a, trans_b;
    std::vector<int> m, n, k, lda, ldb, ldc, group_size;
    std::vector<float> alpha, beta;
    for (size_t i = 0; i < count; ++i) {
      const Problem& p = problems[begin + i];
      ptrs[i] = p.a;
      ptrs[count + i] = p.b;
      ptrs[2 * count + i] = p.c;
      if (i > 0 && p.Shape() == problems[begin + i - 1].Shape()) {
        ++group_size.back();
        continue;
      }
      trans_a.push_back(p.trans_a);
      trans_b.push_back(CUBLAS_OP_N);
      m.push_back(p.m);
      n.push_back(p.n);
      k.push_back(p.k);
      lda.push_back(p.lda);
      ldb.push_back(p.ldb);
      ldc.push_back(p.ldc);
      alpha.push_back(1.0f);
      beta.push_back(0.0f);
      group_size.push_back(1);
    }
    if (grouped_) {
      // The table is rewritten by a kernel on this stream, so the previous
      // call's GEMMs have read it by then.
      VISMOE_RETURN_IF_ERROR(WritePointerTable(ptrs, table, stream_));
      const cublasStatus_t st = api_->gemm_grouped_batched_ex(
          handle_, trans_a.data(), trans_b.data(), m.data(), n.data(), k.data(), alpha.data(),
          table, CUDA_R_16BF, lda.data(), table + count, CUDA_R_16BF, ldb.data(), beta.data(),
          table + 2 * count, CUDA_R_16BF, ldc.data(), static_cast<int>(group_size.size()),
          group_size.data(), CUBLAS_COMPUTE_32F);
      if (st == CUBLAS_STATUS_SUCCESS) continue;
      // cuBLAS versions differ in how they refuse bf16 grouped GEMMs
      // (NOT_SUPPORTED, ARCH_MISMATCH, or INVALID_VALUE for the data type);
      // anything else is an error. A genuinely bad argument fails again below.
      if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_ARCH_MISMATCH &&
          st != CUBLAS_STATUS_INVALID_VALUE) {
        return CublasErrorToStatus(st, "cublasGemmGroupedBatchedEx", __FILE__, __LINE__);
      }
      // A cuBLAS or device without bf16 grouped GEMMs: same results, one
      // launch per problem from now on.
      spdlog::warn("cublasGemmGroupedBatchedEx: {} here; MoE experts run one GEMM each",
                   api_->status_name(st));
      grouped_ = false;
    }
    const float one = 1.0f, zero = 0.0f;
    for (size_t i = 0; i < count; ++i) {
      const Problem& p = problems[begin + i];
      VISMOE_CUBLAS_RETURN_IF_ERROR(api_->gemm_ex(
          handle_, p.trans_a, CUBLAS_OP_N, p.m, p.n, p.k, &one, p.a, CUDA_R_16BF, p.lda, p.b,
          CUDA_R_16BF, p.ldb, &zero, p.c, CUDA_R_16BF, p.ldc, CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT));
    }
  }
  return absl::OkStatus();
}

absl::Status Blas::GroupedLinear(const Bf16* xp, int64_t in, absl::Span<const GemmGroup> groups,
                                 WeightLayout layout, int64_t out, Bf16* yp, int64_t ldy) {
  const int64_t ld = ldy ? ldy : out;
  if (!FitsInt(in) || in == 0 || !FitsInt(out) || out == 0 || ld < out || !FitsInt(ld)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::Blas::GroupedLinear: bad shape in=", in,
                                                   " out=", out, " ldy=", ldy));
  }
  const bool out_in = layout == WeightLayout::kOutIn;
  std::vector<Problem> problems;
  for (const GemmGroup& g : groups) {
    if (g.rows == 0) continue;
    if (g.w == nullptr || !FitsInt(g.rows) || g.row_begin < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cuda::Blas::GroupedLinear: group at row ",
                                                     g.row_begin, " with ", g.rows,
                                                     " rows has no weight or a bad size"));
    }
    problems.push_back({out_in ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(out),
                        static_cast<int>(g.rows), static_cast<int>(in), g.w,
                        static_cast<int>(out_in ? in : out), xp + g.row_begin * in,
                        static_cast<int>(in), yp + g.row_begin * ld, static_cast<int>(ld)});
  }
  return Grouped(std::move(problems));
}

absl::Status Blas::MoeExperts(const Bf16* xp, absl::Span<const int32_t> host_offsets,
                              absl::Span<const DeviceExpert> experts, int64_t hidden, int64_t inter,
                              Bf16* gate_up_scratch, Bf16* act_scratch, Bf16* yp) {
  if (host_offsets.size() != experts.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::Blas::MoeExperts: ", host_offsets.size(),
                                                   " offsets for ", experts.size(), " experts"));
  }
  std::vector<MoeExpertRows> rows(experts.size());
  for (size_t e = 0; e < experts.size(); ++e) {
    rows[e] = {experts[e], host_offsets[e], host_offsets[e + 1] - host_offsets[e]};
  }
  return MoeExpertsGrouped(xp, rows, hidden, inter, gate_up_scratch, act_scratch, yp);
}

absl::Status Blas::MoeExpertsGrouped(const Bf16* xp, absl::Span<const MoeExpertRows> experts,
                                     int64_t hidden, int64_t inter, Bf16* gate_up_scratch,
                                     Bf16* act_scratch, Bf16* yp, const ClampedSwigluAct* clamped) {
  if (!FitsInt(hidden) || hidden == 0 || !FitsInt(2 * inter) || inter == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda::Blas::MoeExpertsGrouped: bad shape hidden=", hidden, " inter=", inter));
  }
  const int h = static_cast<int>(hidden), i2 = static_cast<int>(2 * inter),
            in = static_cast<int>(inter);
  std::vector<Problem> gate_up, down;
  std::vector<const MoeExpertRows*> live;
  for (size_t e = 0; e < experts.size(); ++e) {
    const MoeExpertRows& x = experts[e];
    if (x.rows == 0) continue;
    const DeviceExpert& w = x.w;
    const bool fused = w.layout == WeightLayout::kInOut;
    if (x.rows < 0 || !FitsInt(x.rows) || x.row_begin < 0 || w.down == nullptr ||
        (fused ? w.gate_up == nullptr : (w.gate == nullptr || w.up == nullptr))) {
      return absl::InvalidArgumentError(absl::StrCat("cuda::Blas::MoeExpertsGrouped: expert ", e,
                                                     " has ", x.rows, " rows at ", x.row_begin,
                                                     " but no weights or a bad size"));
    }
    live.push_back(&x);
    const int rows = static_cast<int>(x.rows);
    const Bf16* xr = xp + x.row_begin * hidden;
    Bf16* gu = gate_up_scratch + x.row_begin * 2 * inter;
    if (fused) {
      // gate_up [H, 2I] row-major = column-major [2I, H]: op N, ld 2I.
      gate_up.push_back({CUBLAS_OP_N, i2, rows, h, w.gate_up, i2, xr, h, gu, i2});
    } else {
      // gate and up [I, H]: op T, ld H; they land side by side in each row (ldc 2I).
      gate_up.push_back({CUBLAS_OP_T, in, rows, h, w.gate, h, xr, h, gu, i2});
      gate_up.push_back({CUBLAS_OP_T, in, rows, h, w.up, h, xr, h, gu + inter, i2});
    }
    // down: fused [I, H] -> op N, ld H; separate [H, I] -> op T, ld I.
    down.push_back({fused ? CUBLAS_OP_N : CUBLAS_OP_T, h, rows, in, w.down, fused ? h : in,
                    act_scratch + x.row_begin * inter, in, yp + x.row_begin * hidden, h});
  }
  if (live.empty()) return absl::OkStatus();
  // Contiguous runs of rows, checked before anything is launched.
  std::sort(live.begin(), live.end(), [](const MoeExpertRows* a, const MoeExpertRows* b) {
    return a->row_begin < b->row_begin;
  });
  std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, end)
  for (const MoeExpertRows* x : live) {
    if (!runs.empty() && x->row_begin < runs.back().second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda::Blas::MoeExpertsGrouped: row blocks overlap at row ", x->row_begin));
    }
    if (!runs.empty() && x->row_begin == runs.back().second) {
      runs.back().second += x->rows;
    } else {
      runs.push_back({x->row_begin, x->row_begin + x->rows});
    }
  }
  VISMOE_RETURN_IF_ERROR(Grouped(std::move(gate_up)));
  for (const MoeExpertRows* x : live) {
    if (x->w.gate_up_bias == nullptr) continue;
    VISMOE_RETURN_IF_ERROR(AddBias(gate_up_scratch + x->row_begin * 2 * inter, x->rows, 2 * inter,
                                   x->w.gate_up_bias, stream_));
  }
  // The activation once per run (once in all when every expert of the layer is here).
  for (const auto& [begin, end] : runs) {
    const Bf16* gu = gate_up_scratch + begin * 2 * inter;
    Bf16* act = act_scratch + begin * inter;
    VISMOE_RETURN_IF_ERROR(clamped != nullptr
                               ? ClampedSwigluInterleaved(gu, end - begin, inter, clamped->alpha,
                                                          clamped->limit, act, stream_)
                               : SiluMulFused(gu, end - begin, inter, act, stream_));
  }
  VISMOE_RETURN_IF_ERROR(Grouped(std::move(down)));
  for (const MoeExpertRows* x : live) {
    if (x->w.down_bias == nullptr) continue;
    VISMOE_RETURN_IF_ERROR(
        AddBias(yp + x->row_begin * hidden, x->rows, hidden, x->w.down_bias, stream_));
  }
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
