// DeviceArena's DeviceAllocator hook: the arena takes exactly one block from
// the allocator it is given (the CUDA backend's cudaMalloc one), frees it with
// the same size, reports whether the CPU may touch it, and names the allocator
// when the block cannot be had. The default stays host heap memory.
#include "engine/offload/device_arena.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/offload/device_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

// Hands out heap memory but claims to be device memory (the arena only does
// pointer arithmetic on it); or fails every allocation.
class FakeDeviceAllocator final : public DeviceAllocator {
 public:
  explicit FakeDeviceAllocator(bool fail = false) : fail_(fail) {}
  void* Allocate(size_t bytes) override {
    ++allocations;
    allocated_bytes = bytes;
    if (fail_) return nullptr;
    block = HeapDeviceAllocator::Default()->Allocate(bytes);
    return block;
  }
  void Free(void* p, size_t bytes) override {
    ++frees;
    freed = p;
    freed_bytes = bytes;
    HeapDeviceAllocator::Default()->Free(p, bytes);
  }
  bool host_accessible() const override { return false; }
  const char* name() const override { return "fake-device"; }

  int allocations = 0, frees = 0;
  size_t allocated_bytes = 0, freed_bytes = 0;
  void* block = nullptr;
  void* freed = nullptr;

 private:
  const bool fail_;
};

TEST(DeviceArenaAllocatorTest, TakesOneBlockFromTheGivenAllocatorAndFreesIt) {
  FakeDeviceAllocator alloc;
  const int64_t cap = DeviceArena::CapacityFor({1000, 4096});
  {
    auto arena = DeviceArena::Create(cap, &alloc);
    ASSERT_TRUE(arena.ok()) << arena.status();
    EXPECT_EQ(alloc.allocations, 1);
    EXPECT_EQ(alloc.allocated_bytes, static_cast<size_t>(cap));
    EXPECT_FALSE((*arena)->host_accessible());
    auto prefix = (*arena)->Carve("pinned_prefix", 1000);
    auto slabs = (*arena)->Carve("slab_cache", 4096);
    ASSERT_TRUE(prefix.ok() && slabs.ok());
    EXPECT_EQ(static_cast<void*>(*prefix), alloc.block);
    EXPECT_EQ(*slabs, *prefix + 1024);
    EXPECT_EQ(alloc.allocations, 1);  // carving never allocates
    EXPECT_EQ(alloc.frees, 0);
  }
  EXPECT_EQ(alloc.frees, 1);
  EXPECT_EQ(alloc.freed, alloc.block);
  EXPECT_EQ(alloc.freed_bytes, static_cast<size_t>(cap));
}

TEST(DeviceArenaAllocatorTest, AllocationFailureNamesSizeAndAllocator) {
  FakeDeviceAllocator alloc(/*fail=*/true);
  auto arena = DeviceArena::Create(1 << 20, &alloc);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(arena.status().message(), HasSubstr("1048576 bytes"));
  EXPECT_THAT(arena.status().message(), HasSubstr("fake-device"));
  EXPECT_EQ(alloc.frees, 0);
}

TEST(DeviceArenaAllocatorTest, EmptyArenaAllocatesNothing) {
  FakeDeviceAllocator alloc;
  {
    auto arena = DeviceArena::Create(0, &alloc);
    ASSERT_TRUE(arena.ok()) << arena.status();
  }
  EXPECT_EQ(alloc.allocations, 0);
  EXPECT_EQ(alloc.frees, 0);
}

TEST(DeviceArenaAllocatorTest, DefaultIsHostHeapMemory) {
  auto arena = DeviceArena::Create(8192, nullptr);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_TRUE((*arena)->host_accessible());
  EXPECT_STREQ(HeapDeviceAllocator::Default()->name(), "heap");
  auto region = (*arena)->Carve("slab_cache", 8192);
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*region) % 4096, 0u);
  std::memset(*region, 0x5a, 8192);  // the CPU backend writes it directly
  EXPECT_EQ((*region)[8191], 0x5a);
}

}  // namespace
}  // namespace vismoe
