// cuBLAS GEMMs and the grouped MoE path against the CPU reference
// (cpu::Linear, cpu::LinearTransposed, cpu::ExpertForward) on bf16 inputs.
// Tolerances: bf16 outputs |d| <= 1e-2 * (rms(ref) + |ref|): one bf16
// rounding of the output (2^-9 relative) plus fp32 reductions in another
// order; the rms term covers outputs near zero after cancellation, whose
// absolute error scales with the size of the summed terms, not the result.
// fp32 outputs: 1e-4 of the same scale (only summation order differs). The
// MoE path also rounds gate_up and the SwiGLU activation to bf16 on the way
// (three roundings in all), hence 3e-2.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(CudaGemmGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/ops/cpu/linear.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cuda/gemm.h"
#include "engine/ops/cuda/gemv.h"
#include "engine/ops/cuda/moe_permute.h"
#include "engine/ops/cuda/pointer_table.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using testing::Bf16View;
using testing::Download;
using testing::ExpectClose;
using testing::RandomBf16;
using testing::Rms;
using testing::ToF32;
using testing::Upload;

std::vector<float> DownloadBf16(const DeviceBuffer& buf, size_t n) {
  absl::StatusOr<std::vector<uint16_t> > v = Download<uint16_t>(buf, n);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? ToF32(*v) : std::vector<float>(n, NAN);
}

class CudaGemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VISMOE_SKIP_WITHOUT_GPU();
    auto ws = DeviceBuffer::Allocate(kWorkspace);
    ASSERT_TRUE(ws.ok()) << ws.status();
    workspace_ = *std::move(ws);
    auto blas = Blas::Create(nullptr, workspace_.data(), kWorkspace);
    ASSERT_TRUE(blas.ok()) << blas.status();
    blas_ = std::make_unique<Blas>(*std::move(blas));
  }
  static constexpr size_t kWorkspace = 32 << 20;
  DeviceBuffer workspace_;
  std::unique_ptr<Blas> blas_;
};

TEST_F(CudaGemmGpuTest, LinearOutInBf16AndF32MatchCpu) {
  constexpr int64_t kN = 13, kIn = 2048, kOut = 384;
  const auto x = RandomBf16(kN * kIn, 30, 1.0f);
  const auto w = RandomBf16(kOut * kIn, 31, 0.05f);
  const std::vector<float> xf = ToF32(x);
  std::vector<float> ref(kN * kOut);
  const TensorView wv = Bf16View(w, {kOut, kIn});
  cpu::Linear(nullptr, xf.data(), kN, kIn, wv, nullptr, ref.data());
  const float scale = Rms(ref);

  auto dx = Upload(x);
  auto dw = Upload(w);
  auto dy = DeviceBuffer::Allocate(kN * kOut * 2);
  auto dyf = DeviceBuffer::Allocate(kN * kOut * 4);
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok() && dyf.ok());
  ASSERT_OK(blas_->Linear(dx->as<Bf16>(), kN, kIn, dw->as<Bf16>(), WeightLayout::kOutIn, kOut,
                          dy->data(), GemmOut::kBf16));
  ExpectClose(DownloadBf16(*dy, kN * kOut), ref, 1e-2f * scale, 1e-2f, "linear bf16");
  ASSERT_OK(blas_->Linear(dx->as<Bf16>(), kN, kIn, dw->as<Bf16>(), WeightLayout::kOutIn, kOut,
                          dyf->data(), GemmOut::kF32));
  auto yf = Download<float>(*dyf, kN * kOut);
  ASSERT_TRUE(yf.ok());
  ExpectClose(*yf, ref, 1e-4f * scale, 1e-4f, "linear f32");

  // beta = 1 accumulates: y = 2 * x W^T.
  ASSERT_OK(blas_->Linear(dx->as<Bf16>(), kN, kIn, dw->as<Bf16>(), WeightLayout::kOutIn, kOut,
                          dyf->data(), GemmOut::kF32, 1.0f));
  yf = Download<float>(*dyf, kN * kOut);
  ASSERT_TRUE(yf.ok());
  std::vector<float> twice = ref;
  for (float& v : twice) v *= 2.0f;
  ExpectClose(*yf, twice, 2e-4f * scale, 1e-4f, "linear f32 accumulate");
}

