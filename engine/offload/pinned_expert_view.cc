#include "engine/offload/pinned_expert_view.h"

#include "absl/strings/str_cat.h"

namespace vismoe {

absl::StatusOr<std::vector<int>> PinnedExpertView::BeginLayer(Phase /*phase*/, int layer,
                                                              absl::Span<const int> experts) {
  if (!source_->LayerPinned(layer)) {
    return absl::FailedPreconditionError(
        absl::StrCat("PinnedExpertView: layer ", layer, " is not pinned"));
  }
  return std::vector<int>(experts.begin(), experts.end());
}

}  // namespace vismoe
