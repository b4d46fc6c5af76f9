// DeviceAllocator: where the DeviceArena's one start-up block comes from.
// The CPU backend's "device" is host heap memory (HeapDeviceAllocator, the
// default); the CUDA backend supplies one over cudaMalloc/cudaFree
// (engine/device/cuda/cuda_device_allocator.h). Called once at start-up and once
// at shutdown, never on the hot path. Header-only interface so that
// vismoe_cuda can implement it without linking the engine.
// Thread safety: implementations must allow calls from any thread.
// Ownership: an arena borrows its allocator; it must outlive the arena.
#ifndef VISMOE_ENGINE_OFFLOAD_DEVICE_ALLOCATOR_H_
#define VISMOE_ENGINE_OFFLOAD_DEVICE_ALLOCATOR_H_

#include <cstddef>

namespace vismoe {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // At least 256-byte aligned (DeviceArena::kAlignment); null on failure
  // (the implementation logs why).
  virtual void* Allocate(size_t bytes) = 0;
  // REQUIRES: `p` came from Allocate(bytes) of this allocator.
  virtual void Free(void* p, size_t bytes) = 0;
  // True when the CPU may read and write the memory directly (heap); false
  // for cudaMalloc'd memory, which only copies and kernels may touch.
  virtual bool host_accessible() const = 0;
  // Short name for messages ("heap", "cuda:0").
  virtual const char* name() const = 0;
};

// 4 KiB-aligned host heap memory: the CPU backend's device arena.
class HeapDeviceAllocator final : public DeviceAllocator {
 public:
  void* Allocate(size_t bytes) override;
  void Free(void* p, size_t bytes) override;
  bool host_accessible() const override { return true; }
  const char* name() const override { return "heap"; }
  static HeapDeviceAllocator* Default();
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_DEVICE_ALLOCATOR_H_
