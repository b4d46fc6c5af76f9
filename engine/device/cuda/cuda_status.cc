#include "engine/device/cuda/cuda_status.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace vismoe::cuda {
namespace {

absl::StatusCode CodeFor(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorDevicesUnavailable:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorNotSupported:
      return absl::StatusCode::kUnavailable;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaErrorToStatus(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  // A failed runtime call also sets this thread's last error; clear it (a
  // no-op for sticky errors), or the next unrelated launch check
  // (LastLaunchStatus) would report this failure again, blaming that kernel
  // and failing a later request.
  (void)cudaGetLastError();
  return absl::Status(
      CodeFor(err), absl::StrCat(call, " failed at ", file, ":", line, ": ", cudaGetErrorName(err),
                                 ": ", cudaGetErrorString(err)));
}

absl::Status LastLaunchStatus(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return CudaErrorToStatus(err, absl::StrCat("launch of ", kernel).c_str(), file, line);
}

void CudaCheckFailed(cudaError_t err, const char* call, const char* file, int line) {
  std::fprintf(stderr, "fatal: %s failed at %s:%d: %s\n", call, file, line,
               cudaGetErrorString(err));
  std::abort();
}

}  // namespace vismoe::cuda
