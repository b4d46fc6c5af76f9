// MapHostExperts: where the host expert store maps the checkpoint and where
// it packs a copy; HostMemoryAvailable reads this machine's meminfo.
#include "engine/offload/host_store_mode.h"

#include <unistd.h>

#include <cstdint>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(HostStoreModeTest, ForcedModesIgnoreTheSizes) {
  EXPECT_TRUE(MapHostExperts(HostStoreMode::kMapped, true, kGiB, 1024 * kGiB));
  EXPECT_TRUE(MapHostExperts(HostStoreMode::kMapped, false, kGiB, 0));
  EXPECT_FALSE(MapHostExperts(HostStoreMode::kPacked, true, 100 * kGiB, kGiB));
  EXPECT_FALSE(MapHostExperts(HostStoreMode::kPacked, false, kGiB, 0));
}

TEST(HostStoreModeTest, AutoMapsWithoutPageLocking) {
  // A packed heap copy buys the CPU backend nothing.
  EXPECT_TRUE(MapHostExperts(HostStoreMode::kAuto, false, kGiB, 1024 * kGiB));
  EXPECT_TRUE(MapHostExperts(HostStoreMode::kAuto, false, kGiB, 0));
}

TEST(HostStoreModeTest, AutoPacksAPageLockedCopyOnlyWhereItFitsWithHeadroom) {
  // Qwen3-VL-30B-A3B's 58 GB of experts: packed on the 125 GiB H100 host,
  // mapped on a 64 GiB one.
  const int64_t experts = 58 * kGiB;
  EXPECT_FALSE(MapHostExperts(HostStoreMode::kAuto, true, experts, 124 * kGiB));
  EXPECT_TRUE(MapHostExperts(HostStoreMode::kAuto, true, experts, 60 * kGiB));
  // The headroom is 4 GiB below 40 GiB available, a tenth above.
  EXPECT_EQ(PageLockedHeadroom(8 * kGiB), 4 * kGiB);
  EXPECT_EQ(PageLockedHeadroom(100 * kGiB), 10 * kGiB);
  EXPECT_FALSE(MapHostExperts(HostStoreMode::kAuto, true, 90 * kGiB, 100 * kGiB));
  EXPECT_TRUE(MapHostExperts(HostStoreMode::kAuto, true, 90 * kGiB + 1, 100 * kGiB));
  EXPECT_TRUE(MapHostExperts(HostStoreMode::kAuto, true, kGiB, 4 * kGiB));  // all headroom
  // Unknown memory: pack, as before the mode existed.
  EXPECT_FALSE(MapHostExperts(HostStoreMode::kAuto, true, experts, 0));
}

TEST(HostStoreModeTest, HostMemoryAvailableIsPositiveAndBelowPhysicalMemory) {
  const int64_t available = HostMemoryAvailable();
  const int64_t physical =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GT(available, 0);
  EXPECT_LE(available, physical);
}

}  // namespace
}  // namespace vismoe
