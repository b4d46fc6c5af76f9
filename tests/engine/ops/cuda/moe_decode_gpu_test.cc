// The decode-step MoE kernels of engine/ops/cuda/moe_decode.h that
// backend_ops_test does not isolate, and the greedy argmax
// (engine/ops/cuda/greedy_argmax.h), against host models:
// - MoeDecodeRoute: the top-k of well-separated logits, and the permutation
//   (offsets, active experts, row_token, slot_row) equal to a stable sort of
//   the device's own (token, slot) assignments by expert, for expert counts
//   that give the block scan one and several experts per thread;
// - MoeDecodeCombine: the slots' weighted sum rounded once to bf16 and the
//   residual add, bit-exact on grid values (every product and sum exact);
// - GreedyArgmaxRows: engine/core/argmax.h's GreedyArgmax over rows split into
//   slices, with equal maxima in different slices, and -1 for rows holding a
//   NaN or an infinity.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(MoeDecodeGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/core/argmax.h"
#include "engine/core/dtype.h"
#include "engine/ops/cuda/greedy_argmax.h"
#include "engine/ops/cuda/moe_decode.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using testing::Download;
using testing::Upload;

// Device buffers of one step's routing.
struct RoutingBuffers {
  DeviceBuffer experts, weights, offsets, row_token, slot_row, active, active_count;
  MoeDecodeRouting view;
};

RoutingBuffers AllocateRouting(int64_t n, int top_k, int num_experts) {
  RoutingBuffers b;
  auto alloc = [](size_t bytes) {
    auto buf = DeviceBuffer::Allocate(bytes);
    EXPECT_TRUE(buf.ok()) << buf.status();
    return buf.ok() ? *std::move(buf) : DeviceBuffer();
  };
  const size_t nk = static_cast<size_t>(n * top_k);
  b.experts = alloc(nk * 4);
  b.weights = alloc(nk * 4);
  b.offsets = alloc((num_experts + 1) * 4);
  b.row_token = alloc(nk * 4);
  b.slot_row = alloc(nk * 4);
  b.active = alloc(num_experts * 4);
  b.active_count = alloc(4);
  b.view = {b.experts.as<int32_t>(),     b.weights.as<float>(),    b.offsets.as<int32_t>(),
            b.row_token.as<int32_t>(),   b.slot_row.as<int32_t>(), b.active.as<int32_t>(),
            b.active_count.as<int32_t>()};
  return b;
}

// Logits whose probabilities are far apart: a random permutation of
// 0, 0.25, 0.5, ... per token, so the top-k is the same on any device.
std::vector<float> SeparatedLogits(int64_t n, int num_experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(n * num_experts);
  std::vector<int> rank(num_experts);
  for (int64_t t = 0; t < n; ++t) {
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    for (int e = 0; e < num_experts; ++e) out[t * num_experts + e] = 0.25f * rank[e] - 10.0f;
  }
  return out;
}

