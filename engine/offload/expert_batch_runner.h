// RunExpertBatches: the ExpertProvider protocol for a backend that computes
// experts asynchronously (the CUDA decoder queues GEMMs on a stream), kept
// apart from any device so it is tested on the CPU.
//
// One MoE layer: BeginLayer(active) -> for each expert in the provider's
// order, Acquire it (blocking only on that expert's copy) and add it to the
// current batch; the batch is handed to the launcher as soon as the next
// expert is not Ready() (so the device computes while that copy lands) or the
// layer's experts run out -- with everything resident, one launch per layer.
// An expert is released only once its batch has finished (Done/Wait): the
// provider may hand a released slab to the next copy, which must not
// overwrite weights the device is still reading. When Acquire reports
// ResourceExhausted (every slab held by experts acquired earlier), the
// current batch is launched, finished batches are waited for and released,
// and Acquire is asked again. Whatever fails, every acquired expert is
// released after Drain() and the layer is ended.
// Host execution: given the routed tokens of each expert, the layer is begun
// with BeginRoutedLayer; the experts the plan puts on the host are told to
// the launcher (PrepareHost) before anything is launched, and each, in its
// turn, is computed by ComputeOnHost on the calling thread after the batch
// before it has been launched -- so the device computes that batch while the
// host computes -- and its time reported to the provider (OnHostExpertTime).
// Thread safety: call from the thread running the layer's forward pass.
#ifndef VISMOE_ENGINE_OFFLOAD_EXPERT_BATCH_RUNNER_H_
#define VISMOE_ENGINE_OFFLOAD_EXPERT_BATCH_RUNNER_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/stats_sink.h"
#include "engine/offload/expert_provider.h"

namespace vismoe {

struct AcquiredExpert {
  int expert = -1;
  ExpertWeights weights;
};

// The backend side: queues work and reports when it has finished reading the
// weights. Tickets are 0, 1, 2, ... within one layer (at most one per
// expert), so a backend can keep one completion marker per ticket.
class ExpertBatchLauncher {
 public:
  virtual ~ExpertBatchLauncher() = default;
  // Queues the computation of `batch`; returns once queued.
  virtual absl::Status Launch(absl::Span<const AcquiredExpert> batch, int ticket) = 0;
  // Non-blocking: has batch `ticket` finished?
  virtual absl::StatusOr<bool> Done(int ticket) = 0;
  // Blocks until batch `ticket` has finished.
  virtual absl::Status Wait(int ticket) = 0;
  // Blocks until everything queued has finished (also after a failed Launch).
  virtual absl::Status Drain() = 0;
  // The experts of this layer the provider put on the host, told once before
  // the first Launch (a backend may start moving their rows to the host).
  virtual absl::Status PrepareHost(absl::Span<const int> /*experts*/) { return absl::OkStatus(); }
  // Computes `expert` over its rows from host-memory `weights` on the calling
  // thread, while launched batches run; its output goes where the device's
  // would have. The default cannot.
  virtual absl::Status ComputeOnHost(int expert, const ExpertWeights& weights);
};

// Experts a layer launched and has not released yet, kept by a caller that
// learns later that their batches finished (a device backend waits for its
// stream at the next layer's routing anyway), so a layer need not wait for
// its own GEMMs. Releasing them before the provider's next call leaves it in
// the state an immediate release would have: a released expert's slab is
// Expired either way, and EndLayer passes over slabs still held.
// Thread safety: none; the forward thread's.
class HeldExperts {
 public:
  void Add(ExpertProvider* provider, int layer, int expert) {
    held_.push_back({provider, layer, expert});
  }
  // REQUIRES: every batch that read them has finished.
  void ReleaseAll() {
    for (const Held& h : held_) h.provider->Release(h.layer, h.expert);
    held_.clear();
  }
  bool empty() const { return held_.empty(); }

 private:
  struct Held {
    ExpertProvider* provider;
    int layer;
    int expert;
  };
  std::vector<Held> held_;
};

// Runs one layer's `active` experts (distinct ids) through `provider` and
// `launcher`; `tokens` (tokens[i] rows routed to active[i]) lets the provider
// put experts on the host, empty = every expert on the device (BeginLayer).
// With `keep`, a layer that succeeds does not Drain(): the experts whose
// batches may still run go to `keep` unreleased (the caller releases them
// once it knows those finished, before its next call to the provider). On
// failure everything is drained and released as without it.
// Returns the first error (InternalError when the provider returns an expert
// that was not declared, or not as many as declared).
absl::Status RunExpertBatches(ExpertProvider& provider, Phase phase, int layer,
                              absl::Span<const int> active, absl::Span<const int64_t> tokens,
                              ExpertBatchLauncher& launcher, HeldExperts* keep = nullptr);
inline absl::Status RunExpertBatches(ExpertProvider& provider, Phase phase, int layer,
                                     absl::Span<const int> active, ExpertBatchLauncher& launcher) {
  return RunExpertBatches(provider, phase, layer, active, {}, launcher);
}

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_EXPERT_BATCH_RUNNER_H_
