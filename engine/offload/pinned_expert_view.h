// PinnedExpertView: an ExpertProvider over another provider's pinned layers
// (ExpertProvider::LayerPinned) that serves their experts straight from
// PinnedWeights, with no lookup, count, prediction or prefetch. A backend
// that runs a pinned layer without telling the provider at the time
// (DecoderStep::DeviceMoe) computes it through this view; the provider hears
// of the layer afterwards through RecordPinnedLayer.
// Thread safety: as the source's PinnedWeights (one forward thread).
// Ownership: borrows the source, which must outlive the view.
#ifndef VISMOE_ENGINE_OFFLOAD_PINNED_EXPERT_VIEW_H_
#define VISMOE_ENGINE_OFFLOAD_PINNED_EXPERT_VIEW_H_

#include <vector>

#include "engine/offload/expert_provider.h"

namespace vismoe {

class PinnedExpertView final : public ExpertProvider {
 public:
  explicit PinnedExpertView(ExpertProvider* source) : source_(source) {}

  // The experts in the order given. FailedPrecondition unless the source
  // pins `layer`.
  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override;
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    return source_->PinnedWeights(layer, expert);
  }
  bool Ready(int /*layer*/, int /*expert*/) override { return true; }
  void Release(int /*layer*/, int /*expert*/) override {}
  void EndLayer(int /*layer*/) override {}
  bool LayerPinned(int layer) const override { return source_->LayerPinned(layer); }
  absl::StatusOr<ExpertWeights> PinnedWeights(int layer, int expert) override {
    return source_->PinnedWeights(layer, expert);
  }
  // Host compute times still feed the source's cost model.
  void OnHostExpertTime(int64_t tokens, double seconds) override {
    source_->OnHostExpertTime(tokens, seconds);
  }

 private:
  ExpertProvider* source_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_PINNED_EXPERT_VIEW_H_