void CheckRoute(int64_t n, int num_experts, int top_k, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " E=" << num_experts << " k=" << top_k);
  const std::vector<float> logits = SeparatedLogits(n, num_experts, seed);
  auto dl = Upload(logits);
  ASSERT_TRUE(dl.ok());
  RoutingBuffers b = AllocateRouting(n, top_k, num_experts);
  ASSERT_OK(MoeDecodeRoute(dl->as<float>(), n, num_experts, top_k, true, b.view, nullptr, nullptr));
  const size_t nk = static_cast<size_t>(n * top_k);
  auto experts = Download<int32_t>(b.experts, nk);
  auto weights = Download<float>(b.weights, nk);
  auto offsets = Download<int32_t>(b.offsets, num_experts + 1);
  auto row_token = Download<int32_t>(b.row_token, nk);
  auto slot_row = Download<int32_t>(b.slot_row, nk);
  auto active = Download<int32_t>(b.active, num_experts);
  auto active_count = Download<int32_t>(b.active_count, 1);
  ASSERT_TRUE(experts.ok() && weights.ok() && offsets.ok() && row_token.ok() && slot_row.ok() &&
              active.ok() && active_count.ok());

  // Top-k: the k largest logits of each token, by decreasing value; weights
  // renormalised to 1.
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int> order(num_experts);
    std::iota(order.begin(), order.end(), 0);
    const float* row = logits.data() + t * num_experts;
    std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return row[a] > row[c]; });
    float sum = 0;
    for (int s = 0; s < top_k; ++s) {
      EXPECT_EQ((*experts)[t * top_k + s], order[s]) << "token " << t << " slot " << s;
      sum += (*weights)[t * top_k + s];
    }
    EXPECT_NEAR(sum, 1.0f, 1e-5f) << "token " << t;
  }
  // Permutation: a stable sort of the assignments by expert.
  std::vector<int> count(num_experts, 0);
  for (int32_t e : *experts) ++count[e];
  std::vector<int32_t> want_offsets(num_experts + 1, 0), want_active;
  for (int e = 0; e < num_experts; ++e) {
    want_offsets[e + 1] = want_offsets[e] + count[e];
    if (count[e] > 0) want_active.push_back(e);
  }
  EXPECT_EQ(*offsets, want_offsets);
  ASSERT_EQ((*active_count)[0], static_cast<int32_t>(want_active.size()));
  EXPECT_EQ(std::vector<int32_t>(active->begin(), active->begin() + want_active.size()),
            want_active);
  std::vector<int32_t> next(want_offsets.begin(), want_offsets.end() - 1);
  for (size_t i = 0; i < nk; ++i) {
    const int row = next[(*experts)[i]]++;
    EXPECT_EQ((*slot_row)[i], row) << "assignment " << i;
    EXPECT_EQ((*row_token)[row], static_cast<int32_t>(i / top_k)) << "row " << row;
  }
}

TEST(MoeDecodeGpuTest, RouteOneToken) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckRoute(1, 128, 8, 1);  // Qwen3-VL-30B-A3B
}

TEST(MoeDecodeGpuTest, RouteABatchSharesExperts) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckRoute(64, 16, 4, 2);  // every expert takes many rows
  CheckRoute(7, 60, 4, 3);   // fewer experts than threads
}

TEST(MoeDecodeGpuTest, RouteSeveralExpertsPerScanThread) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckRoute(5, 512, 8, 4);  // two experts per thread of the scan
  CheckRoute(3, 300, 6, 5);  // a ragged last run
}

// Multiples of 2^-6 in [-2, 2]: exact in bf16, and the weighted sums below
// (weights multiples of 1/8) stay exact in fp32.
std::vector<float> GridF32(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 128);
  std::vector<float> out(count);
  for (float& v : out) v = static_cast<float>(dist(rng)) / 64.0f;
  return out;
}