// Decode-sized kOutIn shapes run GemvOutIn (gemv.h): each row count of its
// kernels, outputs split over 1, 4 and 8 warps with a partly empty last
// block, a strided output with beta = 1 (the fused residual add), and cuBLAS
// for the same calls within the same tolerance.
void CheckGemv(Blas& blas, Blas& cublas_only, int64_t in, int64_t out) {
  SCOPED_TRACE(::testing::Message() << "in=" << in << " out=" << out);
  const int64_t ldy = out + 29;
  const auto w = RandomBf16(out * in, 51, 0.05f);
  auto dw = Upload(w);
  ASSERT_TRUE(dw.ok());
  for (int64_t n : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const auto x = RandomBf16(n * in, 50 + static_cast<uint32_t>(n), 1.0f);
    const std::vector<float> xf = ToF32(x);
    std::vector<float> ref(n * out);
    cpu::Linear(nullptr, xf.data(), n, in, Bf16View(w, {out, in}), nullptr, ref.data());
    const float scale = Rms(ref);
    auto dx = Upload(x);
    auto dy = DeviceBuffer::Allocate(n * out * 2);
    auto dyf = DeviceBuffer::Allocate(n * ldy * 4);
    ASSERT_TRUE(dx.ok() && dy.ok() && dyf.ok());
    for (Blas* b : {&blas, &cublas_only}) {
      ASSERT_OK(b->Linear(dx->as<Bf16>(), n, in, dw->as<Bf16>(), WeightLayout::kOutIn, out,
                          dy->data(), GemmOut::kBf16));
      ExpectClose(DownloadBf16(*dy, n * out), ref, 1e-2f * scale, 1e-2f, "gemv bf16");
      // fp32 into rows of stride ldy, twice with beta = 1: y = 2 x W^T.
      ASSERT_OK(b->Linear(dx->as<Bf16>(), n, in, dw->as<Bf16>(), WeightLayout::kOutIn, out,
                          dyf->data(), GemmOut::kF32, 0.0f, ldy));
      ASSERT_OK(b->Linear(dx->as<Bf16>(), n, in, dw->as<Bf16>(), WeightLayout::kOutIn, out,
                          dyf->data(), GemmOut::kF32, 1.0f, ldy));
      auto yf = Download<float>(*dyf, n * ldy);
      ASSERT_TRUE(yf.ok());
      std::vector<float> got(n * out), twice(n * out);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          got[r * out + o] = (*yf)[r * ldy + o];
          twice[r * out + o] = 2.0f * ref[r * out + o];
        }
      }
      ExpectClose(got, twice, 2e-4f * scale, 1e-4f, "gemv f32 accumulate, strided");
    }
  }
}

TEST_F(CudaGemmGpuTest, GemvRowsMatchCpuAndCublas) {
  ASSERT_TRUE(
      GemvSupports(1, 2048, 131, reinterpret_cast<void*>(256), reinterpret_cast<void*>(512)));
  EXPECT_FALSE(GemvSupports(9, 2048, 131, nullptr, nullptr));
  EXPECT_FALSE(GemvSupports(1, 2044, 131, nullptr, nullptr));
  EXPECT_FALSE(GemvSupports(1, 2048, 131, reinterpret_cast<void*>(258), nullptr));
  auto ws = DeviceBuffer::Allocate(kWorkspace);
  ASSERT_TRUE(ws.ok());
  auto cublas_only = Blas::Create(nullptr, ws->data(), kWorkspace);
  ASSERT_TRUE(cublas_only.ok());
  cublas_only->DisableGemv();
  CheckGemv(*blas_, *cublas_only, 2048, 131);  // 4 warps per output, a half-empty last block
  CheckGemv(*blas_, *cublas_only, 4096, 40);   // 8 warps per output
  CheckGemv(*blas_, *cublas_only, 512, 8200);  // one warp per output
}

