#include "engine/backend/kv_cache.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/backend/kv_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

TEST(KvPoolTest, HandsOutAndTakesBackBlocks) {
  KvPool pool(/*num_layers=*/2, /*total_blocks=*/4, /*block_tokens=*/16, /*row_elems=*/8);
  EXPECT_EQ(pool.free_blocks(), 4);
  EXPECT_EQ(pool.BlocksFor(0), 0);
  EXPECT_EQ(pool.BlocksFor(16), 1);
  EXPECT_EQ(pool.BlocksFor(17), 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.Allocate(3, &a).ok());
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  absl::Status st = pool.Allocate(2, &b);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("1 of 4 free"));
  EXPECT_TRUE(b.empty()) << "a refused allocation takes nothing";
  EXPECT_EQ(pool.used_blocks(), 3);
  pool.Free(a);
  EXPECT_EQ(pool.free_blocks(), 4);
  ASSERT_TRUE(pool.Allocate(4, &b).ok());
  EXPECT_EQ(b[0], 0) << "a cache's first block is handed out first again";
  EXPECT_EQ(pool.bytes(), 4 * pool.block_bytes());
  EXPECT_EQ(pool.block_bytes(), 2 * 2 * 16 * 8 * 4);
}

TEST(KvCacheTest, GrowsAndReleasesThroughItsBlockTable) {
  KvPool pool(2, 6, 16, 4);
  KvCache a(&pool, 100), b(&pool, 100);
  EXPECT_EQ(a.reserved_tokens(), 0);
  ASSERT_TRUE(a.Reserve(10).ok());
  ASSERT_TRUE(b.Reserve(20).ok());
  ASSERT_TRUE(a.Reserve(16).ok());  // still its one block
  EXPECT_EQ(a.blocks().size(), 1u);
  ASSERT_TRUE(a.Reserve(33).ok());
  EXPECT_EQ(a.blocks(), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b.blocks(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(a.reserved_tokens(), 48);
  // Token t of a layer is row t % 16 of block blocks()[t / 16], keys and
  // values in their own planes of the pool.
  EXPECT_EQ(a.KeyRow(1, 17), pool.Keys(1) + 3 * pool.block_elems() + 1 * 4);
  EXPECT_EQ(a.ValueRow(0, 40), pool.Values(0) + 4 * pool.block_elems() + 8 * 4);
  EXPECT_EQ(b.KeyRow(0, 0), pool.Keys(0) + 1 * pool.block_elems());
  // Not enough free blocks: a clear error, nothing taken.
  absl::Status st = b.Reserve(100);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(b.blocks().size(), 2u);
  a.Advance(20, /*from_layer=*/1, /*kept=*/12);
  EXPECT_EQ(a.length(), 20);
  EXPECT_EQ(a.layer_length(0), 20);
  EXPECT_EQ(a.layer_length(1), 12);
  a.Release();
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(a.layer_length(1), 0);
  EXPECT_TRUE(a.blocks().empty());
  EXPECT_EQ(pool.used_blocks(), 2);
  {
    KvCache c(&pool, 16);
    ASSERT_TRUE(c.Reserve(16).ok());
    EXPECT_EQ(pool.used_blocks(), 3);
  }
  EXPECT_EQ(pool.used_blocks(), 2) << "a cache gives its blocks back when it dies";
}

TEST(KvCacheTest, ACacheWithItsOwnPoolHoldsItWhole) {
  KvCache c(/*num_layers=*/3, /*capacity=*/40, /*row_elems=*/8);
  EXPECT_EQ(c.reserved_tokens(), 48);
  EXPECT_EQ(c.pool()->free_blocks(), 0);
  EXPECT_EQ(c.bytes(), 3 * c.pool()->block_bytes());
  EXPECT_TRUE(c.Reserve(40).ok());
  EXPECT_TRUE(c.CheckRoom(40).ok());
  EXPECT_EQ(c.CheckRoom(41).code(), absl::StatusCode::kResourceExhausted);
  c.Advance(30);
  c.Clear();
  EXPECT_EQ(c.length(), 0);
  EXPECT_EQ(c.reserved_tokens(), 48) << "Clear keeps the blocks";
}

}  // namespace
}  // namespace vismoe
