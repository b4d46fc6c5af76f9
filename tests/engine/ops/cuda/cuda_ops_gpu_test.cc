// Each CUDA kernel against its CPU reference (engine/ops/cpu) on the same
// random inputs. Inputs are generated as bf16 so both backends read identical
// values; the CPU computes in fp32 and the GPU stores bf16, so the tolerance
// is bf16-scaled (llm.c style): |gpu - cpu| <= 1e-2 * (1 + |cpu|) for bf16
// outputs. bf16 has an 8-bit significand: rounding the output alone costs up
// to 2^-9 ~ 0.002 relative, and fp32 reductions in a different order add far
// less, so 1e-2 leaves ~5x headroom while any indexing or formula mistake
// shows up as O(1) errors. fp32 outputs (router weights) use 1e-5.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(CudaOpsGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/group_router.h"
#include "engine/ops/cpu/layer_norm.h"
#include "engine/ops/cpu/linear.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rms_norm.h"
#include "engine/ops/cpu/rope.h"
#include "engine/ops/cuda/activations.h"
#include "engine/ops/cuda/attention.h"
#include "engine/ops/cuda/dequantize.h"
#include "engine/ops/cuda/embedding.h"
#include "engine/ops/cuda/moe_router.h"
#include "engine/ops/cuda/norm.h"
#include "engine/ops/cuda/rope.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using testing::Download;
using testing::ExpectClose;
using testing::RandomBf16;
using testing::ToF32;
using testing::Upload;

constexpr float kBf16Tol = 1e-2f;

// Copies n bf16 values back from the device as floats (NaN on failure).
std::vector<float> DownloadBf16(const DeviceBuffer& buf, size_t n) {
  absl::StatusOr<std::vector<uint16_t> > v = Download<uint16_t>(buf, n);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? ToF32(*v) : std::vector<float>(n, NAN);
}

TEST(CudaOpsGpuTest, RmsNormMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 7;
  constexpr int kDim = 2048;  // Qwen3-VL-30B-A3B hidden size
  const auto x = RandomBf16(kN * kDim, 1, 2.0f);
  const auto w = RandomBf16(kDim, 2, 1.5f);
  std::vector<float> ref(kN * kDim);
  const std::vector<float> xf = ToF32(x);
  cpu::RmsNorm(nullptr, xf.data(), kN, kDim, testing::Bf16View(w, {kDim}), 1e-6f, ref.data());

  auto dx = Upload(x);
  auto dw = Upload(w);
  auto dy = DeviceBuffer::Allocate(kN * kDim * 2);
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
  ASSERT_OK(RmsNorm(dx->as<Bf16>(), kDim, kN, 1, kDim, dw->as<Bf16>(), 1e-6f, dy->as<Bf16>(), kDim,
                    nullptr));
  ExpectClose(DownloadBf16(*dy, kN * kDim), ref, kBf16Tol, kBf16Tol, "rms_norm");
}

// Rows the 16-byte kernel does not take run the strided one: a dim that is
// not a multiple of 8, and rows one element off 16-byte alignment.
TEST(CudaOpsGpuTest, RmsNormOddDimsAndUnalignedRowsMatchCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 3;
  for (const auto& [dim, offset] : {std::pair<int, int>{1000, 0}, std::pair<int, int>{2048, 1}}) {
    SCOPED_TRACE(::testing::Message() << "dim=" << dim << " offset=" << offset);
    const int64_t stride = dim + offset;
    const auto x = RandomBf16(kN * stride + offset, 11, 2.0f);
    const auto w = RandomBf16(dim, 12, 1.5f);
    std::vector<float> ref(kN * dim);
    std::vector<float> xf(kN * dim);
    for (int64_t r = 0; r < kN; ++r) {
      for (int i = 0; i < dim; ++i) xf[r * dim + i] = Bf16ToFloat(x[offset + r * stride + i]);
    }
    cpu::RmsNorm(nullptr, xf.data(), kN, dim, testing::Bf16View(w, {dim}), 1e-6f, ref.data());
    auto dx = Upload(x);
    auto dw = Upload(w);
    auto dy = DeviceBuffer::Allocate(kN * dim * 2);
    ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
    ASSERT_OK(RmsNorm(dx->as<Bf16>() + offset, stride, kN, 1, dim, dw->as<Bf16>(), 1e-6f,
                      dy->as<Bf16>(), dim, nullptr));
    ExpectClose(DownloadBf16(*dy, kN * dim), ref, kBf16Tol, kBf16Tol, "rms_norm");
  }
}

TEST(CudaOpsGpuTest, QkNormInPlaceInsideFusedQkvRows) {
  VISMOE_SKIP_WITHOUT_GPU();
  // Qwen3-VL-30B-A3B attention: 32 q heads, 4 kv heads, head_dim 128.
  constexpr int64_t kN = 5;
  constexpr int kHeads = 32, kKv = 4, kHd = 128;
  constexpr int64_t kStride = (kHeads + 2 * kKv) * kHd;
  const auto qkv = RandomBf16(kN * kStride, 3, 3.0f);
  const auto w = RandomBf16(kHd, 4, 1.0f);
  std::vector<float> ref = ToF32(qkv);
  for (int64_t i = 0; i < kN; ++i) {  // q region of each row: kHeads rows of kHd
    cpu::RmsNorm(nullptr, ref.data() + i * kStride, kHeads, kHd, testing::Bf16View(w, {kHd}), 1e-6f,
                 ref.data() + i * kStride);
  }
  auto d = Upload(qkv);
  auto dw = Upload(w);
  ASSERT_TRUE(d.ok() && dw.ok());
  ASSERT_OK(RmsNorm(d->as<Bf16>(), kStride, kN, kHeads, kHd, dw->as<Bf16>(), 1e-6f, d->as<Bf16>(),
                    kStride, nullptr));
  // k and v columns are untouched (exactly), q columns match the reference.
  ExpectClose(DownloadBf16(*d, kN * kStride), ref, kBf16Tol, kBf16Tol, "qk_norm");
}

TEST(CudaOpsGpuTest, LayerNormMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 6;
  constexpr int kDim = 1152;  // Qwen3-VL vision hidden size
  const auto x = RandomBf16(kN * kDim, 5, 4.0f);
  const auto w = RandomBf16(kDim, 6, 1.0f);
  const auto b = RandomBf16(kDim, 7, 0.5f);
  const std::vector<float> xf = ToF32(x);
  std::vector<float> ref(kN * kDim);
  cpu::LayerNorm(nullptr, xf.data(), kN, kDim, testing::Bf16View(w, {kDim}),
                 testing::Bf16View(b, {kDim}), 1e-6f, ref.data());
  auto dx = Upload(x);
  auto dw = Upload(w);
  auto db = Upload(b);
  ASSERT_TRUE(dx.ok() && dw.ok() && db.ok());
  ASSERT_OK(LayerNorm(dx->as<Bf16>(), kN, kDim, dw->as<Bf16>(), db->as<Bf16>(), 1e-6f,
                      dx->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dx, kN * kDim), ref, kBf16Tol, kBf16Tol, "layer_norm");
}

