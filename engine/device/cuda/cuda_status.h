// CUDA runtime and cuBLAS error codes -> absl::Status, naming the failed call
// and its file:line. Include only from CUDA-side sources (.cu and the .cc files
// of engine/ops/cuda); the rest of the engine sees plain absl::Status.
#ifndef VISMOE_ENGINE_DEVICE_CUDA_CUDA_STATUS_H_
#define VISMOE_ENGINE_DEVICE_CUDA_CUDA_STATUS_H_

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace vismoe::cuda {

// OK for cudaSuccess; otherwise an error (kResourceExhausted for out of memory,
// kUnavailable for "no device"/driver problems, kInternal otherwise) whose
// message is "<call> failed at <file>:<line>: <cudaGetErrorName>: <string>".
absl::Status CudaErrorToStatus(cudaError_t err, const char* call, const char* file, int line);
absl::Status CublasErrorToStatus(cublasStatus_t err, const char* call, const char* file, int line);

// Status of the most recent kernel launch on this thread (cudaGetLastError).
absl::Status LastLaunchStatus(const char* kernel, const char* file, int line);

// Aborts with the error; only for broken invariants (e.g. a destructor's free).
void CudaCheckFailed(cudaError_t err, const char* call, const char* file, int line);

}  // namespace vismoe::cuda

#define VISMOE_CUDA_RETURN_IF_ERROR(call)                                                    \
  do {                                                                                       \
    const cudaError_t vismoe_cuda_err_ = (call);                                             \
    if (vismoe_cuda_err_ != cudaSuccess)                                                     \
      return ::vismoe::cuda::CudaErrorToStatus(vismoe_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define VISMOE_CUBLAS_RETURN_IF_ERROR(call)                                                      \
  do {                                                                                           \
    const cublasStatus_t vismoe_cublas_err_ = (call);                                            \
    if (vismoe_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                             \
      return ::vismoe::cuda::CublasErrorToStatus(vismoe_cublas_err_, #call, __FILE__, __LINE__); \
  } while (0)

// Returns the launch error (bad configuration, no device) of the kernel just launched.
#define VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR(kernel_name)                    \
  do {                                                                     \
    ::absl::Status vismoe_launch_st_ =                                     \
        ::vismoe::cuda::LastLaunchStatus(kernel_name, __FILE__, __LINE__); \
    if (!vismoe_launch_st_.ok()) return vismoe_launch_st_;                 \
  } while (0)

// For broken invariants only (destructors, code paths that cannot report).
#define VISMOE_CUDA_CHECK(call)                                                     \
  do {                                                                              \
    const cudaError_t vismoe_cuda_err_ = (call);                                    \
    if (vismoe_cuda_err_ != cudaSuccess)                                            \
      ::vismoe::cuda::CudaCheckFailed(vismoe_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#endif  // VISMOE_ENGINE_DEVICE_CUDA_CUDA_STATUS_H_
