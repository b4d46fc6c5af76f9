// ExpertProvider: how a MoE layer gets the weights of the experts it routes to.
//
// The forward pass never reads expert weights from the checkpoint directly: it
// asks the provider, so the same arch code runs with everything resident
// (ResidentExpertProvider) or with the offload runtime's pinned prefix + slab
// cache, which may have to copy an expert in first.
//
// Protocol per MoE layer and step: AcquireLayer(layer, experts) blocks until
// every listed expert is usable (copy completed); Get() may then be called for
// those experts; ReleaseLayer(layer) says the layer is done for this step
// (its slab slots become Expired and may be evicted).
// Thread safety: called from the one thread running a sequence's forward pass.
#ifndef VISMOE_ENGINE_OFFLOAD_EXPERT_PROVIDER_H_
#define VISMOE_ENGINE_OFFLOAD_EXPERT_PROVIDER_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"
#include "engine/runtime/stats_sink.h"

namespace vismoe {

// The weights of one expert, in one of the two published layouts.
struct ExpertWeights {
  enum class Layout {
    // Qwen3-VL-MoE fused: gate_up [H, 2I] (gate = first I columns), down [I, H].
    kFusedTransposed,
    // Qwen3-30B-A3B / OLMoE per expert: gate [I, H], up [I, H], down [H, I].
    kSeparate,
  };
  Layout layout = Layout::kFusedTransposed;
  TensorView gate_up;  // kFusedTransposed only
  TensorView gate;     // kSeparate only
  TensorView up;       // kSeparate only
  TensorView down;
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;

  // Makes `experts` of MoE `layer` usable; blocks only on those experts.
  virtual absl::Status AcquireLayer(Phase phase, int layer, absl::Span<const int> experts) = 0;
  // REQUIRES: `expert` was in the last AcquireLayer(layer, ...) call and the
  // layer was not released since.
  virtual ExpertWeights Get(int layer, int expert) = 0;
  // The layer is done for the current step.
  virtual void ReleaseLayer(int layer) = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_EXPERT_PROVIDER_H_
