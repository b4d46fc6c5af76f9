// PagedAttention reads keys and values through a block table; over the same
// rows it must give Attention's results bit for bit (the decoder's cache is
// paged, and batched, preempted and lone sequences must agree exactly).
#include "engine/ops/cpu/attention.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "gtest/gtest.h"

namespace vismoe::cpu {
namespace {

struct Case {
  int heads, kv_heads, head_dim;
  int64_t nq, nk, block_rows;
  bool causal;
};

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(PagedAttentionTest, MatchesContiguousAttentionBitForBit) {
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

}  // namespace
}  // namespace vismoe::cpu
