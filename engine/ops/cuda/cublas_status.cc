// CublasErrorToStatus lives apart from cuda_status.cc so that code needing only
// the CUDA runtime (the start-up device probe) does not make the linker pull in
// libcublas: cuBLASLt reserves ~94 KiB of static TLS per thread, more than the
// 100 KiB stacks Debian's civetweb gives the Prometheus exposer's threads, whose
// pthread_create then fails with EINVAL.
#include "absl/strings/str_cat.h"
#include "engine/ops/cuda/cuda_status.h"

namespace vismoe::cuda {

absl::Status CublasErrorToStatus(cublasStatus_t err, const char* call, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (err == CUBLAS_STATUS_ALLOC_FAILED) code = absl::StatusCode::kResourceExhausted;
  if (err == CUBLAS_STATUS_NOT_INITIALIZED || err == CUBLAS_STATUS_ARCH_MISMATCH) {
    code = absl::StatusCode::kUnavailable;
  }
  if (err == CUBLAS_STATUS_INVALID_VALUE || err == CUBLAS_STATUS_NOT_SUPPORTED) {
    code = absl::StatusCode::kInvalidArgument;
  }
  return absl::Status(
      code, absl::StrCat(call, " failed at ", file, ":", line, ": ", cublasGetStatusName(err), ": ",
                         cublasGetStatusString(err)));
}

}  // namespace vismoe::cuda