// FP8 experts per expert [out, in] (an FP8 checkpoint's, --expert_dtype=fp8's)
// read by GateUp / Down as e4m3 bytes times their block's scale: against the
// host's SwiGLU and down projection over the same values (q * scale in fp32),
// with 16 x 32 blocks (several along each side, partial ones at the ends of
// inter = 40) and fp32 or bf16 scales, for one token and a batch whose rows
// share experts. An FP8 table the kernels cannot read is refused.
TEST(MoeDecodeGpuTest, Fp8ExpertsAreReadWithTheirBlockScales) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int kE = 4, kK = 2, kH = 64, kI = 40, kBlockRows = 16, kBlockCols = 32;
  for (const bool bf16_scales : {false, true}) {
    for (const int64_t n : {int64_t{1}, int64_t{5}}) {
      SCOPED_TRACE(::testing::Message()
                   << "n=" << n << (bf16_scales ? ", bf16" : ", fp32") << " scales");
      std::mt19937 rng(static_cast<uint32_t>(n) + (bf16_scales ? 7 : 0));
      std::uniform_real_distribution<float> value(-1.0f, 1.0f), scale(0.01f, 0.05f);
      // Per expert: gate [I, H], up [I, H], down [H, I] as e4m3 bytes and
      // their scales; `w` the values they stand for.
      struct Part {
        std::vector<uint8_t> q;
        std::vector<float> s, w;
        DeviceBuffer dq, ds;
      };
      std::vector<std::vector<Part> > experts(kE);
      for (int e = 0; e < kE; ++e) {
        experts[e].resize(3);
        for (int p = 0; p < 3; ++p) {
          const int rows = p == 2 ? kH : kI, cols = p == 2 ? kI : kH;
          Part& part = experts[e][p];
          const int sr = (rows + kBlockRows - 1) / kBlockRows;
          const int sc = (cols + kBlockCols - 1) / kBlockCols;
          for (int i = 0; i < sr * sc; ++i) {
            const float v = scale(rng);
            part.s.push_back(bf16_scales ? Bf16ToFloat(FloatToBf16(v)) : v);
          }
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < cols; ++c) {
              const uint8_t q = FloatToE4m3(value(rng) * 8.0f);
              part.q.push_back(q);
              part.w.push_back(E4m3ToFloat(q) * part.s[(r / kBlockRows) * sc + c / kBlockCols]);
            }
          }
          auto dq = Upload(part.q);
          ASSERT_TRUE(dq.ok());
          part.dq = *std::move(dq);
          if (bf16_scales) {
            std::vector<uint16_t> b;
            for (float v : part.s) b.push_back(FloatToBf16(v));
            auto ds = Upload(b);
            ASSERT_TRUE(ds.ok());
            part.ds = *std::move(ds);
          } else {
            auto ds = Upload(part.s);
            ASSERT_TRUE(ds.ok());
            part.ds = *std::move(ds);
          }
        }
      }
      std::vector<const void*> arrays(6 * kE);
      for (int e = 0; e < kE; ++e) {
        for (int p = 0; p < 3; ++p) {
          arrays[p * kE + e] = experts[e][p].dq.data();
          arrays[(3 + p) * kE + e] = experts[e][p].ds.data();
        }
      }
      auto dtable = Upload(arrays);
      ASSERT_TRUE(dtable.ok());
      const void* const* dev = dtable->as<const void*>();
      MoeDecodeTable table;
      table.layout = WeightLayout::kOutIn;
      table.gate_up = reinterpret_cast<const Bf16* const*>(dev);
      table.up = table.gate_up + kE;
      table.down = table.gate_up + 2 * kE;
      table.fp8 = true;
      table.gate_scale = dev + 3 * kE;
      table.up_scale = dev + 4 * kE;
      table.down_scale = dev + 5 * kE;
      table.scale_bf16 = bf16_scales;
      table.block_rows = kBlockRows;
      table.block_cols = kBlockCols;

      std::vector<uint16_t> x(n * kH);
      for (auto& v : x) v = FloatToBf16(value(rng));
      const std::vector<float> logits = SeparatedLogits(n, kE, 3);
      auto dx = Upload(x);
      auto dl = Upload(logits);
      auto act = DeviceBuffer::Allocate(n * kK * kI * sizeof(float));
      auto yp = DeviceBuffer::Allocate(n * kK * kH * sizeof(float));
      ASSERT_TRUE(dx.ok() && dl.ok() && act.ok() && yp.ok());
      RoutingBuffers b = AllocateRouting(n, kK, kE);
      ASSERT_OK(MoeDecodeRoute(dl->as<float>(), n, kE, kK, true, b.view, nullptr, nullptr));
      ASSERT_OK(MoeDecodeGateUp(dx->as<Bf16>(), n, kH, kI, kK, kE, table, b.view, act->as<float>(),
                                nullptr));
      ASSERT_OK(MoeDecodeDown(act->as<float>(), n, kH, kI, kK, kE, table, b.view, yp->as<float>(),
                              nullptr));
      auto ids = Download<int32_t>(b.experts, n * kK);
      auto slot_row = Download<int32_t>(b.slot_row, n * kK);
      auto got = Download<float>(*yp, n * kK * kH);
      ASSERT_TRUE(ids.ok() && slot_row.ok() && got.ok());
      double worst = 0, scale_of = 0;
      for (int64_t t = 0; t < n; ++t) {
        for (int s = 0; s < kK; ++s) {
          const int e = (*ids)[t * kK + s];
          ASSERT_TRUE(e >= 0 && e < kE);
          std::vector<double> a(kI);
          for (int i = 0; i < kI; ++i) {
            double g = 0, u = 0;
            for (int h = 0; h < kH; ++h) {
              const double xv = Bf16ToFloat(x[t * kH + h]);
              g += xv * experts[e][0].w[i * kH + h];
              u += xv * experts[e][1].w[i * kH + h];
            }
            a[i] = g / (1.0 + std::exp(-g)) * u;
          }
          const int row = (*slot_row)[t * kK + s];
          for (int o = 0; o < kH; ++o) {
            double want = 0;
            for (int i = 0; i < kI; ++i) want += a[i] * experts[e][2].w[o * kI + i];
            worst = std::max(worst, std::fabs((*got)[row * kH + o] - want));
            scale_of = std::max(scale_of, std::fabs(want));
          }
        }
      }
      // fp32 accumulation over 64 and 40 terms: far below 1e-4 of the outputs' scale.
      EXPECT_LE(worst, 1e-4 * scale_of) << "worst " << worst << " of " << scale_of;
      MoeDecodeTable fused = table;  // FP8 is read per expert [out, in] only
      fused.layout = WeightLayout::kInOut;
      EXPECT_EQ(MoeDecodeGateUp(dx->as<Bf16>(), n, kH, kI, kK, kE, fused, b.view, act->as<float>(),
                                nullptr)
                    .code(),
                absl::StatusCode::kInvalidArgument);
      MoeDecodeTable straddling = table;  // 8-column groups would straddle blocks
      straddling.block_cols = 12;
      EXPECT_EQ(MoeDecodeDown(act->as<float>(), n, kH, kI, kK, kE, straddling, b.view,
                              yp->as<float>(), nullptr)
                    .code(),
                absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(MoeDecodeGpuTest, CombineIsTheSlotsWeightedSumPlusTheResidual) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 3;
  constexpr int kK = 8, kH = 2048 + 40;  // a ragged last block of columns
  const std::vector<float> yp = GridF32(kN * kK * kH, 6);
  std::vector<int32_t> slot_row(kN * kK);
  std::iota(slot_row.begin(), slot_row.end(), 0);
  std::shuffle(slot_row.begin(), slot_row.end(), std::mt19937(7));
  slot_row[5] = -1;  // a bad id's slot is skipped
  std::vector<float> weights(kN * kK);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i % 7 + 1) / 8.0f;
  const std::vector<float> hs_f = GridF32(kN * kH, 8);
  std::vector<uint16_t> hs(hs_f.size());
  for (size_t i = 0; i < hs.size(); ++i) hs[i] = FloatToBf16(hs_f[i]);

  auto d_yp = Upload(yp);
  auto d_rows = Upload(slot_row);
  auto d_w = Upload(weights);
  auto d_hs = Upload(hs);
  auto d_y = DeviceBuffer::Allocate(kN * kH * 2);
  ASSERT_TRUE(d_yp.ok() && d_rows.ok() && d_w.ok() && d_hs.ok() && d_y.ok());
  MoeDecodeRouting r;
  r.slot_row = d_rows->as<int32_t>();
  r.weights = d_w->as<float>();
  ASSERT_OK(MoeDecodeCombine(d_yp->as<float>(), r, kN, kK, kH, d_y->as<Bf16>(), d_hs->as<Bf16>(),
                             nullptr));
  auto y = Download<uint16_t>(*d_y, kN * kH);
  auto hs_out = Download<uint16_t>(*d_hs, kN * kH);
  ASSERT_TRUE(y.ok() && hs_out.ok());
  int bad = 0;
  for (int64_t t = 0; t < kN; ++t) {
    for (int c = 0; c < kH; ++c) {
      float acc = 0;
      for (int s = 0; s < kK; ++s) {
        const int row = slot_row[t * kK + s];
        if (row >= 0) acc += weights[t * kK + s] * yp[static_cast<int64_t>(row) * kH + c];
      }
      const uint16_t want_y = FloatToBf16(acc);
      const uint16_t want_hs = FloatToBf16(hs_f[t * kH + c] + Bf16ToFloat(want_y));
      bad += (*y)[t * kH + c] != want_y || (*hs_out)[t * kH + c] != want_hs;
    }
  }
  EXPECT_EQ(bad, 0) << "of " << kN * kH << " columns";
}

