// DeviceArena: the bounded "device" memory of the offload runtime, allocated
// once at start-up and carved into named regions (pinned prefix, slab cache)
// by bumping an offset; nothing is allocated on the hot path and nothing is
// ever freed before the arena dies. The block comes from a DeviceAllocator:
// host heap on the CPU backend (the default), one cudaMalloc on the CUDA
// backend (cuda::CudaDeviceAllocator), carved the same way.
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
#include "engine/offload/device_allocator.h"

namespace vismoe {

class DeviceArena {
 public:
  static constexpr int64_t kAlignment = 256;

  // ResourceExhausted naming the size and the allocator if the block cannot
  // be allocated. `allocator` null = HeapDeviceAllocator::Default().
  static absl::StatusOr<std::unique_ptr<DeviceArena>> Create(int64_t capacity_bytes,
                                                             DeviceAllocator* allocator);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A kAlignment-aligned region of `bytes`; ResourceExhausted naming the
  // region, its size and what is left when it does not fit.
  absl::StatusOr<char*> Carve(const std::string& region, int64_t bytes);

  int64_t capacity() const { return capacity_; }
  // False when the block is real device memory: fill it with copies
  // (cudaMemcpy / the TransferEngine), never with memcpy.
  bool host_accessible() const { return allocator_->host_accessible(); }
  int64_t used() const { return used_; }
  const std::vector<std::pair<std::string, int64_t>>& regions() const { return regions_; }
  // True when [p, p + bytes) lies inside the arena.
  bool Contains(const void* p, int64_t bytes) const;

  // Capacity needed for regions of these sizes, alignment included.
  static int64_t CapacityFor(const std::vector<int64_t>& region_bytes);

 private:
  DeviceArena() = default;

  DeviceAllocator* allocator_ = nullptr;
  char* base_ = nullptr;
  int64_t capacity_ = 0;
  int64_t used_ = 0;
  std::vector<std::pair<std::string, int64_t>> regions_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_DEVICE_ARENA_H_
