// Writes tensors to a .safetensors file: used by tests (to build fixtures and
// malformed variants) and by calibration (to save profiles).
#ifndef VISMOE_ENGINE_MODEL_SAFETENSORS_WRITER_H_
#define VISMOE_ENGINE_MODEL_SAFETENSORS_WRITER_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/tensor.h"

namespace vismoe {

// Writes `tensors` (name -> view; the bytes are copied from view.data) and
// `metadata` (stored as "__metadata__") to `path`, replacing it atomically
// (written to "<path>.tmp", then renamed).
// The layout is the one SafetensorsFile requires and the reference
// implementation writes: header padded with spaces to a multiple of 8 bytes,
// tensors ordered by decreasing dtype size (then by name) with no gaps, so every
// tensor is aligned to its dtype.
// REQUIRES: names are unique, non-empty and not "__metadata__"; every view with
// numel() > 0 has non-null data; dims are non-negative. Violations return
// InvalidArgument; I/O failures return the errno's status.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, TensorView>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_SAFETENSORS_WRITER_H_
