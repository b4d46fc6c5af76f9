#include "engine/backend/vision_ops.h"

#include "absl/strings/str_cat.h"

namespace vismoe {

absl::StatusOr<int64_t> VisionStepRows(const VisionConfig& config, const VisionStepInput& input) {
  int64_t n = 0;
  for (const GridThw& g : input.grids) n += g.num_patches();
  const int64_t patch_dim =
      int64_t{config.in_channels} * config.temporal_patch_size * config.patch_size *
      config.patch_size;
  const int64_t head_dim = config.num_heads > 0 ? config.hidden_size / config.num_heads : 0;
  const auto size = [n](absl::Span<const float> v, int64_t per_row) {
    return static_cast<int64_t>(v.size()) == n * per_row;
  };
  if (n < 1 || !size(input.patches, patch_dim) || !size(input.position, config.hidden_size) ||
      !size(input.cos, head_dim) || !size(input.sin, head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision step: sizes disagree for ", n, " patches (patches ", input.patches.size(),
        ", position ", input.position.size(), ", cos ", input.cos.size(), ", sin ",
        input.sin.size(), ")"));
  }
  return n;
}

absl::Status CheckVisionIndex(const char* what, int index, size_t count) {
  if (index >= 0 && static_cast<size_t>(index) < count) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("vision step: ", what, " ", index, " out of range [0, ", count, ")"));
}

}  // namespace vismoe