TEST_F(CudaGemmGpuTest, LinearInOutMatchesCpuTransposed) {
  constexpr int64_t kN = 9, kIn = 512, kOut = 1536;  // gate_up [H, 2I] shaped
  const auto x = RandomBf16(kN * kIn, 32, 1.0f);
  const auto wt = RandomBf16(kIn * kOut, 33, 0.08f);
  const std::vector<float> xf = ToF32(x);
  std::vector<float> ref(kN * kOut);
  cpu::LinearTransposed(nullptr, xf.data(), kN, kIn, Bf16View(wt, {kIn, kOut}), ref.data());
  auto dx = Upload(x);
  auto dw = Upload(wt);
  auto dy = DeviceBuffer::Allocate(kN * kOut * 2);
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
  ASSERT_OK(blas_->Linear(dx->as<Bf16>(), kN, kIn, dw->as<Bf16>(), WeightLayout::kInOut, kOut,
                          dy->data(), GemmOut::kBf16));
  ExpectClose(DownloadBf16(*dy, kN * kOut), ref, 1e-2f * Rms(ref), 1e-2f, "linear_t bf16");
}

TEST_F(CudaGemmGpuTest, RejectsBadShapes) {
  EXPECT_EQ(blas_->Linear(nullptr, 1, 0, nullptr, WeightLayout::kOutIn, 4, nullptr, GemmOut::kBf16)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(blas_
                ->Linear(nullptr, 1, 4, nullptr, WeightLayout::kOutIn, 8, nullptr, GemmOut::kBf16,
                         0.0f, 4)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Routes n tokens on the CPU, then runs permutation -> grouped experts ->
// weighted un-permutation on the GPU and compares with the per-token CPU sum
// of cpu::ExpertForward outputs. `batches` > 1 runs the experts as that many
// MoeExpertsGrouped calls over scattered subsets in a scrambled order (the
// ready-subset launches of the CUDA decoder). `clamped`: GPT-OSS's experts
// (fused layout): biases and the clamped SwiGLU on interleaved columns, with
// a limit of 1 so that the clamp bites.
void RunMoe(Blas& blas, bool fused_layout, int batches, bool clamped = false) {
  constexpr int64_t kN = 19, kH = 256, kI = 128;
  constexpr int kE = 16, kK = 4;
  const auto x = RandomBf16(kN * kH, 40, 1.0f);
  const auto router_w = RandomBf16(kE * kH, 41, 0.2f);
  const std::vector<float> xf = ToF32(x);
  RouterResult route;
  cpu::Route(nullptr, xf.data(), kN, kH, Bf16View(router_w, {kE, kH}), kK, true, &route);

  // Per-expert weights in the requested layout.
  std::vector<std::vector<uint16_t> > w1(kE), w2(kE), w3(kE);
  std::vector<ExpertWeights> cpu_w(kE);
  for (int e = 0; e < kE; ++e) {
    ExpertWeights& cw = cpu_w[e];
    if (fused_layout) {
      w1[e] = RandomBf16(kH * 2 * kI, 100 + e, 0.1f);  // gate_up [H, 2I]
      w2[e] = RandomBf16(kI * kH, 200 + e, 0.1f);      // down [I, H]
      cw.layout = ExpertWeights::Layout::kFusedTransposed;
      cw.gate_up = Bf16View(w1[e], {kH, 2 * kI});
      cw.down = Bf16View(w2[e], {kI, kH});
    } else {
      w1[e] = RandomBf16(kI * kH, 100 + e, 0.1f);  // gate [I, H]
      w3[e] = RandomBf16(kI * kH, 300 + e, 0.1f);  // up [I, H]
      w2[e] = RandomBf16(kH * kI, 200 + e, 0.1f);  // down [H, I]
      cw.layout = ExpertWeights::Layout::kSeparate;
      cw.gate = Bf16View(w1[e], {kI, kH});
      cw.up = Bf16View(w3[e], {kI, kH});
      cw.down = Bf16View(w2[e], {kH, kI});
    }
  }
  const ClampedSwigluAct act{1.702f, 1.0f};
  std::vector<std::vector<uint16_t> > gate_up_bias(kE), down_bias(kE);
  std::vector<cpu::ClampedSwigluExpert> oss(kE);
  for (int e = 0; clamped && e < kE; ++e) {
    gate_up_bias[e] = RandomBf16(2 * kI, 400 + e, 0.5f);
    down_bias[e] = RandomBf16(kH, 500 + e, 0.5f);
    oss[e] = {Bf16View(gate_up_bias[e], {2 * kI}), Bf16View(down_bias[e], {kH}), act.alpha,
              act.limit};
  }
  std::vector<float> ref(kN * kH, 0.0f), one(kH);
  for (int64_t t = 0; t < kN; ++t) {
    for (int s = 0; s < kK; ++s) {
      const int e = route.experts[t * kK + s];
      cpu::ExpertForward(nullptr, cpu_w[e], xf.data() + t * kH, 1, kH, kI, one.data(),
                         clamped ? &oss[e] : nullptr);
      for (int c = 0; c < kH; ++c) ref[t * kH + c] += route.weights[t * kK + s] * one[c];
    }
  }

  // Device side.
  std::vector<int32_t> experts(route.experts.begin(), route.experts.end());
  auto dx = Upload(x);
  auto dexp = Upload(experts);
  auto dwts = Upload(route.weights);
  auto dcounts = DeviceBuffer::Allocate(kE * 4);
  auto doff = DeviceBuffer::Allocate((kE + 1) * 4);
  auto drow_token = DeviceBuffer::Allocate(kN * kK * 4);
  auto dslot_row = DeviceBuffer::Allocate(kN * kK * 4);
  auto dxp = DeviceBuffer::Allocate(kN * kK * kH * 2);
  auto dgu = DeviceBuffer::Allocate(kN * kK * 2 * kI * 2);
  auto dact = DeviceBuffer::Allocate(kN * kK * kI * 2);
  auto dyp = DeviceBuffer::Allocate(kN * kK * kH * 2);
  auto dy = DeviceBuffer::Allocate(kN * kH * 2);
  ASSERT_TRUE(dx.ok() && dexp.ok() && dwts.ok() && dcounts.ok() && doff.ok() && drow_token.ok() &&
              dslot_row.ok() && dxp.ok() && dgu.ok() && dact.ok() && dyp.ok() && dy.ok());
  std::vector<DeviceBuffer> dw;
  std::vector<DeviceExpert> dev_experts(kE);
  for (int e = 0; e < kE; ++e) {
    auto a = Upload(w1[e]);
    auto b = Upload(w2[e]);
    ASSERT_TRUE(a.ok() && b.ok());
    DeviceExpert& de = dev_experts[e];
    de.layout = fused_layout ? WeightLayout::kInOut : WeightLayout::kOutIn;
    if (fused_layout) {
      de.gate_up = a->as<Bf16>();
    } else {
      auto c = Upload(w3[e]);
      ASSERT_TRUE(c.ok());
      de.gate = a->as<Bf16>();
      de.up = c->as<Bf16>();
      dw.push_back(*std::move(c));
    }
    de.down = b->as<Bf16>();
    dw.push_back(*std::move(a));
    dw.push_back(*std::move(b));
    if (clamped) {
      auto gb = Upload(gate_up_bias[e]);
      auto db = Upload(down_bias[e]);
      ASSERT_TRUE(gb.ok() && db.ok());
      de.gate_up_bias = gb->as<Bf16>();
      de.down_bias = db->as<Bf16>();
      dw.push_back(*std::move(gb));
      dw.push_back(*std::move(db));
    }
  }

  ASSERT_OK(BuildMoePermutation(dexp->as<int32_t>(), kN, kK, kE, dcounts->as<int32_t>(),
                                doff->as<int32_t>(), drow_token->as<int32_t>(),
                                dslot_row->as<int32_t>(), nullptr));
  auto offsets = Download<int32_t>(*doff, kE + 1);
  auto row_token = Download<int32_t>(*drow_token, kN * kK);
  auto slot_row = Download<int32_t>(*dslot_row, kN * kK);
  ASSERT_TRUE(offsets.ok() && row_token.ok() && slot_row.ok());
  // Offsets are the prefix sums of the per-expert counts; each slot's row
  // lies in its expert's block and points back at its token; rows within an
  // expert are in ascending token order.
  std::vector<int32_t> counts(kE, 0);
  for (int32_t e : experts) ++counts[e];
  ASSERT_EQ((*offsets)[0], 0);
  for (int e = 0; e < kE; ++e) ASSERT_EQ((*offsets)[e + 1] - (*offsets)[e], counts[e]) << e;
  for (int64_t i = 0; i < kN * kK; ++i) {
    const int32_t row = (*slot_row)[i];
    const int e = experts[i];
    ASSERT_GE(row, (*offsets)[e]);
    ASSERT_LT(row, (*offsets)[e + 1]);
    ASSERT_EQ((*row_token)[row], i / kK);
    if (row > (*offsets)[e]) {
      ASSERT_LT((*row_token)[row - 1], (*row_token)[row]);
    }
  }

  ASSERT_OK(PermuteRows(dx->as<Bf16>(), kH, drow_token->as<int32_t>(), kN * kK, dxp->as<Bf16>(),
                        nullptr));
  if (batches == 1 && !clamped) {
    ASSERT_OK(blas.MoeExperts(dxp->as<Bf16>(), *offsets, dev_experts, kH, kI, dgu->as<Bf16>(),
                              dact->as<Bf16>(), dyp->as<Bf16>()));
  } else {
    for (int b = 0; b < batches; ++b) {
      std::vector<MoeExpertRows> subset;
      for (int e = kE - 1; e >= 0; --e) {  // descending: row blocks out of order
        if (e % batches != b) continue;
        subset.push_back({dev_experts[e], (*offsets)[e], (*offsets)[e + 1] - (*offsets)[e]});
      }
      ASSERT_OK(blas.MoeExpertsGrouped(dxp->as<Bf16>(), subset, kH, kI, dgu->as<Bf16>(),
                                       dact->as<Bf16>(), dyp->as<Bf16>(),
                                       clamped ? &act : nullptr));
    }
  }
  ASSERT_OK(UnpermuteCombine(dyp->as<Bf16>(), dslot_row->as<int32_t>(), dwts->as<float>(), kN, kK,
                             kH, false, dy->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dy, kN * kH), ref, 3e-2f * Rms(ref), 3e-2f, "moe experts");

  // accumulate = true adds onto the residual stream: y = 2 * moe.
  ASSERT_OK(UnpermuteCombine(dyp->as<Bf16>(), dslot_row->as<int32_t>(), dwts->as<float>(), kN, kK,
                             kH, true, dy->as<Bf16>(), nullptr));
  std::vector<float> twice = ref;
  for (float& v : twice) v *= 2.0f;
  ExpectClose(DownloadBf16(*dy, kN * kH), twice, 6e-2f * Rms(ref), 3e-2f, "moe accumulate");
}

TEST_F(CudaGemmGpuTest, GroupedMoeFusedLayoutMatchesCpu) { RunMoe(*blas_, true, 1); }
TEST_F(CudaGemmGpuTest, GroupedMoeSeparateLayoutMatchesCpu) { RunMoe(*blas_, false, 1); }
TEST_F(CudaGemmGpuTest, ScatteredSubsetsFusedLayoutMatchCpu) { RunMoe(*blas_, true, 3); }
TEST_F(CudaGemmGpuTest, ScatteredSubsetsSeparateLayoutMatchCpu) { RunMoe(*blas_, false, 3); }
TEST_F(CudaGemmGpuTest, ClampedSwigluExpertsWithBiasesMatchCpu) {
  RunMoe(*blas_, true, 1, /*clamped=*/true);
  RunMoe(*blas_, true, 3, /*clamped=*/true);
}
// The per-problem fallback (cuBLAS without bf16 grouped GEMMs).
TEST_F(CudaGemmGpuTest, UngroupedFallbackMatchesCpu) {
  blas_->DisableGroupedGemm();
  RunMoe(*blas_, true, 3);
  RunMoe(*blas_, false, 1);
}

// More problems than one grouped call takes (300 experts, separate gate/up:
// ~400 gate/up GEMMs), row counts 0, 1 and 2 (two shape groups, empty
// experts skipped): every expert's rows must match cpu::ExpertForward.
TEST_F(CudaGemmGpuTest, GroupedMoeSplitsPastThePointerTable) {
  constexpr int kE = 300;
  constexpr int64_t kH = 64, kI = 32;
  std::vector<int64_t> begin(kE + 1, 0);
  for (int e = 0; e < kE; ++e) begin[e + 1] = begin[e] + e % 3;
  const int64_t rows = begin[kE];
  const auto x = RandomBf16(rows * kH, 7, 1.0f);
  const std::vector<float> xf = ToF32(x);
  std::vector<float> ref(rows * kH, 0.0f);
  std::vector<DeviceBuffer> dw;
  std::vector<MoeExpertRows> experts(kE);
  for (int e = 0; e < kE; ++e) {
    const auto gate = RandomBf16(kI * kH, 1000 + e, 0.1f);
    const auto up = RandomBf16(kI * kH, 2000 + e, 0.1f);
    const auto down = RandomBf16(kH * kI, 3000 + e, 0.1f);
    ExpertWeights cw;
    cw.layout = ExpertWeights::Layout::kSeparate;
    cw.gate = Bf16View(gate, {kI, kH});
    cw.up = Bf16View(up, {kI, kH});
    cw.down = Bf16View(down, {kH, kI});
    const int64_t n = begin[e + 1] - begin[e];
    if (n > 0) {
      cpu::ExpertForward(nullptr, cw, xf.data() + begin[e] * kH, n, kH, kI,
                         ref.data() + begin[e] * kH);
    }
    auto g = Upload(gate);
    auto u = Upload(up);
    auto d = Upload(down);
    ASSERT_TRUE(g.ok() && u.ok() && d.ok());
    MoeExpertRows& r = experts[e];
    r.w.layout = WeightLayout::kOutIn;
    r.w.gate = g->as<Bf16>();
    r.w.up = u->as<Bf16>();
    r.w.down = d->as<Bf16>();
    r.row_begin = begin[e];
    r.rows = n;
    dw.push_back(*std::move(g));
    dw.push_back(*std::move(u));
    dw.push_back(*std::move(d));
  }
  auto dx = Upload(x);
  auto dgu = DeviceBuffer::Allocate(rows * 2 * kI * 2);
  auto dact = DeviceBuffer::Allocate(rows * kI * 2);
  auto dyp = DeviceBuffer::Allocate(rows * kH * 2);
  ASSERT_TRUE(dx.ok() && dgu.ok() && dact.ok() && dyp.ok());
  ASSERT_OK(blas_->MoeExpertsGrouped(dx->as<Bf16>(), experts, kH, kI, dgu->as<Bf16>(),
                                     dact->as<Bf16>(), dyp->as<Bf16>()));
  ExpectClose(DownloadBf16(*dyp, rows * kH), ref, 3e-2f * Rms(ref), 3e-2f, "300 experts");
}

TEST_F(CudaGemmGpuTest, GroupedMoeRejectsOverlapsAndMissingWeights) {
  DeviceExpert w;
  w.layout = WeightLayout::kInOut;
  w.gate_up = reinterpret_cast<const Bf16*>(workspace_.data());
  w.down = w.gate_up;
  const std::vector<MoeExpertRows> overlap = {{w, 0, 4}, {w, 2, 4}};
  EXPECT_EQ(blas_->MoeExpertsGrouped(nullptr, overlap, 8, 8, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  DeviceExpert none;
  const std::vector<MoeExpertRows> missing = {{none, 0, 1}};
  EXPECT_EQ(blas_->MoeExpertsGrouped(nullptr, missing, 8, 8, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// The pointer table of the grouped calls, past one kernel's worth of pointers.
TEST(PointerTableGpuTest, WritesEveryPointerInOrder) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr size_t kCount = 1000;
  std::vector<const void*> ptrs(kCount);
  for (size_t i = 0; i < kCount; ++i) ptrs[i] = reinterpret_cast<const void*>(0x1000 + 8 * i);
  auto dst = DeviceBuffer::Allocate(kCount * sizeof(void*));
  ASSERT_TRUE(dst.ok()) << dst.status();
  ASSERT_OK(WritePointerTable(ptrs, dst->as<void*>(), nullptr));
  auto back = Download<uint64_t>(*dst, kCount);
  ASSERT_TRUE(back.ok()) << back.status();
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ((*back)[i], 0x1000 + 8 * i) << i;
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
