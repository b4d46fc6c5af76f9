#include "engine/offload/expert_dtype.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/offload/host_expert_store.h"

namespace vismoe {

absl::StatusOr<int64_t> PackedExpertBytes(ExpertProvider& source, int layer, DType dtype) {
  const int first = 0;
  VISMOE_RETURN_IF_ERROR(source.BeginLayer(Phase::kPrefill, layer, {first}).status());
  absl::StatusOr<ExpertWeights> w = source.Acquire(layer, first);
  absl::StatusOr<ExpertFormat> format =
      w.ok() ? ExpertFormat::FromWeights(*w, dtype) : absl::StatusOr<ExpertFormat>(w.status());
  if (w.ok()) source.Release(layer, first);
  source.EndLayer(layer);
  VISMOE_RETURN_IF_ERROR(format.status());
  return static_cast<int64_t>(format->bytes);
}

}  // namespace vismoe
