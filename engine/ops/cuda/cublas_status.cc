// CublasErrorToStatus: names come from the dlopen'ed cuBLAS (cublas_loader.h
// says why it is not linked); a status code from a library that failed to load
// cannot occur, but the message then still carries the number.
#include "absl/strings/str_cat.h"
#include "engine/ops/cuda/cublas_loader.h"
#include "engine/device/cuda/cuda_status.h"

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
  const absl::StatusOr<const CublasApi*> api = LoadCublas();
  const std::string what =
      api.ok() ? absl::StrCat((*api)->status_name(err), ": ", (*api)->status_string(err))
               : absl::StrCat("cublasStatus_t ", static_cast<int>(err));
  return absl::Status(code, absl::StrCat(call, " failed at ", file, ":", line, ": ", what));
}

}  // namespace vismoe::cuda