TEST(MoeDecodeGpuTest, CombineRejectsTooManySlots) {
  MoeDecodeRouting r;
  EXPECT_EQ(MoeDecodeCombine(nullptr, r, 1, 33, 64, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// Device argmax of `rows` rows of `vocab` logits against GreedyArgmax, -1 for
// a row that is not AllFinite.
void CheckArgmax(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  SCOPED_TRACE(::testing::Message() << "rows=" << rows << " vocab=" << vocab);
  auto dl = Upload(logits);
  auto work = DeviceBuffer::Allocate(GreedyArgmaxWorkspaceBytes(rows));
  auto out = DeviceBuffer::Allocate(rows * 4);
  ASSERT_TRUE(dl.ok() && work.ok() && out.ok());
  ASSERT_OK(
      GreedyArgmaxRows(dl->as<float>(), rows, vocab, out->as<int32_t>(), work->data(), nullptr));
  auto got = Download<int32_t>(*out, rows);
  ASSERT_TRUE(got.ok());
  for (int64_t r = 0; r < rows; ++r) {
    const absl::Span<const float> row(logits.data() + r * vocab, vocab);
    const int want = AllFinite(row) ? GreedyArgmax(row) : -1;
    EXPECT_EQ((*got)[r], want) << "row " << r;
  }
}

TEST(MoeDecodeGpuTest, ArgmaxIsTheFirstIndexOfTheMaximum) {
  VISMOE_SKIP_WITHOUT_GPU();
  for (int64_t vocab : {int64_t{151936}, int64_t{1000}, int64_t{7}, int64_t{65537}}) {
    constexpr int64_t kRows = 5;
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    std::uniform_int_distribution<int> dist(-50, 50);  // many equal values
    std::vector<float> logits(kRows * vocab);
    for (float& v : logits) v = static_cast<float>(dist(rng)) / 4.0f;
    // Row 1: the maximum at the very end; row 2: equal maxima in the last
    // slice and the first, the first index wins; row 3: at index 0.
    logits[1 * vocab + vocab - 1] = 100.0f;
    logits[2 * vocab + vocab - 2] = 90.0f;
    logits[2 * vocab + 3] = 90.0f;
    logits[3 * vocab] = 80.0f;
    CheckArgmax(logits, kRows, vocab);
  }
}

TEST(MoeDecodeGpuTest, ArgmaxGivesNoTokenForANonFiniteRow) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 4, kVocab = 151936;
  std::vector<float> logits(kRows * kVocab, 0.5f);
  logits[0 * kVocab + 77777] = std::numeric_limits<float>::quiet_NaN();
  logits[1 * kVocab + 151935] = std::numeric_limits<float>::infinity();
  logits[2 * kVocab + 5] = -std::numeric_limits<float>::infinity();
  logits[3 * kVocab + 12345] = 2.0f;  // a finite row beside them
  CheckArgmax(logits, kRows, kVocab);
}

TEST(MoeDecodeGpuTest, ArgmaxNeedsAWorkspace) {
  EXPECT_EQ(GreedyArgmaxRows(nullptr, 1, 10, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
