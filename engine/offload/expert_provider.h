// ExpertProvider: how a MoE layer gets the weights of the experts it routes to.
//
// The forward pass never reads expert weights from the checkpoint directly: it
// asks the provider, so the same arch code runs with everything resident
// (ResidentExpertProvider) or with the offload runtime's pinned prefix + slab
// cache, which may have to copy an expert in first.
//
// Protocol per MoE layer and step: BeginLayer(layer, experts) declares every
// expert the layer's tokens routed to, so missing ones start copying at once,
// and returns the order to compute them in (usable ones first, so compute
// overlaps the remaining copies). Then, for each expert in that order:
// Acquire() blocks until that one expert is usable and pins it; Release()
// unpins it (its slab may now be reused, which is what lets a cache smaller
// than one layer's working set still make progress). EndLayer() closes the
// layer for this step.
// A caller that can compute an expert on the host calls BeginRoutedLayer
// instead of BeginLayer, with each expert's routed token count: the provider
// may then put some experts on the host (a miss that costs less to compute
// from the host expert store than to copy, or a layer placed on the host; see
// engine/policy/host_experts.md). Those are computed from HostWeights() and
// never acquired or released.
// Because the compute order depends on the cache state, callers must make the
// result independent of it (e.g. keep each expert's output per token and
// top-k slot, and sum the slots in a fixed order) so every memory budget gives
// bit-identical logits.
// Thread safety: called from the one thread running a sequence's forward pass.
#ifndef VISMOE_ENGINE_OFFLOAD_EXPERT_PROVIDER_H_
#define VISMOE_ENGINE_OFFLOAD_EXPERT_PROVIDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/commit_miss_policy.h"
#include "engine/core/stats_sink.h"
#include "engine/core/tensor.h"

namespace vismoe {

// The weights of one expert, in one of the two published layouts.
struct ExpertWeights {
  enum class Layout {
    // Qwen3-VL-MoE fused: gate_up [H, 2I] (gate = first I columns), down [I, H].
    kFusedTransposed,
    // Qwen3-30B-A3B / OLMoE per expert: gate [I, H], up [I, H], down [H, I].
    kSeparate,
    // GPT-OSS's MXFP4 experts (nn.Linear orientation): gate_up [2I, H] (gate
    // and up interleaved rows, as kFusedTransposed's columns), down [H, I].
    kFused,
  };
  Layout layout = Layout::kFusedTransposed;
  TensorView gate_up;  // kFusedTransposed and kFused
  TensorView gate;     // kSeparate only
  TensorView up;       // kSeparate only
  TensorView down;
};

// What BeginRoutedLayer decides for one layer.
struct LayerPlan {
  std::vector<int> order;  // the declared experts, in the order to compute them
  // on_host[i] != 0: compute order[i] on the host from HostWeights(); empty =
  // none on the host.
  std::vector<char> on_host;

  bool OnHost(size_t i) const { return i < on_host.size() && on_host[i] != 0; }
};

class ExpertProvider {
 public:
  ExpertProvider() : instance_id_(NextInstanceId()) {}
  virtual ~ExpertProvider() = default;
  ExpertProvider(const ExpertProvider&) = delete;
  ExpertProvider& operator=(const ExpertProvider&) = delete;

