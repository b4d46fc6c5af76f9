#include "engine/device/cuda/cuda_device_allocator.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace vismoe::cuda {

CudaDeviceAllocator::CudaDeviceAllocator(int device)
    : device_(device), name_(absl::StrCat("cuda:", device)) {}

void* CudaDeviceAllocator::Allocate(size_t bytes) {
  void* p = nullptr;
  cudaError_t err = cudaSetDevice(device_);
  if (err == cudaSuccess) err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // do not leave the error for the next unrelated check
    spdlog::error("cudaMalloc of {} bytes on device {} failed: {}: {}", bytes, device_,
                  cudaGetErrorName(err), cudaGetErrorString(err));
    return nullptr;
  }
  return p;
}

void CudaDeviceAllocator::Free(void* p, size_t bytes) {
  if (p == nullptr) return;
  // Unified addressing finds the owning device; the current one stays as is.
  const cudaError_t err = cudaFree(p);
  if (err != cudaSuccess) {
    cudaGetLastError();
    spdlog::error("cudaFree of a {}-byte block on device {} failed: {}: {}", bytes, device_,
                  cudaGetErrorName(err), cudaGetErrorString(err));
  }
}

}  // namespace vismoe::cuda
