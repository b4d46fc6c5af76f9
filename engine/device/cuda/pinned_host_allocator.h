// PinnedHostAllocator: the CUDA backend's HostAllocator. Page-locked host
// memory (cudaHostAlloc) is what lets cudaMemcpyAsync DMA an expert straight
// from the host store to the device on the copy stream; pageable memory would
// be staged through a driver bounce buffer and block the copy thread's host
// side for the whole copy.
// Flags: cudaHostAllocDefault. Not write-combined: WC memory is uncached for
// the CPU, and the CPU does read the store (packing, the pinned-prefix upload,
// the CPU fallback and tests read experts back), which would become many
// times slower. Not cudaHostAllocPortable: with unified virtual addressing
// (every 64-bit platform CUDA 13 supports) cudaHostAlloc memory is already
// pinned for every device.
// Thread safety: stateless; Allocate/Free from any thread.
// Ownership: the caller owns each block until Free.
#ifndef VISMOE_ENGINE_DEVICE_CUDA_PINNED_HOST_ALLOCATOR_H_
#define VISMOE_ENGINE_DEVICE_CUDA_PINNED_HOST_ALLOCATOR_H_

#include <cstddef>

#include "engine/offload/host_expert_store.h"

namespace vismoe::cuda {

class PinnedHostAllocator final : public HostAllocator {
 public:
  PinnedHostAllocator() = default;
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;

  // Page-locked block of `bytes` (a 0-byte request gets a 1-byte block so
  // that null always means failure); null on failure, after one spdlog error
  // naming the size and the CUDA error.
  void* Allocate(size_t bytes) override;
  // REQUIRES: `p` came from Allocate. A failing cudaFreeHost is logged, not
  // fatal (it happens when the CUDA runtime is already torn down at exit).
  void Free(void* p, size_t bytes) override;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_DEVICE_CUDA_PINNED_HOST_ALLOCATOR_H_
