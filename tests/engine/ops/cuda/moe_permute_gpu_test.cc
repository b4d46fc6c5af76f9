// The MoE token permutation (engine/ops/cuda/moe_permute.h) against a host
// model: BuildMoePermutation must equal a stable sort of the (token, slot)
// assignments by expert, PermuteRows is an exact bf16 gather, and
// UnpermuteCombine is the fp32 weighted sum over slots rounded once to bf16.
// Expert outputs, residuals and weights are drawn on coarse grids (multiples
// of 2^-7 and 2^-6) so every product and partial sum is exact in fp32: the
// result is then bit-exact whatever the summation order or FMA contraction,
// and any extra rounding, wrong row or wrong weight shows up as a mismatch.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA

TEST(MoePermuteGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#else

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/moe_permute.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using testing::Download;
using testing::ToF32;
using testing::Upload;

constexpr int kExperts = 128;  // Qwen3-VL-30B-A3B
constexpr int kTopK = 8;

// top_k distinct experts per token, as the router returns them.
std::vector<int32_t> RandomRouting(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> all(kExperts);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int32_t> ids(n * kTopK);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), kTopK, ids.begin() + t * kTopK);
  }
  return ids;
}

// Expert 127 (the last block) in every token at a random slot, the others
// from a pool of 9: expert 0 and most others get no rows, and 127 gets n
// rows, more than one 256-assignment chunk of the scatter kernel.
std::vector<int32_t> SkewedRouting(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> pool = {1, 2, 3, 63, 64, 65, 100, 125, 126};
  std::vector<int32_t> ids(n * kTopK);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    std::copy_n(pool.begin(), kTopK, ids.begin() + t * kTopK);
    ids[t * kTopK + static_cast<int64_t>(rng() % kTopK)] = kExperts - 1;
  }
  return ids;
}

// Uniform multiples of `step` in [-limit, limit] as bf16 bits; exact in bf16
// when limit / step <= 256.
std::vector<uint16_t> GridBf16(size_t count, uint32_t seed, float step, int limit_steps) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-limit_steps, limit_steps);
  std::vector<uint16_t> out(count);
  for (auto& v : out) v = FloatToBf16(static_cast<float>(dist(rng)) * step);
  return out;
}

struct HostPermutation {
  std::vector<int32_t> counts, offsets, row_token, slot_row;
};

// Stable sort of the assignments i = token * top_k + slot by expert: rows of
// one expert in ascending (token, slot) order.
HostPermutation SortByExpert(const std::vector<int32_t>& ids) {
  HostPermutation p;
  p.counts.assign(kExperts, 0);
  for (int32_t e : ids) ++p.counts[e];
  p.offsets.assign(kExperts + 1, 0);
  for (int e = 0; e < kExperts; ++e) p.offsets[e + 1] = p.offsets[e] + p.counts[e];
  std::vector<int32_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  p.row_token.resize(ids.size());
  p.slot_row.resize(ids.size());
  for (size_t r = 0; r < order.size(); ++r) {
    p.row_token[r] = order[r] / kTopK;
    p.slot_row[order[r]] = static_cast<int32_t>(r);
  }
  return p;
}

// EXPECT_EQ on the vectors would print only their first 32 entries; this
// names the first differing index.
void ExpectSameInts(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                    const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  if (diff.first == got.end()) return;
  ADD_FAILURE() << what << "[" << (diff.first - got.begin()) << "]: got " << *diff.first << " want "
                << *diff.second;
}

