// ObserverChain: a RouterObserver that passes every hook on to a list of
// observers, in order (null entries are skipped). The engine uses it to feed
// one forward pass to the expert predictor and a caller's observer
// (calibration) at once.
// Thread safety: none; used by the one forward thread. Ownership: does not
// own the observers, which must outlive the chain's use.
#ifndef VISMOE_ENGINE_POLICY_OBSERVER_CHAIN_H_
#define VISMOE_ENGINE_POLICY_OBSERVER_CHAIN_H_

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "absl/types/span.h"
#include "engine/core/routing.h"

namespace vismoe {

class ObserverChain final : public RouterObserver {
 public:
  ObserverChain(std::initializer_list<RouterObserver*> observers) {
    for (RouterObserver* o : observers) {
      if (o != nullptr) observers_.push_back(o);
    }
  }
  ObserverChain(const ObserverChain&) = delete;
  ObserverChain& operator=(const ObserverChain&) = delete;

  // The chain itself, the single observer, or null: what a DecoderInput needs.
  RouterObserver* Head() {
    if (observers_.empty()) return nullptr;
    return observers_.size() == 1 ? observers_[0] : this;
  }

  void OnRouting(Phase phase, int layer, const float* hidden,
                 const RouterResult& routing) override {
    for (RouterObserver* o : observers_) o->OnRouting(phase, layer, hidden, routing);
  }
  void OnPostAttention(Phase phase, int layer, const float* residual, int64_t n) override {
    for (RouterObserver* o : observers_) o->OnPostAttention(phase, layer, residual, n);
  }
  void OnMoeOutput(Phase phase, int layer, const float* out, int64_t n) override {
    for (RouterObserver* o : observers_) o->OnMoeOutput(phase, layer, out, n);
  }
  void OnVisualSummary(absl::Span<const float> summary) override {
    for (RouterObserver* o : observers_) o->OnVisualSummary(summary);
  }

 private:
  std::vector<RouterObserver*> observers_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_OBSERVER_CHAIN_H_
