// CudaDeviceAllocator: the CUDA backend's DeviceAllocator. The offload
// runtime's DeviceArena takes its one start-up block from cudaMalloc on a
// fixed device and carves the pinned prefix and the slab cache out of it, so
// the hot path never allocates (DESIGN.md).
// Thread safety: Allocate/Free from any thread (Allocate sets its device first).
// Ownership: the caller owns each block until Free.
#ifndef VISMOE_ENGINE_DEVICE_CUDA_CUDA_DEVICE_ALLOCATOR_H_
#define VISMOE_ENGINE_DEVICE_CUDA_CUDA_DEVICE_ALLOCATOR_H_

#include <cstddef>
#include <string>

#include "engine/offload/device_allocator.h"

namespace vismoe::cuda {

class CudaDeviceAllocator final : public DeviceAllocator {
 public:
  // REQUIRES: `device` is a valid ordinal (ProbeCudaDevice succeeded for it).
  explicit CudaDeviceAllocator(int device = 0);
  CudaDeviceAllocator(const CudaDeviceAllocator&) = delete;
  CudaDeviceAllocator& operator=(const CudaDeviceAllocator&) = delete;

  // cudaMalloc on `device` (256-byte aligned or better); null on failure,
  // after one spdlog error naming the size, the device and the CUDA error.
  // Makes `device` current on the calling thread.
  void* Allocate(size_t bytes) override;
  // cudaFree; a failure is logged, not fatal (the runtime may be torn down
  // at exit, and a leak then is harmless).
  void Free(void* p, size_t bytes) override;
  bool host_accessible() const override { return false; }
  const char* name() const override { return name_.c_str(); }
  int device() const { return device_; }

 private:
  int device_;
  std::string name_;  // "cuda:<device>"
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_DEVICE_CUDA_CUDA_DEVICE_ALLOCATOR_H_
