// Fuzzes the safetensors header parser and validator
// (engine/model/safetensors_file.h) on whole files held in memory
// (SafetensorsFile::FromBytes): every view of a file that opens is read at
// both ends, so ASan reports any view that leaves the buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "engine/model/safetensors_file.h"

namespace vismoe {
namespace {

volatile char sink;

void Fuzz(absl::string_view data) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::FromBytes("fuzz.safetensors", data);
  if (!file.ok()) return;
  for (const std::string& name : (*file)->names()) {
    if (!(*file)->Contains(name)) std::abort();
    absl::StatusOr<TensorView> view = (*file)->Get(name);
    if ((view.ok()) != ((*file)->Find(name) != nullptr)) std::abort();
    if (!view.ok()) continue;
    const size_t nbytes = view->nbytes();
    const char* bytes = static_cast<const char*>(view->data);
    if (nbytes > 0) {
      // Readers load uint16_t / float through the pointer (empty views may be anywhere).
      if (reinterpret_cast<uintptr_t>(bytes) % DTypeSize(view->dtype) != 0) std::abort();
      sink = bytes[0];
      sink = bytes[nbytes - 1];
    }
  }
}

}  // namespace
}  // namespace vismoe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::Fuzz(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
