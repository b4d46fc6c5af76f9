// The backend registry: every backend compiled into this build, by name, and
// the choice the engine makes among them. The one place that knows which
// backends exist (the CUDA one only in a CUDA build).
//
//   "cpu"   the CPU reference backend
//   "cuda"  needs a CUDA build and a usable device, else an error saying which is missing
//   "auto"  "cuda" when it is compiled in and its probe succeeds, else "cpu"
//
// Thread safety: the registry is immutable; functions may be called from any thread.
#ifndef VISMOE_ENGINE_BACKENDS_REGISTRY_H_
#define VISMOE_ENGINE_BACKENDS_REGISTRY_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace vismoe {

// The compiled backends, "cpu" first. The pointers live for the process.
std::vector<const Backend*> RegisteredBackends();

struct BackendChoice {
  const Backend* backend = nullptr;
  std::string line;  // one log line: which backend runs and why
};

// Resolves "auto", "cpu" or "cuda" (see above). InvalidArgument for another
// name; the probe's error (naming "backend 'cuda'") when an asked-for backend
// cannot run; Unimplemented when it is not compiled in.
absl::StatusOr<BackendChoice> ChooseBackend(const std::string& name);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKENDS_REGISTRY_H_