// Positions [3][n] (t, h, w) far apart on every axis: with theta = 5e6 the
// lowest frequencies turn by ~3e-7 rad per position, so only gaps of ~1e5+
// make a wrong M-RoPE axis (or section boundary) move an angle by more than
// the bf16 tolerance. All values stay below 2^24, exact in fp32.
std::vector<int64_t> MropeTestPositions(int64_t n) {
  std::vector<int64_t> pos(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    pos[i] = 7 * i;                        // t
    pos[n + i] = 400000 + 9777 * i;        // h
    pos[2 * n + i] = 1000000 - 41111 * i;  // w
  }
  return pos;
}

constexpr int64_t kRopeTokens = 9;

// Runs anywhere: guards the reference and the test's sensitivity. The CPU
// table for Qwen3-VL (head_dim 128, theta 5e6, section [24, 20, 20]) feeds
// frequency j from h at j = 1 mod 3 < 60, from w at j = 2 mod 3 < 60, else
// from t (transformers' interleaved M-RoPE); and for every j, feeding it from
// any other axis moves (cos, sin) by >= 0.1 for some token, i.e. |x| * 0.1 on
// the rotated values, far above the 1e-2 bf16 tolerance.
TEST(CudaOpsHostTest, MropeReferenceAndTestPositionsSeparateEveryAxis) {
  constexpr int kHd = 128;
  constexpr double kTheta = 5000000.0;
  const std::vector<int64_t> pos = MropeTestPositions(kRopeTokens);
  std::vector<cpu::RopeTable> axis;  // plain RoPE on each axis alone
  for (int a = 0; a < 3; ++a) {
    axis.push_back(cpu::BuildRopeTable(pos.data() + a * kRopeTokens, kRopeTokens, kHd, kTheta, {}));
  }
  const cpu::RopeTable mrope =
      cpu::BuildRopeTable(pos.data(), kRopeTokens, kHd, kTheta, {24, 20, 20});
  for (int j = 0; j < kHd / 2; ++j) {
    const int want = j < 60 ? j % 3 : 0;
    for (int64_t i = 0; i < kRopeTokens; ++i) {
      for (int64_t at : {i * kHd + j, i * kHd + j + kHd / 2}) {
        ASSERT_EQ(mrope.cos[at], axis[want].cos[at]) << "frequency " << j << " token " << i;
        ASSERT_EQ(mrope.sin[at], axis[want].sin[at]) << "frequency " << j << " token " << i;
      }
    }
    for (int a = 0; a < 3; ++a) {
      for (int b = a + 1; b < 3; ++b) {
        double chord = 0;
        for (int64_t i = 0; i < kRopeTokens; ++i) {
          const int64_t at = i * kHd + j;
          chord =
              std::max(chord, std::hypot(static_cast<double>(axis[a].cos[at]) - axis[b].cos[at],
                                         static_cast<double>(axis[a].sin[at]) - axis[b].sin[at]));
        }
        EXPECT_GE(chord, 0.1) << "frequency " << j << " axes " << a << ", " << b;
      }
    }
  }
}

void CheckRope(int head_dim, int heads, int64_t row_stride, const std::vector<int>& section,
               double theta) {
  constexpr int64_t kN = kRopeTokens;
  // The model's layout: int64 [3][n] on the device, the host section array.
  const std::vector<int64_t> pos = MropeTestPositions(kN);
  const auto x = RandomBf16(kN * row_stride, 8, 2.0f);
  std::vector<float> ref = ToF32(x);
  const cpu::RopeTable table = cpu::BuildRopeTable(pos.data(), kN, head_dim, theta, section);
  cpu::ApplyRope(nullptr, table, ref.data(), kN, heads, head_dim, row_stride);

  auto dx = Upload(x);
  auto dpos = Upload(pos);
  auto dinv = Upload(RopeInvFreq(head_dim, theta));
  ASSERT_TRUE(dx.ok() && dpos.ok() && dinv.ok());
  ASSERT_OK(ApplyRope(dx->as<Bf16>(), kN, heads, head_dim, row_stride, dpos->as<int64_t>(),
                      dinv->as<float>(), section.empty() ? nullptr : section.data(), nullptr));
  ExpectClose(DownloadBf16(*dx, kN * row_stride), ref, kBf16Tol, kBf16Tol, "rope");

  // The table-driven variant (vision 2-D rotary) with the CPU's own table.
  auto dx2 = Upload(x);
  auto dcos = Upload(table.cos);
  auto dsin = Upload(table.sin);
  ASSERT_TRUE(dx2.ok() && dcos.ok() && dsin.ok());
  ASSERT_OK(ApplyRopeTable(dx2->as<Bf16>(), kN, heads, head_dim, row_stride, dcos->as<float>(),
                           dsin->as<float>(), nullptr));
  ExpectClose(DownloadBf16(*dx2, kN * row_stride), ref, kBf16Tol, kBf16Tol, "rope_table");
}

TEST(CudaOpsGpuTest, InterleavedMropeMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  // Qwen3-VL: head_dim 128, mrope_section [24, 20, 20], q heads inside a wider row.
  CheckRope(128, 32, (32 + 8) * 128, {24, 20, 20}, 5000000.0);
}

TEST(CudaOpsGpuTest, PlainRopeMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckRope(64, 4, 4 * 64, {}, 10000.0);
}

// PhiMoE's LongRoPE: the short factors' frequencies (cpu::LongRopeInvFreq,
// as the CUDA decoder uploads them) and a per-row mscale (two sequences, one
// past the original context), against cpu::BuildRopeTable + ScaleRopeRows.
TEST(CudaOpsGpuTest, LongRopeRowScalesMatchCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = kRopeTokens;
  constexpr int kHeadDim = 32, kHeads = 5;
  std::vector<int64_t> pos(kN);
  for (int64_t i = 0; i < kN; ++i) pos[i] = 7 * i;
  std::vector<float> factors(kHeadDim / 2);
  for (size_t j = 0; j < factors.size(); ++j) factors[j] = 1.0f + 0.37f * static_cast<float>(j);
  std::vector<float> row_scale(kN, 1.1f);
  for (int64_t i = 4; i < kN; ++i) row_scale[i] = 1.3f;  // the second sequence: long
  const auto x = RandomBf16(kN * kHeads * kHeadDim, 28, 2.0f);
  std::vector<float> ref = ToF32(x);
  cpu::RopeTable table = cpu::BuildRopeTable(pos.data(), kN, kHeadDim, 10000.0, {}, &factors);
  cpu::ScaleRopeRows(&table, 0, 4, 1.1f);
  cpu::ScaleRopeRows(&table, 4, kN - 4, 1.3f);
  cpu::ApplyRope(nullptr, table, ref.data(), kN, kHeads, kHeadDim, kHeads * kHeadDim);
  auto dx = Upload(x);
  auto dpos = Upload(pos);
  auto dinv = Upload(cpu::LongRopeInvFreq(kHeadDim, 10000.0, factors));
  auto dscale = Upload(row_scale);
  ASSERT_TRUE(dx.ok() && dpos.ok() && dinv.ok() && dscale.ok());
  ASSERT_OK(ApplyRope(dx->as<Bf16>(), kN, kHeads, kHeadDim, kHeads * kHeadDim, dpos->as<int64_t>(),
                      dinv->as<float>(), nullptr, nullptr, 1.0f, dscale->as<float>()));
  ExpectClose(DownloadBf16(*dx, kN * kHeads * kHeadDim), ref, kBf16Tol, kBf16Tol, "longrope");
}

