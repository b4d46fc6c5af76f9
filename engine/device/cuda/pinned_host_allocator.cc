#include "engine/device/cuda/pinned_host_allocator.h"

#include <cuda_runtime_api.h>

#include "spdlog/spdlog.h"

namespace vismoe::cuda {

void* PinnedHostAllocator::Allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();  // do not leave the error for the next unrelated check
    spdlog::error("cudaHostAlloc of {} bytes of page-locked host memory failed: {}: {}", bytes,
                  cudaGetErrorName(err), cudaGetErrorString(err));
    return nullptr;
  }
  return p;
}

void PinnedHostAllocator::Free(void* p, size_t bytes) {
  if (p == nullptr) return;
  const cudaError_t err = cudaFreeHost(p);
  if (err != cudaSuccess) {
    cudaGetLastError();
    spdlog::error("cudaFreeHost of a {}-byte page-locked block failed: {}: {}", bytes,
                  cudaGetErrorName(err), cudaGetErrorString(err));
  }
}

}  // namespace vismoe::cuda
