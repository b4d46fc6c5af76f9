// ExpertPredictor: predicts which experts the next MoE layers will route to,
// as a priority over (layer, expert) (VisMMOE 3.3). The offload runtime
// prefetches the top-B of the next offloaded layer in priority order and, with
// the guarded eviction policy, evicts the Expired slabs of lowest priority
// first. Kinds (DESIGN.md): "history" (decayed frequency), "router-lookahead"
// (the next layers' routers applied to the quasi-hidden state, paper 004),
// "mlp-lookahead" (the calibrated bottleneck MLP of Eq. 6-8).
//
// A predictor sees the forward pass as a RouterObserver (routing, residual,
// visual summary) and is asked for priorities from inside the offload
// provider's BeginLayer, on the same forward thread: OnRouting(l) always comes
// before the provider's BeginLayer(l).
// Thread safety: none; one forward thread drives it (the provider calls it
// under its own mutex).
#ifndef VISMOE_ENGINE_OFFLOAD_EXPERT_PREDICTOR_H_
#define VISMOE_ENGINE_OFFLOAD_EXPERT_PREDICTOR_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/routing.h"

namespace vismoe {

class ExpertPredictor : public RouterObserver {
 public:
  ~ExpertPredictor() override = default;

  // "history", "router-lookahead" or "mlp-lookahead".
  virtual const char* name() const = 0;

  // A new sequence starts (per-request state such as the visual summary and
  // the routing of the previous layer is dropped; learned statistics stay).
  virtual void BeginRequest() = 0;

  // Priorities for the experts of decoder layer `target` from what has been
  // observed so far: up to `count` (expert, score) pairs with score > 0,
  // highest first, ties to the lower id. Empty when the predictor has nothing
  // to say about `target` (e.g. outside its lookahead window).
  virtual std::vector<std::pair<int, double>> Predict(int target, int count) = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_EXPERT_PREDICTOR_H_
