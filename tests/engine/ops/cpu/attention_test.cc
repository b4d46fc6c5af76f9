// PagedAttention reads keys and values through a block table; over the same
// rows it must give Attention's results bit for bit (the decoder's cache is
// paged, and batched, preempted and lone sequences must agree exactly), on
// every kernel path. Each path is within fp32 rounding of a double-precision
// reference, and a query row's bits do not depend on the other rows.
#include "engine/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu/kernel_dispatch.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_kernel_path.h"

namespace vismoe::cpu {
namespace {

struct Case {
  int heads, kv_heads, head_dim;
  int64_t nq, nk, block_rows;
  bool causal;
};

using ScopedPath = testing::ScopedKernelPath;

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(PagedAttentionTest, MatchesContiguousAttentionBitForBit) {
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    SCOPED_TRACE(KernelPathName(path));
    ThreadPool pool(2);
    std::mt19937 rng(7);
    for (const Case& c : {Case{4, 2, 16, 1, 37, 16, true}, Case{4, 4, 8, 9, 9, 4, true},
                          Case{8, 2, 32, 5, 70, 16, true}, Case{2, 1, 8, 6, 33, 8, false},
                          Case{6, 3, 4, 3, 16, 16, true}}) {
      SCOPED_TRACE(::testing::Message() << "heads " << c.heads << " nq " << c.nq << " nk " << c.nk
                                        << " block " << c.block_rows);
      const int64_t kvd = int64_t{c.kv_heads} * c.head_dim;
      const int64_t qd = int64_t{c.heads} * c.head_dim;
      const std::vector<float> q = Random(c.nq * qd, rng);
      const std::vector<float> k = Random(c.nk * kvd, rng);
      const std::vector<float> v = Random(c.nk * kvd, rng);
      // The same rows scattered over shuffled blocks of a larger pool.
      const int64_t nblocks = (c.nk + c.block_rows - 1) / c.block_rows;
      std::vector<int32_t> table(nblocks);
      for (int64_t b = 0; b < nblocks; ++b) table[b] = static_cast<int32_t>(2 * b + 1);
      std::shuffle(table.begin(), table.end(), rng);
      const int64_t block_stride = c.block_rows * kvd;
      std::vector<float> pk(2 * nblocks * block_stride + block_stride, -9.0f), pv = pk;
      for (int64_t j = 0; j < c.nk; ++j) {
        const int64_t at = table[j / c.block_rows] * block_stride + (j % c.block_rows) * kvd;
        std::copy_n(k.data() + j * kvd, kvd, pk.data() + at);
        std::copy_n(v.data() + j * kvd, kvd, pv.data() + at);
      }
      const AttentionShape shape{c.heads, c.kv_heads, c.head_dim, 0, 0};
      const int64_t q_pos0 = c.causal ? c.nk - c.nq : 0;
      std::vector<float> want(c.nq * qd), got(c.nq * qd);
      Attention(&pool, shape, q.data(), c.nq, k.data(), v.data(), c.nk, c.causal, q_pos0,
                want.data());
      const PagedKv paged{pk.data(), pv.data(), table.data(), c.block_rows, block_stride};
      PagedAttention(&pool, shape, q.data(), c.nq, paged, c.nk, c.causal, q_pos0, got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    }
  }
}

// out[i, h] in double precision (the definition in attention.h).
std::vector<double> Reference(const Case& c, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              int64_t q_pos0) {
  const int64_t kvd = int64_t{c.kv_heads} * c.head_dim, qd = int64_t{c.heads} * c.head_dim;
  const int group = c.heads / c.kv_heads;
  std::vector<double> out(c.nq * qd, 0.0);
  for (int64_t i = 0; i < c.nq; ++i) {
    for (int h = 0; h < c.heads; ++h) {
      const int64_t visible = c.causal ? std::min(c.nk, q_pos0 + i + 1) : c.nk;
      const int64_t g = h / group;
      std::vector<double> s(visible);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (int t = 0; t < c.head_dim; ++t) {
          dot += double{q[i * qd + h * c.head_dim + t]} * k[j * kvd + g * c.head_dim + t];
        }
        s[j] = dot / std::sqrt(static_cast<double>(c.head_dim));
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += x = std::exp(x - mx);
      for (int64_t j = 0; j < visible; ++j) {
        for (int t = 0; t < c.head_dim; ++t) {
          out[i * qd + h * c.head_dim + t] += s[j] / sum * v[j * kvd + g * c.head_dim + t];
        }
      }
    }
  }
  return out;
}

// Head dims with and without a multiple-of-8 (and of 16) part and a tail.
TEST(AttentionTest, EveryPathMatchesADoubleReferenceAndRowsStandAlone) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  for (KernelPath path : AvailableKernelPaths()) {
    ScopedPath scoped(path);
    for (const Case& c : {Case{4, 2, 64, 7, 40, 0, true}, Case{2, 1, 13, 5, 21, 0, true},
                          Case{3, 3, 24, 6, 6, 0, false}, Case{2, 2, 8, 3, 50, 0, true}}) {
      SCOPED_TRACE(::testing::Message() << KernelPathName(path) << " head_dim " << c.head_dim
                                        << " nq " << c.nq << " nk " << c.nk);
      const int64_t kvd = int64_t{c.kv_heads} * c.head_dim, qd = int64_t{c.heads} * c.head_dim;
      const std::vector<float> q = Random(c.nq * qd, rng);
      const std::vector<float> k = Random(c.nk * kvd, rng);
      const std::vector<float> v = Random(c.nk * kvd, rng);
      const int64_t q_pos0 = c.causal ? c.nk - c.nq : 0;
      const AttentionShape shape{c.heads, c.kv_heads, c.head_dim, 0, 0};
      std::vector<float> got(c.nq * qd);
      Attention(&pool, shape, q.data(), c.nq, k.data(), v.data(), c.nk, c.causal, q_pos0,
                got.data());
      const std::vector<double> want = Reference(c, q, k, v, q_pos0);
      for (size_t x = 0; x < got.size(); ++x) ASSERT_NEAR(got[x], want[x], 2e-5) << "element " << x;
      // The last query row alone (as a decode step computes it): the same bits.
      std::vector<float> last(qd);
      Attention(nullptr, shape, q.data() + (c.nq - 1) * qd, 1, k.data(), v.data(), c.nk, c.causal,
                q_pos0 + c.nq - 1, last.data());
      EXPECT_EQ(std::memcmp(last.data(), got.data() + (c.nq - 1) * qd, qd * sizeof(float)), 0);
    }
  }
}

}  // namespace
}  // namespace vismoe::cpu
