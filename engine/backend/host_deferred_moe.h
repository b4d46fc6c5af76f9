// HostDeferredMoe: DecoderStep::DeviceMoe for a backend whose memory is the
// host's (the CPU backend, when BackendOptions::cpu_deferred_moe asks for
// it). The layer runs at once through the step's own Route, Experts (over a
// PinnedExpertView: no lookup in the provider) and AddMoeOutput, and what the
// host saw is kept until TakeDeferred. The numbers are those of the
// synchronous path; what changes is when the provider and the observers hear
// of the layer -- the protocol the decoder follows with a device backend,
// here run and tested without one.
// Thread safety: none; owned by one DecoderStep.
#ifndef VISMOE_ENGINE_BACKEND_HOST_DEFERRED_MOE_H_
#define VISMOE_ENGINE_BACKEND_HOST_DEFERRED_MOE_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/decoder_ops.h"

namespace vismoe {

class HostDeferredMoe {
 public:
  // DeviceMoe(layer, phase, experts, observed) of `step`, whose activations
  // hold `elems` (rows * hidden) values each.
  absl::Status Run(DecoderStep& step, int layer, Phase phase, ExpertProvider* experts,
                   bool observed, int64_t elems);
  // TakeDeferred(layer): the oldest layer run and not taken.
  absl::StatusOr<DeferredLayer> Take(int layer);
  // DeferredReady(layer): true once it ran.
  bool Ready(int layer) const { return !queue_.empty() && queue_.front().layer == layer; }

 private:
  struct Staged {
    int layer = -1;
    RouterResult routing;
    std::vector<float> residual, normed, moe_out;
  };
  std::deque<Staged> queue_;
  Staged taken_;  // what the last Take's pointers point into
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_BACKEND_HOST_DEFERRED_MOE_H_
