#include "engine/offload/expert_provider.h"

#include "absl/strings/str_cat.h"

namespace vismoe {

absl::StatusOr<LayerPlan> ExpertProvider::BeginRoutedLayer(Phase phase, int layer,
                                                           absl::Span<const int> experts,
                                                           absl::Span<const int64_t> /*tokens*/) {
  absl::StatusOr<std::vector<int>> order = BeginLayer(phase, layer, experts);
  if (!order.ok()) return order.status();
  LayerPlan plan;
  plan.order = *std::move(order);
  return plan;
}

absl::StatusOr<ExpertWeights> ExpertProvider::HostWeights(int layer, int expert) {
  return absl::FailedPreconditionError(absl::StrCat(
      "HostWeights(", layer, ", ", expert, "): this provider computes no expert on the host"));
}

absl::StatusOr<ExpertWeights> ExpertProvider::PinnedWeights(int layer, int expert) {
  return absl::FailedPreconditionError(
      absl::StrCat("PinnedWeights(", layer, ", ", expert, "): the layer's experts are not pinned"));
}

absl::Status ExpertProvider::RecordPinnedLayer(Phase phase, int layer,
                                               absl::Span<const int> experts) {
  if (!LayerPinned(layer)) {
    return absl::FailedPreconditionError(
        absl::StrCat("RecordPinnedLayer(", layer, "): the layer's experts are not pinned"));
  }
  absl::StatusOr<std::vector<int>> order = BeginLayer(phase, layer, experts);
  if (!order.ok()) return order.status();
  EndLayer(layer);
  return absl::OkStatus();
}

}  // namespace vismoe
