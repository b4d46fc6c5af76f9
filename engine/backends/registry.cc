#include "engine/backends/registry.h"

#include "absl/strings/str_cat.h"
#include "engine/backends/cpu/cpu_backend.h"
#ifdef VISMOE_HAVE_CUDA
#include "engine/backends/cuda/cuda_backend.h"
#endif

namespace vismoe {

std::vector<const Backend*> RegisteredBackends() {
  static const cpu::CpuBackend kCpu;
#ifdef VISMOE_HAVE_CUDA
  static const cuda::CudaBackend kCuda;
  return {&kCpu, &kCuda};
#else
  return {&kCpu};
#endif
}

namespace {

const Backend* Find(const std::string& name) {
  for (const Backend* b : RegisteredBackends()) {
    if (name == b->name()) return b;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<BackendChoice> ChooseBackend(const std::string& name) {
  if (name != "auto" && name != "cpu" && name != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend must be auto, cpu or cuda, got '", name, "'"));
  }
  const Backend* cpu = Find("cpu");
  if (name == "cpu") return BackendChoice{cpu, "cpu backend (as asked)"};
  const Backend* cuda = Find("cuda");
  if (cuda == nullptr) {
    if (name == "cuda") {
      return absl::UnimplementedError(
          "backend 'cuda' is not available in this build (built without CUDA); use backend "
          "'cpu' or 'auto'");
    }
    return BackendChoice{cpu, "built without CUDA; running on the cpu backend"};
  }
  absl::StatusOr<std::string> device = cuda->Probe();
  if (device.ok())
    return BackendChoice{cuda, absl::StrCat(*device, "; running on the cuda backend")};
  if (name == "cuda") {
    return absl::Status(device.status().code(),
                        absl::StrCat("backend 'cuda': ", device.status().message()));
  }
  return BackendChoice{cpu, absl::StrCat("no usable CUDA device (", device.status().message(),
                                         "); running on the cpu backend")};
}

}  // namespace vismoe