// Runs the three kernels in the order the MoE layer does, on the device's own
// permutation, and checks each against the host model.
void CheckPermutation(const std::vector<int32_t>& ids, int hidden) {
  const int64_t n = static_cast<int64_t>(ids.size()) / kTopK;
  const int64_t rows = n * kTopK;
  const HostPermutation want = SortByExpert(ids);

  // Outputs start poisoned (-1), so an unwritten entry cannot pass.
  const std::vector<int32_t> poison(rows, -1);
  auto dids = Upload(ids);
  auto dcounts = Upload(std::vector<int32_t>(kExperts, -1));
  auto doffsets = Upload(std::vector<int32_t>(kExperts + 1, -1));
  auto drow_token = Upload(poison);
  auto dslot_row = Upload(poison);
  ASSERT_TRUE(dids.ok() && dcounts.ok() && doffsets.ok() && drow_token.ok() && dslot_row.ok());
  ASSERT_OK(BuildMoePermutation(dids->as<int32_t>(), n, kTopK, kExperts, dcounts->as<int32_t>(),
                                doffsets->as<int32_t>(), drow_token->as<int32_t>(),
                                dslot_row->as<int32_t>(), nullptr));
  auto counts = Download<int32_t>(*dcounts, kExperts);
  auto offsets = Download<int32_t>(*doffsets, kExperts + 1);
  auto row_token = Download<int32_t>(*drow_token, rows);
  auto slot_row = Download<int32_t>(*dslot_row, rows);
  ASSERT_TRUE(counts.ok() && offsets.ok() && row_token.ok() && slot_row.ok());
  ExpectSameInts(*counts, want.counts, "expert_counts");
  ExpectSameInts(*offsets, want.offsets, "expert_offsets");
  ExpectSameInts(*row_token, want.row_token, "row_token");
  ExpectSameInts(*slot_row, want.slot_row, "slot_row");
  if (::testing::Test::HasFailure()) return;  // the checks below assume this permutation

  // PermuteRows: a pure gather, bit-exact.
  const std::vector<uint16_t> x = testing::RandomBf16(n * hidden, 40, 3.0f);
  auto dx = Upload(x);
  auto dxp = DeviceBuffer::Allocate(rows * hidden * sizeof(Bf16));
  ASSERT_TRUE(dx.ok() && dxp.ok());
  ASSERT_OK(PermuteRows(dx->as<Bf16>(), hidden, drow_token->as<int32_t>(), rows, dxp->as<Bf16>(),
                        nullptr));
  auto xp = Download<uint16_t>(*dxp, rows * hidden);
  ASSERT_TRUE(xp.ok());
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < hidden; ++c) {
      const uint16_t w = x[static_cast<int64_t>(want.row_token[r]) * hidden + c];
      if ((*xp)[r * hidden + c] != w && bad++ == 0) {
        ADD_FAILURE() << "permuted row " << r << " col " << c << ": got " << (*xp)[r * hidden + c]
                      << " want " << w;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "PermuteRows mismatches";

  // UnpermuteCombine. Expert outputs: multiples of 2^-7 in [-2, 2]; weights:
  // multiples of 2^-6 in (0, 1/4]; the residual: multiples of 2^-7 in [-2, 2].
  // Products are multiples of 2^-13 below 1/2, sums stay below 8: at most 16
  // significant bits, exact in fp32.
  const std::vector<uint16_t> yp = GridBf16(rows * hidden, 41, 1.0f / 128, 256);
  const std::vector<uint16_t> residual = GridBf16(n * hidden, 42, 1.0f / 128, 256);
  std::vector<float> weights(rows);
  std::mt19937 rng(43);
  for (float& w : weights) w = static_cast<float>(1 + rng() % 16) / 64.0f;
  const std::vector<float> ypf = ToF32(yp), resf = ToF32(residual);
  auto dyp = Upload(yp);
  auto dw = Upload(weights);
  ASSERT_TRUE(dyp.ok() && dw.ok());
  for (bool accumulate : {false, true}) {
    // Overwriting must ignore y: it starts as NaN then.
    auto dy = Upload(accumulate ? residual : std::vector<uint16_t>(n * hidden, 0x7fc0));
    ASSERT_TRUE(dy.ok());
    ASSERT_OK(UnpermuteCombine(dyp->as<Bf16>(), dslot_row->as<int32_t>(), dw->as<float>(), n, kTopK,
                               hidden, accumulate, dy->as<Bf16>(), nullptr));
    auto y = Download<uint16_t>(*dy, n * hidden);
    ASSERT_TRUE(y.ok());
    bad = 0;
    for (int64_t t = 0; t < n; ++t) {
      for (int c = 0; c < hidden; ++c) {
        float acc = 0.0f;  // slot order, as the contract states
        for (int s = 0; s < kTopK; ++s) {
          const int64_t r = want.slot_row[t * kTopK + s];
          acc += weights[t * kTopK + s] * ypf[r * hidden + c];
        }
        if (accumulate) acc += resf[t * hidden + c];
        const uint16_t w = FloatToBf16(acc);
        if ((*y)[t * hidden + c] != w && bad++ == 0) {
          ADD_FAILURE() << "accumulate=" << accumulate << " token " << t << " col " << c << ": got "
                        << Bf16ToFloat((*y)[t * hidden + c]) << " want " << Bf16ToFloat(w);
        }
      }
    }
    EXPECT_EQ(bad, 0) << "UnpermuteCombine mismatches, accumulate=" << accumulate;
  }
}

TEST(MoePermuteGpuTest, RandomRoutingManyTokens) {
  VISMOE_SKIP_WITHOUT_GPU();
  // 2400 assignments: ten chunks of the scatter kernel, the last one partial.
  CheckPermutation(RandomRouting(300, 1), 2048);
}

TEST(MoePermuteGpuTest, AtMostOneChunkOfAssignments) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckPermutation(RandomRouting(1, 2), 2048);  // decode: 8 assignments
  CheckPermutation(RandomRouting(31, 3), 100);  // 248, a partial chunk
  CheckPermutation(RandomRouting(32, 4), 300);  // exactly 256
}

TEST(MoePermuteGpuTest, EmptyExpertsAndOneHotExpert) {
  VISMOE_SKIP_WITHOUT_GPU();
  CheckPermutation(SkewedRouting(300, 5), 2048);
}

TEST(MoePermuteGpuTest, MoreRowsThanTheGridCap) {
  VISMOE_SKIP_WITHOUT_GPU();
  // 8300 * 8 = 66400 permuted rows > the 65535-block cap: the gather strides.
  CheckPermutation(RandomRouting(8300, 6), 64);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
