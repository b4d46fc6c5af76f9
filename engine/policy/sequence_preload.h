// SequencePreload: per-sequence preload (MELINOE, paper 002, post-deployment
// stage; preload.md beside this file) for one sequence. As a RouterObserver
// of the sequence's steps it sums, per MoE layer, the router's probability
// mass over the sequence's prefill rows (softmax of the router logits, every
// expert: MELINOE's per-layer target y(l) = mean router probability, here
// measured on the prompt instead of predicted from an embedding). When the
// prefill is done (Start) it hands each layer's top `experts_per_layer`
// experts by that mass to the offload provider, which copies them in ahead of
// decoding and keeps them for the sequence (PreloadSet's share rule) until
// End(). Prediction and preload only move weights: nothing computed changes.
//
// Thread safety: none; the engine's step thread drives it (observer hooks
// during the sequence's forward steps, Start and End between steps).
// Ownership: borrows the provider, which must outlive it; owned by its
// Sequence. The destructor ends the preload if End() was not called.
#ifndef VISMOE_ENGINE_POLICY_SEQUENCE_PRELOAD_H_
#define VISMOE_ENGINE_POLICY_SEQUENCE_PRELOAD_H_

#include <cstdint>
#include <vector>

#include "engine/core/routing.h"
#include "engine/offload/offload_expert_provider.h"

namespace vismoe {

class SequencePreload final : public RouterObserver {
 public:
  // REQUIRES: provider non-null; num_layers, num_experts >= 0;
  // experts_per_layer >= 1.
  SequencePreload(OffloadExpertProvider* provider, int num_layers, int num_experts,
                  int experts_per_layer);
  ~SequencePreload() override;
  SequencePreload(const SequencePreload&) = delete;
  SequencePreload& operator=(const SequencePreload&) = delete;

  // Prefill rows add their router probabilities to their layer's mass;
  // decode rows are ignored.
  void OnRouting(Phase phase, int layer, const float* hidden, const RouterResult& routing) override;

  // The prefill is done: preloads Preferred() for this sequence. Only the
  // first call acts, and only if some prefill row was observed.
  void Start();
  // The sequence was preempted (its KV blocks given back, its prompt and
  // tokens to be prefilled again): its experts lose their protection while
  // it waits, and the mass starts over, so the rows it prefills again are not
  // counted twice; Start after that prefill preloads again. No-op once ended.
  void Suspend();
  // The sequence has ended: its experts lose their protection. Idempotent.
  void End();

  // Per decoder layer, the top experts_per_layer experts by prefill routing
  // mass, highest first (ties to the lower id); empty for layers no prefill
  // row routed through.
  std::vector<std::vector<int>> Preferred() const;
  bool started() const { return started_; }

 private:
  uint64_t owner() const { return reinterpret_cast<uintptr_t>(this); }

  OffloadExpertProvider* const provider_;
  const int num_layers_;
  const int num_experts_;
  const int experts_per_layer_;
  std::vector<double> mass_;  // [layer * num_experts + expert]
  std::vector<char> seen_;    // per layer: some prefill row routed through it
  bool started_ = false;
  bool ended_ = false;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_SEQUENCE_PRELOAD_H_
