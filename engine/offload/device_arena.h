// DeviceArena: the bounded "device" memory of the offload runtime, allocated
// once at start-up and carved into named regions (pinned prefix, slab cache)
// by bumping an offset; nothing is allocated on the hot path and nothing is
// ever freed before the arena dies. On the CPU backend it is host memory from
// a HostAllocator; the CUDA backend carves a cudaMalloc'd block the same way.
// Thread safety: Carve() is for start-up on one thread; the carved memory is
// then shared by the owner's own locking.
// Ownership: owns its block; the allocator must outlive the arena.
#ifndef VISMOE_ENGINE_OFFLOAD_DEVICE_ARENA_H_
#define VISMOE_ENGINE_OFFLOAD_DEVICE_ARENA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/offload/host_expert_store.h"

namespace vismoe {

class DeviceArena {
 public:
  static constexpr int64_t kAlignment = 256;

  // ResourceExhausted naming the size if the block cannot be allocated.
  // `allocator` null = AlignedHostAllocator::Default().
  static absl::StatusOr<std::unique_ptr<DeviceArena>> Create(int64_t capacity_bytes,
                                                             HostAllocator* allocator);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A kAlignment-aligned region of `bytes`; ResourceExhausted naming the
  // region, its size and what is left when it does not fit.
  absl::StatusOr<char*> Carve(const std::string& region, int64_t bytes);

  int64_t capacity() const { return capacity_; }
  int64_t used() const { return used_; }
  const std::vector<std::pair<std::string, int64_t>>& regions() const { return regions_; }
  // True when [p, p + bytes) lies inside the arena.
  bool Contains(const void* p, int64_t bytes) const;

  // Capacity needed for regions of these sizes, alignment included.
  static int64_t CapacityFor(const std::vector<int64_t>& region_bytes);

 private:
  DeviceArena() = default;

  HostAllocator* allocator_ = nullptr;
  char* base_ = nullptr;
  int64_t capacity_ = 0;
  int64_t used_ = 0;
  std::vector<std::pair<std::string, int64_t>> regions_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_DEVICE_ARENA_H_