  // `layer` is the decoder layer index throughout.
  // Declares the experts `layer` needs in this step (distinct ids) and returns
  // them permuted into the order they should be computed in.
  virtual absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                                      absl::Span<const int> experts) = 0;
  // Blocks until `expert` of `layer` is usable; pins it until Release().
  // REQUIRES: `expert` was declared by the current BeginLayer(layer, ...).
  virtual absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) = 0;
  // REQUIRES: a matching Acquire(layer, expert).
  virtual void Release(int layer, int expert) = 0;
  // A hint, never a promise: true when Acquire(layer, expert) would return
  // without waiting for a copy (resident, or its copy has landed). Lets a
  // backend launch the ready experts of a layer together (one grouped GEMM)
  // and the rest as they arrive. The default (false) means one at a time.
  // REQUIRES: `expert` was declared by the current BeginLayer(layer, ...).
  virtual bool Ready(int /*layer*/, int /*expert*/) { return false; }
  // The layer is done for the current step.
  virtual void EndLayer(int layer) = 0;
  // While set (non-null), an Acquire blocked on a copy polls `interrupted`
  // every few milliseconds, off the provider's lock, and returns Cancelled
  // once it is true: the step's every sequence was cancelled or expired, and
  // no one is left to wait for the copy (which completes on its own). The
  // default provider never blocks and ignores it.
  virtual void SetStepInterrupt(std::function<bool()> /*interrupted*/) {}
  // For the commit miss policy (engine/core/commit_miss_policy.h), between
  // layers (before BeginLayer(layer)): which experts of `layer` are resident
  // or in flight, and those the predictor chose for it. The default: every
  // expert is resident (nothing to commit to instead of a copy).
  virtual ExpertAvailability Availability(int /*layer*/) {
    return ExpertAvailability{true, {}, {}};
  }

  // BeginLayer, told the routed tokens (rows) of each declared expert
  // (tokens[i] for experts[i]), for a caller able to compute experts on the
  // host. The default puts none there.
  // REQUIRES: tokens.size() == experts.size(), each >= 1.
  virtual absl::StatusOr<LayerPlan> BeginRoutedLayer(Phase phase, int layer,
                                                     absl::Span<const int> experts,
                                                     absl::Span<const int64_t> tokens);
  // Host-memory weights of an expert the current plan put on the host; the
  // views stay valid for the provider's life. FailedPrecondition otherwise.
  virtual absl::StatusOr<ExpertWeights> HostWeights(int layer, int expert);
  // One measured computation of an expert over `tokens` rows by the host's
  // kernels, taking `seconds`: what the host-compute decision is made from.
  // The CPU backend reports every expert it computes (its device memory is
  // host memory), other backends those they compute on the host.
  virtual void OnHostExpertTime(int64_t /*tokens*/, double /*seconds*/) {}
  // Speculative execution (engine/core/speculative_execution.h), typically
  // while a layer waits on a copy: the weights of `expert` of a layer other
  // than the running one (one ahead, not declared), pinned, when they are
  // usable now -- resident with their copy complete. NotFound otherwise;
  // never waits, starts a copy or counts a lookup. The default: NotFound
  // (nothing is computed ahead).
  virtual absl::StatusOr<ExpertWeights> AcquireIfResident(int /*layer*/, int /*expert*/) {
    return absl::NotFoundError("this expert provider computes nothing ahead");
  }
  // Unpins what AcquireIfResident pinned, leaving the slab's state as it was.
  // REQUIRES: a matching successful AcquireIfResident(layer, expert).
  virtual void ReleaseResident(int /*layer*/, int /*expert*/) {}
  // True when the views Acquire() returns stay valid after Release(), for as
  // long as the provider lives (weights in memory it never recycles, such as
  // the mmapped checkpoint), so another component may keep them
  // (HostExpertStore's mapped mode). The default makes no such promise.
  virtual bool views_outlive_release() const { return false; }

  // Pinned layers (a backend computes them without asking the provider; the
  // GPU decode step's hit path, engine/backends/cuda/README.md):
  // True when every expert of `layer` sits in one place for the provider's
  // whole life -- the pinned prefix -- so PinnedWeights views never change.
  virtual bool LayerPinned(int /*layer*/) const { return false; }
  // The weights of `expert` of a pinned layer, without a lookup, a count or
  // a pin; FailedPrecondition for a layer that is not pinned.
  virtual absl::StatusOr<ExpertWeights> PinnedWeights(int layer, int expert);
  // Tells the provider, after the fact, that `layer` computed `experts`
  // (distinct ids) from PinnedWeights in this step: the same counters,
  // prediction and prefetch as BeginLayer + EndLayer of those experts.
  // REQUIRES: LayerPinned(layer); called in layer order, as the forward pass
  // would have called BeginLayer.
  virtual absl::Status RecordPinnedLayer(Phase phase, int layer, absl::Span<const int> experts);

  // Unique among the providers of this process (never reused), so a backend
  // can tell a provider it built per-layer tables for from a new one at the
  // same address.
  uint64_t instance_id() const { return instance_id_; }

 private:
  static uint64_t NextInstanceId() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }
  const uint64_t instance_id_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_EXPERT_PROVIDER_H_
