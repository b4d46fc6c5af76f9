// CublasApi: the few cuBLAS entry points the CUDA backend calls, resolved with
// dlopen/dlsym on first use instead of linked.
//
// Why: libcublasLt has ~94 KiB of TLS. Linked at start-up it lands in every
// thread's static TLS block, which glibc carves out of the thread's stack;
// Debian's civetweb (the Prometheus exposer of vismoe-server) creates its
// threads with fixed 100 KiB stacks, so pthread_create fails with EINVAL and
// /metrics dies. A dlopen'ed library's TLS (general-dynamic model; neither
// library is flagged STATIC_TLS) is allocated lazily per thread on the heap
// instead, so the server only loads cuBLAS when the CUDA backend starts, and
// even then the exposer's threads are unaffected.
// Thread safety: LoadCublas() is safe from any thread (loaded once); the
// returned table is immutable.
// Ownership: the library stays loaded for the life of the process.
#ifndef VISMOE_ENGINE_OPS_CUDA_CUBLAS_LOADER_H_
#define VISMOE_ENGINE_OPS_CUDA_CUBLAS_LOADER_H_

#include <cublas_api.h>

#include <string>

#include "absl/status/statusor.h"

namespace vismoe::cuda {

struct CublasApi {
  std::string library;  // the path/soname that was loaded
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetAtomicsMode) set_atomics_mode = nullptr;
  // The C symbol (C++ also sees an overload taking cudaDataType for the compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  // Null when the library has none (cuBLAS < 12.5).
  decltype(&cublasGemmGroupedBatchedEx) gemm_grouped_batched_ex = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Loads libcublas.so.<major> (the major version of the headers compiled
// against), falling back to libcublas.so, and resolves every entry point.
// kUnavailable naming the library and dlerror() when it cannot be loaded or
// a symbol is missing; the result (either way) is cached.
absl::StatusOr<const CublasApi*> LoadCublas();

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_CUBLAS_LOADER_H_