// GPT-OSS's YaRN: the blended inverse frequencies (cpu::YarnInvFreq, as the
// CUDA decoder uploads them) and cos / sin scaled by the attention factor.
TEST(CudaOpsGpuTest, YarnRopeWithAttentionFactorMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = kRopeTokens;
  constexpr int kHeadDim = 64, kHeads = 6;
  constexpr float kScale = 1.3466f;  // 0.1 ln(32) + 1
  std::vector<int64_t> pos(kN);
  for (int64_t i = 0; i < kN; ++i) pos[i] = 3 * i + 1;
  const std::vector<float> inv = cpu::YarnInvFreq(kHeadDim, 150000.0, 32.0, 4096, 32.0, 1.0, false);
  const auto x = RandomBf16(kN * kHeads * kHeadDim, 26, 2.0f);
  std::vector<float> ref = ToF32(x);
  cpu::RopeTable table = cpu::BuildRopeTable(pos.data(), kN, kHeadDim, inv);
  cpu::ScaleRopeRows(&table, 0, kN, kScale);
  cpu::ApplyRope(nullptr, table, ref.data(), kN, kHeads, kHeadDim, kHeads * kHeadDim);
  auto dx = Upload(x);
  auto dpos = Upload(pos);
  auto dinv = Upload(inv);
  ASSERT_TRUE(dx.ok() && dpos.ok() && dinv.ok());
  ASSERT_OK(ApplyRope(dx->as<Bf16>(), kN, kHeads, kHeadDim, kHeads * kHeadDim, dpos->as<int64_t>(),
                      dinv->as<float>(), nullptr, nullptr, kScale));
  ExpectClose(DownloadBf16(*dx, kN * kHeads * kHeadDim), ref, kBf16Tol, kBf16Tol, "yarn rope");
}

