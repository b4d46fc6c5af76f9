// The multi-head latent attention kernels (engine/ops/cuda/latent_attention.h)
// one by one, so a DeepSeek failure on the GPU names its kernel:
// - RopeHeads on the rope parts of q's heads (head stride nope + rope) and of
//   the latent rows, interleaved pairs and rotate_half, with YaRN's scale,
//   against cpu::ApplyRopePairs / ApplyRope on the same table; the nope parts
//   untouched;
// - LatentAbsorbQuery + LatentPagedAttention + LatentExpandOutput against the
//   attention written the way transformers computes it (every cached latent
//   expanded through kv_b_proj into keys and values), in double, over a paged
//   cache whose blocks are out of order, with the cache length on the host
//   and on the device;
// - the shape checks, on the host before any launch (run anywhere).
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(LatentAttentionGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/ops/cpu/rope.h"
#include "engine/ops/cuda/latent_attention.h"
#include "engine/ops/cuda/rope.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using testing::Download;
using testing::ExpectClose;
using testing::MaxAbs;
using testing::RandomBf16;
using testing::ToF32;
using testing::Upload;

std::vector<float> DownloadBf16(const DeviceBuffer& buf, size_t n) {
  absl::StatusOr<std::vector<uint16_t> > v = Download<uint16_t>(buf, n);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? ToF32(*v) : std::vector<float>(n, NAN);
}

TEST(LatentAttentionGpuTest, RopeHeadsRotatesTheRopePartsAsTheCpu) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 9;
  constexpr int kHeads = 3, kNope = 16, kRope = 8, kStride = kHeads * (kNope + kRope);
  constexpr float kScale = 1.2f;  // YaRN's attention factor
  std::vector<int64_t> pos(kN);
  for (int64_t i = 0; i < kN; ++i) pos[i] = 5 * i + 2;
  const std::vector<float> inv = RopeInvFreq(kRope, 10000.0);
  cpu::RopeTable table = cpu::BuildRopeTable(pos.data(), kN, kRope, inv);
  cpu::ScaleRopeRows(&table, 0, kN, kScale);
  for (bool interleave : {true, false}) {
    SCOPED_TRACE(interleave ? "interleaved pairs" : "rotate_half");
    const auto x = RandomBf16(kN * kStride, 41, 2.0f);
    std::vector<float> ref = ToF32(x);
    std::vector<float> rope(kN * kHeads * kRope);
    for (int64_t i = 0; i < kN; ++i) {
      for (int h = 0; h < kHeads; ++h) {
        std::copy_n(ref.begin() + i * kStride + h * (kNope + kRope) + kNope, kRope,
                    rope.begin() + (i * kHeads + h) * kRope);
      }
    }
    (interleave ? cpu::ApplyRopePairs : cpu::ApplyRope)(nullptr, table, rope.data(), kN, kHeads,
                                                        kRope, kHeads * kRope);
    for (int64_t i = 0; i < kN; ++i) {
      for (int h = 0; h < kHeads; ++h) {
        std::copy_n(rope.begin() + (i * kHeads + h) * kRope, kRope,
                    ref.begin() + i * kStride + h * (kNope + kRope) + kNope);
      }
    }
    auto dx = Upload(x);
    auto dpos = Upload(pos);
    auto dinv = Upload(inv);
    ASSERT_TRUE(dx.ok() && dpos.ok() && dinv.ok());
    ASSERT_OK(RopeHeads(dx->as<Bf16>(), kN, kHeads, kNope + kRope, kNope, kRope, kStride,
                        interleave, dpos->as<int64_t>(), dinv->as<float>(), kScale, nullptr));
    const std::vector<float> got = DownloadBf16(*dx, kN * kStride);
    ExpectClose(got, ref, 1e-2f, 1e-2f, "rope parts");
    for (int64_t i = 0; i < kN; ++i) {  // the nope parts are not touched at all
      for (int h = 0; h < kHeads; ++h) {
        for (int d = 0; d < kNope; ++d) {
          const int64_t at = i * kStride + h * (kNope + kRope) + d;
          ASSERT_EQ(got[at], Bf16ToFloat(x[at])) << "row " << i << " head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST(LatentAttentionGpuTest, AbsorbedAttentionMatchesTheExpandedOne) {
  VISMOE_SKIP_WITHOUT_GPU();
  LatentShape s;
  s.num_heads = 4;
  s.rank = 64;
  s.nope_dim = 16;
  s.rope_dim = 8;
  s.v_dim = 24;
  s.scale = 0.17f;
  constexpr int64_t kStart = 5, kN = 4, kBlockRows = 4;
  const int64_t tokens = kStart + kN, re = s.row_elems(), qs = s.q_stride();
  const std::vector<int32_t> table = {2, 0, 1};  // token t in block table[t / 4]
  const auto q = RandomBf16(kN * qs, 51, 1.0f);
  const auto kv_b = RandomBf16(int64_t{s.num_heads} * (s.nope_dim + s.v_dim) * s.rank, 52, 0.2f);
  const auto rows = RandomBf16(tokens * re, 53, 1.0f);  // every token's [latent | rope key]
  std::vector<uint16_t> cache(table.size() * kBlockRows * re, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(rows.begin() + t * re, re,
                cache.begin() + (table[t / kBlockRows] * kBlockRows + t % kBlockRows) * re);
  }
  // The reference: keys and values expanded, then plain softmax attention.
  const std::vector<float> qf = ToF32(q), wf = ToF32(kv_b), rf = ToF32(rows);
  const int64_t dn = s.nope_dim, dv = s.v_dim, dr = s.rope_dim, r = s.rank;
  std::vector<float> ref(kN * s.num_heads * dv);
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t h = 0; h < s.num_heads; ++h) {
      const float* qh = qf.data() + i * qs + h * (dn + dr);
      auto expand = [&](int64_t row, int64_t t) {  // row of kv_b's head h times latent t
        double acc = 0;
        for (int64_t j = 0; j < r; ++j) {
          acc += double{wf[(h * (dn + dv) + row) * r + j]} * rf[t * re + j];
        }
        return acc;
      };
      const int64_t visible = kStart + i + 1;
      std::vector<double> p(visible);
      for (int64_t t = 0; t < visible; ++t) {
        double d = 0;
        for (int64_t e = 0; e < dn; ++e) d += double{qh[e]} * expand(e, t);
        for (int64_t e = 0; e < dr; ++e) d += double{qh[dn + e]} * rf[t * re + r + e];
        p[t] = d * s.scale;
      }
      const double mx = *std::max_element(p.begin(), p.end());
      double z = 0;
      for (double& e : p) z += (e = std::exp(e - mx));
      for (int64_t e = 0; e < dv; ++e) {
        double o = 0;
        for (int64_t t = 0; t < visible; ++t) o += p[t] / z * expand(dn + e, t);
        ref[(i * s.num_heads + h) * dv + e] = static_cast<float>(o);
      }
    }
  }
  auto dq = Upload(q);
  auto dw = Upload(kv_b);
  auto dcache = Upload(cache);
  auto dtable = Upload(table);
  auto dstart = Upload(std::vector<int32_t>{static_cast<int32_t>(kStart)});
  auto q_abs = DeviceBuffer::Allocate(kN * s.num_heads * r * sizeof(float));
  auto o_lat = DeviceBuffer::Allocate(kN * s.num_heads * r * sizeof(float));
  auto out = DeviceBuffer::Allocate(kN * s.num_heads * dv * sizeof(Bf16));
  ASSERT_TRUE(dq.ok() && dw.ok() && dcache.ok() && dtable.ok() && dstart.ok() && q_abs.ok() &&
              o_lat.ok() && out.ok());
  for (bool device_start : {false, true}) {
    SCOPED_TRACE(device_start ? "cache length on the device" : "cache length on the host");
    const PagedKv paged{dtable->as<int32_t>(), kBlockRows, kBlockRows * re,
                        device_start ? dstart->as<int32_t>() : nullptr};
    ASSERT_OK(MemsetAsync(out->data(), 0, out->size(), nullptr));
    ASSERT_OK(
        LatentAbsorbQuery(s, dq->as<Bf16>(), kN, dw->as<Bf16>(), q_abs->as<float>(), nullptr));
    ASSERT_OK(LatentPagedAttention(s, q_abs->as<float>(), dq->as<Bf16>(), kN, dcache->as<Bf16>(),
                                   paged, device_start ? 0 : kStart, o_lat->as<float>(), nullptr));
    ASSERT_OK(
        LatentExpandOutput(s, o_lat->as<float>(), kN, dw->as<Bf16>(), out->as<Bf16>(), nullptr));
    const std::vector<float> got = DownloadBf16(*out, ref.size());
    ExpectClose(got, ref, 1e-2f * MaxAbs(ref), 1e-2f, "latent attention output");
  }
}

TEST(LatentAttentionArgsTest, RejectShapesTheKernelsDoNotTake) {
  LatentShape s;
  s.num_heads = 4;
  s.rank = 64;
  s.nope_dim = 16;
  s.rope_dim = 8;
  s.v_dim = 24;
  EXPECT_TRUE(CheckLatentShape(s).ok());
  LatentShape bad = s;
  bad.rank = 40;  // not a multiple of 32
  EXPECT_EQ(CheckLatentShape(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = s;
  bad.rank = kMaxLatentRank + 32;
  EXPECT_EQ(CheckLatentShape(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = s;
  bad.rope_dim = 7;  // odd
  EXPECT_EQ(CheckLatentShape(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = s;
  bad.rope_dim = kMaxLatentRopeDim + 2;
  EXPECT_EQ(CheckLatentShape(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LatentAbsorbQuery(bad, nullptr, 1, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeHeads(nullptr, 1, 1, 8, 0, 7, 8, true, nullptr, nullptr, 1.0f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const PagedKv unpaged{};
  EXPECT_EQ(
      LatentPagedAttention(s, nullptr, nullptr, 1, nullptr, unpaged, 0, nullptr, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
