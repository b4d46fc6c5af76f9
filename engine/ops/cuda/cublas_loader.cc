#include "engine/ops/cuda/cublas_loader.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace vismoe::cuda {
namespace {

absl::StatusOr<CublasApi> Load() {
  const std::string versioned = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  std::string errors;
  void* lib = nullptr;
  CublasApi api;
  for (const std::string& name : {versioned, std::string("libcublas.so")}) {
    // RTLD_LOCAL: cuBLAS symbols do not leak into the global namespace.
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      api.library = name;
      break;
    }
    const char* err = dlerror();
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", err != nullptr ? err : name);
  }
  if (lib == nullptr) return absl::UnavailableError(absl::StrCat("cannot load cuBLAS: ", errors));
  auto resolve = [&](const char* symbol, auto* fn) -> absl::Status {
    void* p = dlsym(lib, symbol);
    if (p == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cuBLAS library ", api.library, " has no symbol ", symbol));
    }
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
    return absl::OkStatus();
  };
  for (absl::Status st : {resolve("cublasCreate_v2", &api.create),
                          resolve("cublasDestroy_v2", &api.destroy),
                          resolve("cublasSetStream_v2", &api.set_stream),
                          resolve("cublasSetWorkspace_v2", &api.set_workspace),
                          resolve("cublasSetAtomicsMode", &api.set_atomics_mode),
                          resolve("cublasGemmEx", &api.gemm_ex),
                          resolve("cublasGetStatusName", &api.status_name),
                          resolve("cublasGetStatusString", &api.status_string)}) {
    if (!st.ok()) return st;
  }
  // Optional: cuBLAS before 12.5 has no grouped GEMM (Blas then runs one GEMM per problem).
  api.gemm_grouped_batched_ex = reinterpret_cast<decltype(api.gemm_grouped_batched_ex)>(
      dlsym(lib, "cublasGemmGroupedBatchedEx"));
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> LoadCublas() {
  static const absl::StatusOr<CublasApi>* const loaded = new absl::StatusOr<CublasApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &loaded->value();
}

}  // namespace vismoe::cuda