// Argument checks happen on the host before any launch: these run anywhere.
TEST(CudaOpsArgsTest, RejectBadShapesBeforeLaunching) {
  const int section[3] = {10, 10, 10};  // sums to 30, not head_dim / 2 = 64
  EXPECT_EQ(ApplyRope(nullptr, 1, 1, 128, 128, nullptr, nullptr, section, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyRope(nullptr, 1, 1, 127, 127, nullptr, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // odd head_dim
  AttentionShape gqa;
  gqa.num_heads = 32;
  gqa.num_kv_heads = 5;  // 32 % 5 != 0
  gqa.head_dim = 128;
  EXPECT_EQ(Attention(gqa, nullptr, 1, nullptr, nullptr, 1, true, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  gqa.num_kv_heads = 4;
  gqa.head_dim = 512;  // above the kernel's 256 limit
  EXPECT_EQ(Attention(gqa, nullptr, 1, nullptr, nullptr, 1, true, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  gqa.head_dim = 128;
  gqa.window = 8;  // a window needs a causal mask
  EXPECT_EQ(Attention(gqa, nullptr, 1, nullptr, nullptr, 1, false, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  gqa.window = -1;
  EXPECT_EQ(Attention(gqa, nullptr, 1, nullptr, nullptr, 1, true, 0, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Clamp(nullptr, 1, 0.0f, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MoeRouterTopK(nullptr, 1, 128, 0, true, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MoeRouterTopK(nullptr, 1, 4, 8, true, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm(nullptr, 0, 1, 1, 0, nullptr, 1e-6f, nullptr, 0, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// q and k uniform in [-3.5, 3.5]: scores (q . k) / sqrt(head_dim) then have a
// standard deviation of 3.5^2 / 3 ~ 4 (0.33 with [-1, 1]), so softmax rows are
// peaked as in trained models: a high-scoring key wrongly let in or masked
// takes most of the weight, and an error in the scores (scale, kv head, lost
// precision) is amplified rather than averaged away by near-uniform weights.
constexpr float kQkScale = 3.5f;

// Dense q [nq, heads * head_dim], k/v [nk, kv_heads * head_dim] as bf16 bits.
struct AttentionInputs {
  std::vector<uint16_t> q, k, v;
};

AttentionInputs RandomAttentionInputs(int64_t nq, int64_t nk, int64_t qw, int64_t kvw,
                                      uint32_t seed) {
  return {RandomBf16(nq * qw, seed, kQkScale), RandomBf16(nk * kvw, seed + 1, kQkScale),
          RandomBf16(nk * kvw, seed + 2, 2.0f)};
}

// The families' variants of a row's softmax: a sliding window and per-head
// sink logits (null: none).
struct AttentionMask {
  int64_t window = 0;
  const std::vector<float>* sinks = nullptr;
};

// cpu::Attention on the dense fp32 equivalents.
std::vector<float> CpuAttention(int heads, int kv_heads, int head_dim, const AttentionInputs& in,
                                int64_t nq, int64_t nk, bool causal, int64_t q_pos0,
                                const AttentionMask& mask = {}) {
  const std::vector<float> qf = ToF32(in.q), kf = ToF32(in.k), vf = ToF32(in.v);
  std::vector<float> ref(nq * heads * head_dim);
  cpu::AttentionShape cs;
  cs.num_heads = heads;
  cs.num_kv_heads = kv_heads;
  cs.head_dim = head_dim;
  cs.window = mask.window;
  cs.sinks = mask.sinks == nullptr ? nullptr : mask.sinks->data();
  cpu::Attention(nullptr, cs, qf.data(), nq, kf.data(), vf.data(), nk, causal, q_pos0, ref.data());
  return ref;
}

void CheckAttention(int heads, int kv_heads, int head_dim, int64_t nq, int64_t nk, bool causal,
                    int64_t q_pos0, const AttentionMask& mask = {}) {
  const int64_t qw = static_cast<int64_t>(heads) * head_dim;
  const int64_t kvw = static_cast<int64_t>(kv_heads) * head_dim;
  const AttentionInputs in = RandomAttentionInputs(nq, nk, qw, kvw, 10);
  const std::vector<float> ref =
      CpuAttention(heads, kv_heads, head_dim, in, nq, nk, causal, q_pos0, mask);
  auto dq = Upload(in.q);
  auto dk = Upload(in.k);
  auto dv = Upload(in.v);
  auto dout = DeviceBuffer::Allocate(nq * qw * 2);
  ASSERT_TRUE(dq.ok() && dk.ok() && dv.ok() && dout.ok());
  AttentionShape gs;
  gs.num_heads = heads;
  gs.num_kv_heads = kv_heads;
  gs.head_dim = head_dim;
  gs.window = mask.window;
  absl::StatusOr<DeviceBuffer> dsinks;
  if (mask.sinks != nullptr) {
    dsinks = Upload(*mask.sinks);
    ASSERT_TRUE(dsinks.ok()) << dsinks.status();
    gs.sinks = dsinks->as<float>();
  }
  ASSERT_OK(Attention(gs, dq->as<Bf16>(), nq, dk->as<Bf16>(), dv->as<Bf16>(), nk, causal, q_pos0,
                      dout->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dout, nq * qw), ref, kBf16Tol, kBf16Tol, "attention");
}

// The strided layouts the models pass (engine/arch/cuda): q is read from
// fused q|k|v rows of width qd + 2 * kvd. With kv_in_fused (the vision
// tower) k/v are read from those same rows, kv_row_stride = width; otherwise
// (the text decoder) k/v come from the KV cache, dense rows of kvd with the n
// new tokens appended after q_pos0 cached ones, and the queries are at
// positions q_pos0 .. q_pos0 + n - 1 of nk = q_pos0 + n keys.
// The reference is cpu::Attention on the dense equivalents.
void CheckFusedQkvAttention(int heads, int kv_heads, int head_dim, int64_t n, int64_t q_pos0,
                            bool causal, bool kv_in_fused) {
  ASSERT_TRUE(!kv_in_fused || q_pos0 == 0) << "fused k/v rows hold only the new tokens";
  const int64_t qd = static_cast<int64_t>(heads) * head_dim;
  const int64_t kvd = static_cast<int64_t>(kv_heads) * head_dim;
  const int64_t width = qd + 2 * kvd;
  const int64_t nk = q_pos0 + n;
  const AttentionInputs in = RandomAttentionInputs(n, nk, qd, kvd, 30);
  const std::vector<float> ref = CpuAttention(heads, kv_heads, head_dim, in, n, nk, causal, q_pos0);

  // Row i of the fused buffer is q[i] | k[q_pos0 + i] | v[q_pos0 + i], as the
  // QKV projections write it.
  std::vector<uint16_t> fused(n * width);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(in.q.begin() + i * qd, qd, fused.begin() + i * width);
    std::copy_n(in.k.begin() + (q_pos0 + i) * kvd, kvd, fused.begin() + i * width + qd);
    std::copy_n(in.v.begin() + (q_pos0 + i) * kvd, kvd, fused.begin() + i * width + qd + kvd);
  }
  auto dfused = Upload(fused);
  auto dk = Upload(in.k);
  auto dv = Upload(in.v);
  auto dout = DeviceBuffer::Allocate(n * qd * 2);
  ASSERT_TRUE(dfused.ok() && dk.ok() && dv.ok() && dout.ok());
  AttentionShape gs;
  gs.num_heads = heads;
  gs.num_kv_heads = kv_heads;
  gs.head_dim = head_dim;
  gs.q_row_stride = width;
  gs.kv_row_stride = kv_in_fused ? width : kvd;
  const Bf16* q = dfused->as<Bf16>();
  const Bf16* k = kv_in_fused ? q + qd : dk->as<Bf16>();
  const Bf16* v = kv_in_fused ? q + qd + kvd : dv->as<Bf16>();
  ASSERT_OK(Attention(gs, q, n, k, v, nk, causal, q_pos0, dout->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dout, n * qd), ref, kBf16Tol, kBf16Tol, "fused-qkv attention");
}

TEST(CudaOpsGpuTest, CausalPrefillGqaMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckAttention(32, 4, 128, 37, 37, true, 0);
}

TEST(CudaOpsGpuTest, ChunkedPrefillAfterCachedPrefixMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckAttention(32, 4, 128, 16, 80, true, 64);
}

TEST(CudaOpsGpuTest, CausalMaskHidesKeysAfterTheLastQuery) {
  VISMOE_SKIP_WITHOUT_GPU();
  // Keys 48..99 lie after every query position (40..47): all masked.
  CheckAttention(32, 4, 128, 8, 100, true, 40);
}

TEST(CudaOpsGpuTest, DecodeOneQueryAgainstCacheMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckAttention(32, 4, 128, 1, 300, true, 299);
}

// Mixtral's and GPT-OSS's sliding window (shorter than the chunk and than
// the cached prefix) and GPT-OSS's sink logits, alone and together, in
// prefill and decode. Sinks of +-4 take a visible share of the mass.
TEST(CudaOpsGpuTest, SlidingWindowAndSinksMatchCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  std::vector<float> sinks(32);
  for (size_t h = 0; h < sinks.size(); ++h) sinks[h] = -4.0f + 0.25f * static_cast<float>(h);
  for (const AttentionMask& m :
       {AttentionMask{8, nullptr}, AttentionMask{0, &sinks}, AttentionMask{8, &sinks}}) {
    SCOPED_TRACE(::testing::Message() << "window " << m.window << (m.sinks ? ", sinks" : ""));
    CheckAttention(32, 4, 128, 37, 37, true, 0, m);    // prefill from the start
    CheckAttention(32, 4, 128, 16, 80, true, 64, m);   // a chunk after a cached prefix
    CheckAttention(32, 4, 128, 1, 300, true, 299, m);  // decode
    CheckAttention(8, 2, 64, 5, 5, true, 0, m);        // rows that see fewer keys than the window
  }
}

TEST(CudaOpsGpuTest, BidirectionalVisionHeadDim72MatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckAttention(16, 16, 72, 20, 20, false, 0);
}

TEST(CudaOpsGpuTest, TextLayoutPrefillAfterCachedPrefixMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  // Qwen3-VL-30B-A3B: q in fused rows of (32 + 2 * 4) * 128, K/V cache rows of
  // 4 * 128. 19 * 32 query blocks take the 16-warp launch, 40 * 32 the 4-warp one.
  CheckFusedQkvAttention(32, 4, 128, 19, 45, true, false);
  CheckFusedQkvAttention(32, 4, 128, 40, 100, true, false);
}

TEST(CudaOpsGpuTest, TextLayoutDecodeMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckFusedQkvAttention(32, 4, 128, 1, 300, true, false);
}

TEST(CudaOpsGpuTest, KvReadFromFusedRowsMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  // The vision tower: 16 heads of 72, q|k|v rows of 3 * 1152, bidirectional.
  CheckFusedQkvAttention(16, 16, 72, 20, 0, false, true);
  // The API allows it with GQA and causal masking too.
  CheckFusedQkvAttention(32, 4, 128, 33, 0, true, true);
}

// The text decoder's paged KV cache: n new tokens' k/v rows are written from
// fused q|k|v rows into a pool plane through a shuffled block table
// (PagedKvWrite) after q_pos0 cached ones, then attended over through the
// table (PagedAttention). The written rows must be exact copies and the
// output that of cpu::Attention on the dense equivalents.
// With `device_start` the cache length is read from device memory (PagedKv::
// start, as a replayed decode graph reads it) and the host's q_pos0 / nk
// arguments are passed as 0, which the kernel must replace.
void CheckPagedAttention(int heads, int kv_heads, int head_dim, int64_t n, int64_t q_pos0,
                         int64_t block_rows, const AttentionMask& mask = {},
                         bool device_start = false) {
  const int64_t qd = static_cast<int64_t>(heads) * head_dim;
  const int64_t kvd = static_cast<int64_t>(kv_heads) * head_dim;
  const int64_t width = qd + 2 * kvd;
  const int64_t nk = q_pos0 + n;
  const AttentionInputs in = RandomAttentionInputs(n, nk, qd, kvd, 40);
  const std::vector<float> ref =
      CpuAttention(heads, kv_heads, head_dim, in, n, nk, true, q_pos0, mask);
  std::vector<uint16_t> fused(n * width);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(in.q.begin() + i * qd, qd, fused.begin() + i * width);
    std::copy_n(in.k.begin() + (q_pos0 + i) * kvd, kvd, fused.begin() + i * width + qd);
    std::copy_n(in.v.begin() + (q_pos0 + i) * kvd, kvd, fused.begin() + i * width + qd + kvd);
  }
  // Blocks 1, 3, 5, ... of a plane twice as large, in shuffled order; the
  // cached rows placed there on the host.
  const int64_t nblocks = (nk + block_rows - 1) / block_rows;
  std::vector<int32_t> table(nblocks);
  for (int64_t b = 0; b < nblocks; ++b) table[b] = static_cast<int32_t>(2 * b + 1);
  std::mt19937 rng(41);
  std::shuffle(table.begin(), table.end(), rng);
  const int64_t block_stride = block_rows * kvd;
  const int64_t plane = 2 * nblocks * block_stride + block_stride;
  std::vector<uint16_t> pk(plane, 0), pv(plane, 0);
  auto at = [&](int64_t j) {
    return table[j / block_rows] * block_stride + (j % block_rows) * kvd;
  };
  for (int64_t j = 0; j < q_pos0; ++j) {
    std::copy_n(in.k.begin() + j * kvd, kvd, pk.begin() + at(j));
    std::copy_n(in.v.begin() + j * kvd, kvd, pv.begin() + at(j));
  }
  auto dfused = Upload(fused);
  auto dk = Upload(pk);
  auto dv = Upload(pv);
  auto dtable = Upload(table);
  auto dout = DeviceBuffer::Allocate(n * qd * 2);
  ASSERT_TRUE(dfused.ok() && dk.ok() && dv.ok() && dtable.ok() && dout.ok());
  const PagedKv paged{dtable->as<int32_t>(), block_rows, block_stride};
  const Bf16* q = dfused->as<Bf16>();
  ASSERT_OK(PagedKvWrite(q + qd, width, n, kvd, dk->as<Bf16>(), paged, q_pos0, nullptr));
  ASSERT_OK(PagedKvWrite(q + qd + kvd, width, n, kvd, dv->as<Bf16>(), paged, q_pos0, nullptr));
  auto kback = Download<uint16_t>(*dk, plane);
  ASSERT_TRUE(kback.ok());
  for (int64_t j = 0; j < nk; ++j) {
    ASSERT_TRUE(
        std::equal(in.k.begin() + j * kvd, in.k.begin() + (j + 1) * kvd, kback->begin() + at(j)))
        << "key row " << j;
  }
  AttentionShape gs;
  gs.num_heads = heads;
  gs.num_kv_heads = kv_heads;
  gs.head_dim = head_dim;
  gs.q_row_stride = width;
  gs.kv_row_stride = kvd;
  gs.window = mask.window;
  absl::StatusOr<DeviceBuffer> dsinks;
  if (mask.sinks != nullptr) {
    dsinks = Upload(*mask.sinks);
    ASSERT_TRUE(dsinks.ok()) << dsinks.status();
    gs.sinks = dsinks->as<float>();
  }
  PagedKv read = paged;
  auto dstart = Upload(std::vector<int32_t>{static_cast<int32_t>(q_pos0)});
  ASSERT_TRUE(dstart.ok());
  if (device_start) read.start = dstart->as<int32_t>();
  ASSERT_OK(PagedAttention(gs, q, n, dk->as<Bf16>(), dv->as<Bf16>(), read, device_start ? 0 : nk,
                           true, device_start ? 0 : q_pos0, dout->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dout, n * qd), ref, kBf16Tol, kBf16Tol, "paged attention");
}

TEST(CudaOpsGpuTest, PagedKvCachePrefillAndDecodeMatchCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckPagedAttention(32, 4, 128, 19, 45, 16);  // a chunk after a cached prefix
  CheckPagedAttention(32, 4, 128, 40, 0, 16);   // a prefill from the start
  CheckPagedAttention(32, 4, 128, 1, 300, 16);  // decode
  CheckPagedAttention(8, 2, 64, 7, 13, 4);      // blocks smaller than a chunk
}

// The sliding window and sinks through the block table, the cache length
// read from the device as a replayed decode graph reads it: decode rows whose
// window starts in an earlier block.
TEST(CudaOpsGpuTest, PagedWindowWithTheCacheLengthOnTheDeviceMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  std::vector<float> sinks(32, 0.5f);
  CheckPagedAttention(32, 4, 128, 1, 300, 16, AttentionMask{8, &sinks}, /*device_start=*/true);
  CheckPagedAttention(8, 2, 64, 1, 13, 4, AttentionMask{6, nullptr}, /*device_start=*/true);
  CheckPagedAttention(8, 2, 64, 7, 13, 4, AttentionMask{6, nullptr});
}

TEST(CudaOpsArgsTest, PagedOpsRejectBadBlockTablesBeforeLaunching) {
  AttentionShape s;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  EXPECT_EQ(PagedAttention(s, nullptr, 1, nullptr, nullptr, PagedKv{}, 1, true, 0, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // no table
  int32_t fake = 0;
  const PagedKv small{&fake, 16, 16 * 64};  // a block smaller than 16 rows of 128
  EXPECT_EQ(
      PagedAttention(s, nullptr, 1, nullptr, nullptr, small, 1, true, 0, nullptr, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PagedKvWrite(nullptr, 128, 1, 128, nullptr, small, 0, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      PagedKvWrite(nullptr, 128, 1, 128, nullptr, PagedKv{&fake, 16, 16 * 128}, -1, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      PagedKvWrite(nullptr, 128, 0, 128, nullptr, PagedKv{&fake, 16, 16 * 128}, 0, nullptr).ok())
      << "no rows: nothing to launch";
}

// An identity router gate: the CPU routers' logits GEMM returns x exactly,
// so they route given logits.
std::vector<float> Identity(int n) {
  std::vector<float> eye(static_cast<size_t>(n) * n, 0.0f);
  for (int e = 0; e < n; ++e) eye[static_cast<size_t>(e) * n + e] = 1.0f;
  return eye;
}
TensorView IdentityGate(const std::vector<float>& eye, int64_t n) {
  return TensorView{eye.data(), DType::kF32, {n, n}};
}

TEST(CudaOpsGpuTest, RouterTopKMatchesCpuRoute) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 33;
  constexpr int kE = 128, kK = 8;  // Qwen3-VL-30B-A3B
  std::vector<float> logits(kN * kE);
  const auto raw = ToF32(RandomBf16(kN * kE, 13, 4.0f));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = raw[i];
  // cpu::Route with an identity gate: its logits GEMM returns x exactly.
  const std::vector<float> eye = Identity(kE);
  const TensorView gate = IdentityGate(eye, kE);
  for (bool renorm : {true, false}) {
    RouterResult ref;
    cpu::Route(nullptr, logits.data(), kN, kE, gate, kK, renorm, &ref);
    auto dl = Upload(logits);
    auto de = DeviceBuffer::Allocate(kN * kK * sizeof(int32_t));
    auto dw = DeviceBuffer::Allocate(kN * kK * sizeof(float));
    ASSERT_TRUE(dl.ok() && de.ok() && dw.ok());
    ASSERT_OK(MoeRouterTopK(dl->as<float>(), kN, kE, kK, renorm, de->as<int32_t>(), dw->as<float>(),
                            nullptr));
    auto experts = Download<int32_t>(*de, kN * kK);
    auto weights = Download<float>(*dw, kN * kK);
    ASSERT_TRUE(experts.ok() && weights.ok());
    EXPECT_EQ(*experts, std::vector<int32_t>(ref.experts.begin(), ref.experts.end()));
    // fp32 softmax with a different summation order: a few ulp.
    ExpectClose(*weights, ref.weights, 1e-6f, 1e-5f, "router weights");
  }
}

// GPT-OSS's router after its bias: cpu::RouteTopKSoftmax with an identity
// gate and the bias as the Linear's bias, against AddBiasF32 +
// MoeRouterTopKSoftmax on the same logits.
TEST(CudaOpsGpuTest, BiasedTopKSoftmaxRouterMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 21;
  constexpr int kE = 32, kK = 4;  // gpt-oss-20b
  const std::vector<float> logits = ToF32(RandomBf16(kN * kE, 23, 4.0f));
  const std::vector<float> bias = ToF32(RandomBf16(kE, 24, 1.0f));
  const std::vector<float> eye = Identity(kE);
  RouterResult ref;
  cpu::RouteTopKSoftmax(nullptr, logits.data(), kN, kE, IdentityGate(eye, kE),
                        TensorView{bias.data(), DType::kF32, {kE}}, kK, &ref);
  auto dl = Upload(logits);
  auto db = Upload(bias);
  auto de = DeviceBuffer::Allocate(kN * kK * sizeof(int32_t));
  auto dw = DeviceBuffer::Allocate(kN * kK * sizeof(float));
  ASSERT_TRUE(dl.ok() && db.ok() && de.ok() && dw.ok());
  ASSERT_OK(AddBiasF32(dl->as<float>(), kN, kE, db->as<float>(), nullptr));
  ASSERT_OK(MoeRouterTopKSoftmax(dl->as<float>(), kN, kE, kK, de->as<int32_t>(), dw->as<float>(),
                                 nullptr));
  auto biased = Download<float>(*dl, kN * kE);
  auto experts = Download<int32_t>(*de, kN * kK);
  auto weights = Download<float>(*dw, kN * kK);
  ASSERT_TRUE(biased.ok() && experts.ok() && weights.ok());
  EXPECT_EQ(*biased, ref.logits);  // one fp32 add each
  EXPECT_EQ(*experts, std::vector<int32_t>(ref.experts.begin(), ref.experts.end()));
  ExpectClose(*weights, ref.weights, 1e-6f, 1e-5f, "router weights");
  EXPECT_EQ(MoeRouterTopKSoftmax(nullptr, 1, 4, 8, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// DeepSeek's routers: cpu::RouteGroupSoftmax / RouteGroupSigmoid with an
// identity gate against MoeRouterGroup on the same logits -- V2's greedy and
// group-limited softmax (64 experts in 8 groups, 3 kept, top-6, scaled) and
// V3's sigmoid with the selection bias (256 in 8 groups, 4 kept, top-8,
// normalised and scaled), and with one group (no limit).
TEST(CudaOpsGpuTest, GroupRoutersMatchCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 23;
  struct Case {
    int experts, top_k, n_group, topk_group;
    bool sigmoid, group_limited, normalize;
    float scale;
  };
  // Expert counts off the warp's multiple too (DeepSeek-VL2's 72, the fixtures' 8).
  for (const Case& k :
       {Case{64, 6, 8, 3, false, true, false, 2.0f}, Case{64, 6, 1, 1, false, false, false, 1.0f},
        Case{256, 8, 8, 4, true, true, true, 2.5f}, Case{72, 6, 1, 1, true, true, false, 1.5f},
        Case{8, 3, 4, 2, false, true, false, 1.0f}, Case{8, 3, 4, 2, true, true, true, 2.5f}}) {
    SCOPED_TRACE(::testing::Message()
                 << k.experts << " experts, sigmoid " << k.sigmoid << ", groups " << k.n_group);
    const std::vector<float> logits = ToF32(RandomBf16(kN * k.experts, 31 + k.experts, 3.0f));
    const std::vector<float> bias = ToF32(RandomBf16(k.experts, 37, 0.5f));
    const std::vector<float> eye = Identity(k.experts);
    cpu::GroupRouting g{k.top_k, k.n_group, k.topk_group, k.group_limited, k.normalize, k.scale};
    RouterResult ref;
    if (k.sigmoid) {
      cpu::RouteGroupSigmoid(nullptr, logits.data(), kN, k.experts, IdentityGate(eye, k.experts),
                             TensorView{bias.data(), DType::kF32, {k.experts}}, g, &ref);
    } else {
      cpu::RouteGroupSoftmax(nullptr, logits.data(), kN, k.experts, IdentityGate(eye, k.experts), g,
                             &ref);
    }
    auto dl = Upload(logits);
    auto db = Upload(bias);
    auto de = DeviceBuffer::Allocate(kN * k.top_k * sizeof(int32_t));
    auto dw = DeviceBuffer::Allocate(kN * k.top_k * sizeof(float));
    ASSERT_TRUE(dl.ok() && db.ok() && de.ok() && dw.ok());
    GroupRouting d;
    d.top_k = k.top_k;
    d.n_group = k.n_group;
    d.topk_group = k.topk_group;
    d.group_limited = k.group_limited;
    d.sigmoid = k.sigmoid;
    d.bias = k.sigmoid ? db->as<float>() : nullptr;
    d.normalize = k.normalize;
    d.scale = k.scale;
    ASSERT_OK(MoeRouterGroup(dl->as<float>(), kN, k.experts, d, de->as<int32_t>(), dw->as<float>(),
                             nullptr));
    auto experts = Download<int32_t>(*de, kN * k.top_k);
    auto weights = Download<float>(*dw, kN * k.top_k);
    ASSERT_TRUE(experts.ok() && weights.ok());
    EXPECT_EQ(*experts, std::vector<int32_t>(ref.experts.begin(), ref.experts.end()));
    ExpectClose(*weights, ref.weights, 1e-6f, 1e-5f, "router weights");
  }
  GroupRouting bad;
  bad.top_k = 2;
  bad.n_group = 3;  // does not divide 8
  EXPECT_EQ(MoeRouterGroup(nullptr, 1, 8, bad, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  bad.n_group = 4;
  bad.sigmoid = true;  // without a bias
  EXPECT_EQ(MoeRouterGroup(nullptr, 1, 8, bad, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// PhiMoE's sparsemixer: cpu::RouteSparseMixer with an identity gate against
// MoeRouterSparseMixer on the same logits (a wide jitter, so that picks keep
// other candidates in their softmax; tiny-phimoe's 0.01 in
// cuda_families_gpu_test masks most of them).
TEST(CudaOpsGpuTest, SparseMixerRouterMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 19;
  constexpr int kE = 16;  // Phi-3.5-MoE
  constexpr float kJitter = 0.2f;
  const std::vector<float> logits = ToF32(RandomBf16(kN * kE, 27, 2.0f));
  const std::vector<float> eye = Identity(kE);
  RouterResult ref;
  cpu::RouteSparseMixer(nullptr, logits.data(), kN, kE, IdentityGate(eye, kE), kJitter, &ref);
  auto dl = Upload(logits);
  auto de = DeviceBuffer::Allocate(kN * 2 * sizeof(int32_t));
  auto dw = DeviceBuffer::Allocate(kN * 2 * sizeof(float));
  ASSERT_TRUE(dl.ok() && de.ok() && dw.ok());
  ASSERT_OK(MoeRouterSparseMixer(dl->as<float>(), kN, kE, kJitter, de->as<int32_t>(),
                                 dw->as<float>(), nullptr));
  auto experts = Download<int32_t>(*de, kN * 2);
  auto weights = Download<float>(*dw, kN * 2);
  ASSERT_TRUE(experts.ok() && weights.ok());
  EXPECT_EQ(*experts, std::vector<int32_t>(ref.experts.begin(), ref.experts.end()));
  ExpectClose(*weights, ref.weights, 1e-6f, 1e-5f, "sparsemixer weights");
  EXPECT_EQ(MoeRouterSparseMixer(nullptr, 1, 1, kJitter, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// GPT-OSS's clamped SwiGLU on interleaved gate / up columns, values on both
// sides of the limit, against cpu::ExpertForward's formula.
TEST(CudaOpsGpuTest, ClampedSwigluInterleavedMatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 6, kInter = 96;
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  const auto gu = RandomBf16(kRows * 2 * kInter, 25, 12.0f);
  const std::vector<float> guf = ToF32(gu);
  std::vector<float> ref(kRows * kInter);
  for (int64_t i = 0; i < kRows * kInter; ++i) {
    const float gate = std::min(guf[2 * i], kLimit);
    const float up = std::clamp(guf[2 * i + 1], -kLimit, kLimit);
    ref[i] = (up + 1.0f) * (gate / (1.0f + std::exp(-kAlpha * gate)));
  }
  auto dgu = Upload(gu);
  auto dout = DeviceBuffer::Allocate(kRows * kInter * 2);
  ASSERT_TRUE(dgu.ok() && dout.ok());
  ASSERT_OK(ClampedSwigluInterleaved(dgu->as<Bf16>(), kRows, kInter, kAlpha, kLimit,
                                     dout->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dout, kRows * kInter), ref, kBf16Tol, kBf16Tol, "clamped swiglu");
}

TEST(CudaOpsGpuTest, ActivationsMatchCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 8, kInter = 768;  // Qwen3-VL-30B-A3B moe_intermediate_size
  const auto gu = RandomBf16(kRows * 2 * kInter, 14, 6.0f);
  const std::vector<float> guf = ToF32(gu);
  std::vector<float> ref(kRows * kInter);
  for (int64_t r = 0; r < kRows; ++r) {
    cpu::SiluMul(guf.data() + r * 2 * kInter, guf.data() + r * 2 * kInter + kInter, kInter,
                 ref.data() + r * kInter);
  }
  auto dgu = Upload(gu);
  auto dout = DeviceBuffer::Allocate(kRows * kInter * 2);
  ASSERT_TRUE(dgu.ok() && dout.ok());
  ASSERT_OK(SiluMulFused(dgu->as<Bf16>(), kRows, kInter, dout->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dout, kRows * kInter), ref, kBf16Tol, kBf16Tol, "silu_mul_fused");

  // Separate gate/up buffers: the first and second half of the same data.
  constexpr int64_t kHalf = kRows * kInter;
  std::vector<float> ref2(kHalf);
  cpu::SiluMul(guf.data(), guf.data() + kHalf, kHalf, ref2.data());
  ASSERT_OK(SiluMul(dgu->as<Bf16>(), dgu->as<Bf16>() + kHalf, kHalf, dout->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dout, kHalf), ref2, kBf16Tol, kBf16Tol, "silu_mul");

  for (bool tanh_form : {true, false}) {
    std::vector<float> g = guf;
    if (tanh_form) {
      cpu::GeluTanhInPlace(nullptr, g.data(), static_cast<int64_t>(g.size()));
    } else {
      cpu::GeluErfInPlace(nullptr, g.data(), static_cast<int64_t>(g.size()));
    }
    auto dx = Upload(gu);
    ASSERT_TRUE(dx.ok());
    ASSERT_OK(tanh_form ? GeluTanh(dx->as<Bf16>(), static_cast<int64_t>(gu.size()), nullptr)
                        : GeluErf(dx->as<Bf16>(), static_cast<int64_t>(gu.size()), nullptr));
    ExpectClose(DownloadBf16(*dx, gu.size()), g, kBf16Tol, kBf16Tol,
                tanh_form ? "gelu_tanh" : "gelu_erf");
  }
}

TEST(CudaOpsGpuTest, BiasAndResidualAdds) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 5, kCols = 300;
  const auto y = RandomBf16(kRows * kCols, 15, 3.0f);
  const auto bias = RandomBf16(kCols, 16, 1.0f);
  const auto other = RandomBf16(kRows * kCols, 17, 3.0f);
  std::vector<float> ref_bias = ToF32(y), ref_add(kRows * kCols);
  const std::vector<float> bf = ToF32(bias), of = ToF32(other), yf = ToF32(y);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    ref_bias[i] += bf[i % kCols];
    ref_add[i] = yf[i] + of[i];
  }
  auto dy = Upload(y);
  auto db = Upload(bias);
  auto dother = Upload(other);
  auto dsum = DeviceBuffer::Allocate(kRows * kCols * 2);
  ASSERT_TRUE(dy.ok() && db.ok() && dother.ok() && dsum.ok());
  ASSERT_OK(Add(dy->as<Bf16>(), dother->as<Bf16>(), kRows * kCols, dsum->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dsum, kRows * kCols), ref_add, kBf16Tol, kBf16Tol, "add");
  ASSERT_OK(AddBias(dy->as<Bf16>(), kRows, kCols, db->as<Bf16>(), nullptr));
  ExpectClose(DownloadBf16(*dy, kRows * kCols), ref_bias, kBf16Tol, kBf16Tol, "add_bias");
}

// FP8 experts widened on the device: each weight the bf16 rounding of the
// fp32 value cpu::DequantizeF8 gives (partial edge blocks, both scale
// dtypes), a NaN code NaN.
TEST(CudaOpsGpuTest, DequantizeE4m3MatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 45, kCols = 40, kBr = 16, kBc = 16;
  const int64_t sr = (kRows + kBr - 1) / kBr, sc = (kCols + kBc - 1) / kBc;
  const std::vector<float> values = ToF32(RandomBf16(kRows * kCols, 29, 400.0f));
  std::vector<uint8_t> q;
  for (float v : values) q.push_back(FloatToE4m3(v));
  q[7] = 0x7f;  // NaN
  const std::vector<float> scales_f32 = ToF32(RandomBf16(sr * sc, 30, 0.01f));
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 scales" : "f32 scales");
    std::vector<float> s32(scales_f32.size());
    std::vector<uint16_t> s16(scales_f32.size());
    for (size_t i = 0; i < s32.size(); ++i) {
      s32[i] = std::fabs(scales_f32[i]) + 1.0f / 4096;
      s16[i] = FloatToBf16(s32[i]);
      if (bf16) s32[i] = Bf16ToFloat(s16[i]);
    }
    const TensorView view{q.data(),
                          DType::kF8E4M3,
                          {kRows, kCols},
                          {bf16 ? static_cast<const void*>(s16.data()) : s32.data(),
                           bf16 ? DType::kBF16 : DType::kF32, kBr, kBc}};
    const std::vector<float> ref = cpu::DequantizeF8(view);
    auto dq = Upload(q);
    auto ds32 = Upload(s32);
    auto ds16 = Upload(s16);
    auto dout = DeviceBuffer::Allocate(kRows * kCols * 2);
    ASSERT_TRUE(dq.ok() && ds32.ok() && ds16.ok() && dout.ok());
    ASSERT_OK(DequantizeE4m3(dq->as<uint8_t>(), kRows, kCols,
                             bf16 ? static_cast<const void*>(ds16->as<uint16_t>())
                                  : static_cast<const void*>(ds32->as<float>()),
                             bf16, kBr, kBc, dout->as<Bf16>(), nullptr));
    auto got = Download<uint16_t>(*dout, kRows * kCols);
    ASSERT_TRUE(got.ok());
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(Bf16ToFloat((*got)[i]))) << "element " << i;
      } else {
        EXPECT_EQ((*got)[i], FloatToBf16(ref[i])) << "element " << i;
      }
    }
  }
  EXPECT_EQ(DequantizeE4m3(nullptr, 0, 1, nullptr, false, 1, 1, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// GPT-OSS's MXFP4 experts widened on the device: exactly the values the CPU
// kernels decode (e2m1 times 2^(e - 127) fits bf16), every nibble and a
// spread of scales, the e8m0 NaN scale included.
TEST(CudaOpsGpuTest, DequantizeMxfp4MatchesCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 6, kCols = 64;
  std::vector<uint8_t> blocks(kRows * kCols / 2), scales(kRows * kCols / 32);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(100 + 7 * i);
  scales[3] = 0xff;  // NaN
  scales[4] = 0;     // 2^-127
  const TensorView view{
      blocks.data(), DType::kMxFp4, {kRows, kCols}, {scales.data(), DType::kE8M0, 1, 32}};
  std::vector<float> ref(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const uint8_t nibble = (blocks[r * kCols / 2 + c / 2] >> (4 * (c % 2))) & 15;
      ref[r * kCols + c] = E2m1ToFloat(nibble) * E8m0ToFloat(scales[r * kCols / 32 + c / 32]);
    }
  }
  auto db = Upload(blocks);
  auto ds = Upload(scales);
  auto dout = DeviceBuffer::Allocate(kRows * kCols * 2);
  ASSERT_TRUE(db.ok() && ds.ok() && dout.ok());
  ASSERT_OK(DequantizeMxfp4(db->as<uint8_t>(), kRows, kCols, ds->as<uint8_t>(), dout->as<Bf16>(),
                            nullptr));
  auto got = Download<uint16_t>(*dout, kRows * kCols);
  ASSERT_TRUE(got.ok());
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    if (std::isnan(ref[i])) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat((*got)[i]))) << "element " << i;
    } else {
      EXPECT_EQ(Bf16ToFloat((*got)[i]), ref[i]) << "element " << i;  // exact
    }
  }
  EXPECT_EQ(DequantizeMxfp4(nullptr, 1, 48, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// OLMoE's clip_qkv: bf16 values clamped exactly (no arithmetic), NaN kept
// as std::clamp keeps it, infinities clamped.
TEST(CudaOpsGpuTest, ClampMatchesStdClamp) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 1000;
  auto x = RandomBf16(kN, 19, 6.0f);
  x[3] = FloatToBf16(std::numeric_limits<float>::quiet_NaN());
  x[4] = FloatToBf16(std::numeric_limits<float>::infinity());
  x[5] = FloatToBf16(-std::numeric_limits<float>::infinity());
  auto dx = Upload(x);
  ASSERT_TRUE(dx.ok());
  ASSERT_OK(Clamp(dx->as<Bf16>(), kN, 2.5f, nullptr));
  const std::vector<float> got = DownloadBf16(*dx, kN);
  const std::vector<float> in = ToF32(x);
  ASSERT_EQ(got.size(), in.size());
  EXPECT_TRUE(std::isnan(got[3]));
  for (int64_t i = 0; i < kN; ++i) {
    if (i == 3) continue;
    EXPECT_EQ(got[i], std::clamp(in[i], -2.5f, 2.5f)) << "element " << i;
  }
}

TEST(CudaOpsGpuTest, EmbeddingGatherScatterAndDeepStackAdd) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kVocab = 50, kSeq = 12, kVis = 4;
  constexpr int kHidden = 96;
  const auto table = RandomBf16(kVocab * kHidden, 18, 1.0f);
  const std::vector<int32_t> ids = {3, 0, 49, 7, 7, 12, 60 /* out of range */, 1, 2, 3, 4, 5};
  auto dt = Upload(table);
  auto dids = Upload(ids);
  auto dseq = DeviceBuffer::Allocate(kSeq * kHidden * 2);
  ASSERT_TRUE(dt.ok() && dids.ok() && dseq.ok());
  ASSERT_OK(EmbeddingGather(dt->as<Bf16>(), kVocab, kHidden, dids->as<int32_t>(), kSeq,
                            dseq->as<Bf16>(), nullptr));
  auto seq = Download<uint16_t>(*dseq, kSeq * kHidden);
  ASSERT_TRUE(seq.ok());
  for (int64_t i = 0; i < kSeq; ++i) {
    for (int c = 0; c < kHidden; ++c) {
      const uint16_t want = ids[i] < kVocab ? table[ids[i] * kHidden + c] : 0;
      ASSERT_EQ((*seq)[i * kHidden + c], want) << "token " << i << " col " << c;
    }
  }
  // Visual tokens land at positions 5..8; then DeepStack features add there.
  const auto vis = RandomBf16(kVis * kHidden, 19, 1.0f);
  const auto deep = RandomBf16(kVis * kHidden, 20, 1.0f);
  const std::vector<int32_t> positions = {5, 6, 7, 8};
  auto dvis = Upload(vis);
  auto ddeep = Upload(deep);
  auto dpos = Upload(positions);
  ASSERT_TRUE(dvis.ok() && ddeep.ok() && dpos.ok());
  ASSERT_OK(ScatterRows(dvis->as<Bf16>(), kVis, kHidden, dpos->as<int32_t>(), dseq->as<Bf16>(),
                        kSeq, nullptr));
  ASSERT_OK(AddRowsAt(ddeep->as<Bf16>(), kVis, kHidden, dpos->as<int32_t>(), dseq->as<Bf16>(), kSeq,
                      nullptr));
  std::vector<float> ref = ToF32(*seq);
  const std::vector<float> visf = ToF32(vis), deepf = ToF32(deep);
  for (int64_t m = 0; m < kVis; ++m) {
    for (int c = 0; c < kHidden; ++c) {
      ref[positions[m] * kHidden + c] = visf[m * kHidden + c] + deepf[m * kHidden + c];
    }
  }
  ExpectClose(DownloadBf16(*dseq, kSeq * kHidden), ref, kBf16Tol, kBf16Tol, "scatter+deepstack");
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
