// OffloadExpertProvider: ExpertProvider over the pinned prefix + slab cache +
// transfer engine (VisMMOE 3.4). Experts of the first L_pinned MoE layers sit
// in the pinned-prefix region of the device arena for the whole run; experts
// of deeper layers are copied on demand (and by prefetch) from the host
// expert store into one-expert slabs.
//
// Per offloaded layer: BeginLayer queries the cache for every declared expert
// (a hit = resident or in flight), marks them Required, queues copies for the
// misses into Free/Expired (or, for demand, Speculative) slabs at demand
// priority, then, if a predictor is set and no demand is left waiting,
// prefetches the predictor's top-B experts of the next offloaded layer into
// Free/Expired slabs as Speculative at lower priority. A pinned layer's
// BeginLayer also prefetches for the first offloaded layer after it (the
// pinned prefix is the start-up overlap window). With the guarded eviction
// policy the predictor's scores for the offloaded layers of the next
// lookahead_window become slot priorities (unpredicted experts and layers just
// run get 0), so Expired slabs nobody expects soon are evicted first.
// Prediction only moves weights earlier; it never changes what is computed. Acquire blocks only on
// the one expert asked for (stall time is counted) and pins it; a layer never
// computes with a slab whose copy has not completed. Release unpins and
// expires the slab, so a cache smaller than one layer's working set still
// progresses; waiting demand is then dispatched into it. EndLayer expires what
// is left of the layer and unused prefetches targeted at it.
// Host execution (engine/policy/host_experts.md): through BeginRoutedLayer a
// miss may be computed on the host from the host store instead of copied --
// every miss of the last options.host_moe_layers MoE layers (static
// placement: never copied, never prefetched), and with miss policy cpu a miss
// whose estimated host time for its routed tokens (HostComputeCost, fed by
// OnHostExpertTime) is below its copy time at the measured bandwidth. Such an
// expert is counted as a query that missed, is not copied, and comes from
// HostWeights(); plain BeginLayer copies every miss.
// With every slab Required and nothing in flight, Acquire fails with
// ResourceExhausted instead of blocking forever (callers must acquire in the
// order BeginLayer returns; the engine does).
// Per-sequence preload (MELINOE; Preload/EndPreload, preload_set.h, kept in
// offload_expert_provider_preload.cc): a sequence's preferred experts are
// copied in after its prefill and protected from eviction until it ends.
//
// Thread safety: the ExpertProvider calls come from one forward-pass thread;
// a mutex guards all state because the copy thread completes transfers, and
// TakeRequestStats/SetExpertPriority may be called from any thread.
// Ownership: owns its arena, host store, slab cache, transfer engine and
// predictor; `stats` (may be null) must outlive it. The predictor is also
// the forward pass's RouterObserver (observer()): its hooks run on the
// forward thread while the provider is idle, its Predict() under mu_.
#ifndef VISMOE_ENGINE_OFFLOAD_OFFLOAD_EXPERT_PROVIDER_H_
#define VISMOE_ENGINE_OFFLOAD_OFFLOAD_EXPERT_PROVIDER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/policy_names.h"
#include "engine/core/stats_sink.h"
#include "engine/model/model_config.h"
#include "engine/offload/copy_backend.h"
#include "engine/offload/device_allocator.h"
#include "engine/offload/device_arena.h"
#include "engine/offload/expert_predictor.h"
#include "engine/offload/expert_provider.h"
#include "engine/offload/host_compute_cost.h"
#include "engine/offload/host_expert_store.h"
#include "engine/offload/memory_plan.h"
#include "engine/offload/offload_options.h"
#include "engine/offload/offload_stats.h"
#include "engine/offload/preload_set.h"
#include "engine/offload/slab_cache.h"
#include "engine/offload/transfer_engine.h"

namespace vismoe {

// Where the offload runtime's memory lives and how experts move. All borrowed
// (they must outlive the provider); null members are the CPU backend's
// defaults. The CUDA backend passes cuda::PinnedHostAllocator,
// cuda::CudaDeviceAllocator and cuda::CudaCopyBackend: ExpertWeights from
// Acquire() then point into device memory.
struct OffloadDevice {
  HostAllocator* host_allocator = nullptr;      // host store; null = aligned heap
  DeviceAllocator* device_allocator = nullptr;  // arena; null = heap
  CopyBackend* copy = nullptr;                  // slab and pinned-prefix copies; null = memcpy
  // The dtype experts are packed in, converted once at Create (the CUDA
  // backend runs bf16 experts whatever the checkpoint holds); unset = the
  // checkpoint's.
  std::optional<DType> expert_dtype;
  // The host's available memory in bytes (HostMemoryAvailable()), for
  // host_experts=auto; 0 = unknown.
  int64_t host_memory_available = 0;
};

class OffloadExpertProvider final : public ExpertProvider {
 public:
  // Packs the experts of `plan`'s layers from `source` (used only during
  // Create) into the pinned prefix and the host store, carves the arena and
  // starts the copy thread. `predictor` null = no prefetch (and guarded
  // eviction falls back to last use). Where options.host_experts maps
  // (MapHostExperts) and the source's views outlive Release() (the
  // checkpoint's), the store keeps the source's views instead of a packed
  // copy: REQUIRES then that the memory behind them (the checkpoint) outlives
  // the provider.
  static absl::StatusOr<std::unique_ptr<OffloadExpertProvider>> Create(
      ExpertProvider& source, const TextConfig& config, const MemoryPlan& plan,
      const OffloadOptions& options, StatsSink* stats,
      std::unique_ptr<ExpertPredictor> predictor = nullptr, const OffloadDevice& device = {});
  ~OffloadExpertProvider() override;
  OffloadExpertProvider(const OffloadExpertProvider&) = delete;
  OffloadExpertProvider& operator=(const OffloadExpertProvider&) = delete;

  absl::StatusOr<std::vector<int>> BeginLayer(Phase phase, int layer,
                                              absl::Span<const int> experts) override;
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override;
  void SetStepInterrupt(std::function<bool()> interrupted) override;
  // Pinned-prefix experts, and cached experts whose copy has completed.
  bool Ready(int layer, int expert) override;
  void Release(int layer, int expert) override;
  void EndLayer(int layer) override;
  // Pinned layers: all. Offloaded layers: the experts the slab cache holds or
  // is copying, and the predictor's choice recorded by the last prefetch
  // aimed at the layer (cleared when demand misses left no room to prefetch).
  ExpertAvailability Availability(int layer) override;
  absl::StatusOr<LayerPlan> BeginRoutedLayer(Phase phase, int layer, absl::Span<const int> experts,
                                             absl::Span<const int64_t> tokens) override;
  absl::StatusOr<ExpertWeights> HostWeights(int layer, int expert) override;
  // Feeds the cost model (miss policy cpu only; ignored otherwise).
  void OnHostExpertTime(int64_t tokens, double seconds) override;

  // The cost model's estimate for one expert over `tokens` rows, and the copy
  // time of one expert it is weighed against (0 while the bandwidth is
  // unknown); tests and logs.
  std::optional<double> HostSecondsEstimate(int64_t tokens) const;
  double CopySecondsEstimate() const;
  // Speculative execution (offload_expert_provider_speculative.cc): a
  // pinned-prefix expert, or a slab of another layer than the running one
  // whose copy has completed, pinned without a lookup or a state change.
  absl::StatusOr<ExpertWeights> AcquireIfResident(int layer, int expert) override;
  // Unpins; waiting demand misses may then take the slab.
  void ReleaseResident(int layer, int expert) override;
  // The pinned prefix's layers; their views point into the prefix.
  bool LayerPinned(int layer) const override {
    return layer >= 0 && layer < static_cast<int>(kind_.size()) && kind_[layer] == Kind::kPinned;
  }
  absl::StatusOr<ExpertWeights> PinnedWeights(int layer, int expert) override;

  // A new sequence starts: the predictor drops its per-request state.
  void BeginRequest();
  // The predictor as the forward pass's observer; null without one. Feed it
  // every hook of every forward step (DecoderInput::observer, possibly
  // through a chain), or prefetch has nothing to go on.
  RouterObserver* observer() { return predictor_.get(); }

  // Counters since the last call (the per-request slice), then reset.
  OffloadStats TakeRequestStats();
  // Eviction priority for the guarded policy, set by an outside predictor.
  void SetExpertPriority(int layer, int expert, double priority);
  const MemoryPlan& plan() const { return plan_; }
  const ExpertFormat& format() const { return store_->format(); }
  // True when copies read the checkpoint (no packed host copy was made).
  bool host_experts_mapped() const { return store_->mapped(); }
  // Host bytes of the packed copy (0 when mapped).
  size_t host_store_bytes() const { return store_->total_bytes(); }
  // Copy engine statistics (bytes, busy time) for bandwidth measurement.
  TransferEngine::Stats transfer_stats() const { return transfer_->stats(); }
  // Blocks until no copy is queued or running (tests, benchmarks).
  void WaitForTransfers() { transfer_->WaitIdle(); }
  // Slot-table consistency (tests): false with a reason.
  bool CheckInvariants(std::string* why) const;

  // ---- Per-sequence preload (offload_expert_provider_preload.cc) ----
  // `owner`'s preferred experts (`preferred[l]`: decoder layer l's, best
  // first; layers outside the slab cache are ignored), replacing what it had.
  // The experts PreloadSet grants the running owners are protected from
  // eviction (SlabCache::SetProtected), and those not cached are copied in
  // now, in preload order, into Free or unprotected Expired slabs (never
  // evicting a Required, Speculative or protected one) at a priority below
  // demand misses and above prefetches. Call between forward steps.
  void Preload(uint64_t owner, const std::vector<std::vector<int>>& preferred);
  // `owner` has ended: its experts lose their protection (they stay cached
  // until evicted as usual) and the other owners' quotas grow, which may copy
  // in more of their experts. No-op for an unknown owner.
  void EndPreload(uint64_t owner);
  // Experts protected now (tests).
  int64_t ProtectedExperts() const;

 private:
  enum class Kind { kDense, kPinned, kOffloaded };
  static constexpr double kDemandPriority = 1e12;

  OffloadExpertProvider() = default;
  absl::Status CheckIds(int layer, int expert) const;
  // Reads and checks miss_policy and host_moe_layers, and marks the host layers.
  absl::Status SetUpHostExecution(const OffloadOptions& options);
  // BeginLayer (host_ok false: every miss is copied) and BeginRoutedLayer.
  absl::StatusOr<LayerPlan> Begin(Phase phase, int layer, absl::Span<const int> experts,
                                  absl::Span<const int64_t> tokens, bool host_ok);
  // An offloaded layer's lookups: hits marked Required, misses to the host
  // or to pending_; returns the plan. REQUIRES: current_layer_ == layer.
  LayerPlan PlanLocked(Phase phase, int layer, absl::Span<const int> experts,
                       absl::Span<const int64_t> tokens, bool host_ok);
  // Updates eviction priorities and prefetches after `layer`, timed.
  void PredictLocked(int layer);
  // Whether a miss of `layer` over `tokens` rows is computed on the host.
  bool HostComputesLocked(int layer, int64_t tokens) const;
  double CopySecondsLocked() const;
  // Counts `count` experts computed on the host.
  void CountHostLocked(uint64_t count);
  const void* SlabData(int slot) const { return slabs_ + static_cast<size_t>(slot) * stride_; }
  // Gives waiting demand misses slabs, in order; returns how many started.
  int DispatchDemandLocked();
  void PrefetchLocked(int layer);
  // Guarded policy: priorities from the predictor for the window after `layer`.
  void UpdatePrioritiesLocked(int layer);
  void StartCopyLocked(int slot, int layer, int expert, double priority);
  void OnCopyDone(int slot, const absl::Status& copied);
  void PublishSlotGaugesLocked();
  // Protects what preload_ grants and copies in the missing ones.
  void ApplyPreloadLocked();

  MemoryPlan plan_;
  OffloadOptions options_;
  int num_experts_ = 0;
  int prefetch_count_ = 0;
  StatsSink* sink_ = nullptr;
  std::vector<Kind> kind_;  // per decoder layer
  MissPolicy miss_policy_ = MissPolicy::kFetch;
  std::vector<char> host_layer_;  // per decoder layer: statically on the host
  // Per decoder layer: the next offloaded layer not on the host (wraps), or
  // -1: where prefetch and eviction priorities look ahead to.
  std::vector<int> next_offloaded_;
  std::vector<const char*> pinned_;  // per decoder layer: its pinned-prefix block, or null
  std::unique_ptr<DeviceArena> arena_;
  std::unique_ptr<HostExpertStore> store_;
  ExpertFormat store_format_pinned_;  // format of the pinned-prefix blocks
  char* slabs_ = nullptr;
  size_t stride_ = 0;         // bytes of one slab / host block
  size_t pinned_stride_ = 0;  // bytes of one pinned-prefix block

  mutable std::mutex mu_;
  std::condition_variable cv_;                  // a copy completed or a slab was released
  std::unique_ptr<SlabCache> cache_;            // guarded by mu_
  std::unique_ptr<ExpertPredictor> predictor_;  // Predict guarded by mu_; null = no prefetch
  int current_layer_ = -1;                      // guarded by mu_
  std::vector<int> pending_;    // guarded by mu_: declared misses without a slab, in order
  std::vector<int> declared_;   // guarded by mu_: experts of current_layer_
  std::vector<int> on_host_;    // guarded by mu_: those the plan put on the host
  HostComputeCost host_cost_;   // guarded by mu_
  int in_flight_ = 0;           // guarded by mu_
  bool shutting_down_ = false;  // guarded by mu_
  std::function<bool()> interrupt_;  // guarded by mu_; SetStepInterrupt
  // Guarded by mu_: experts whose copy failed since the last BeginLayer, and
  // why. Acquire of one of them fails with that error instead of waiting; the
  // next BeginLayer forgets them and copies again (the server keeps serving).
  std::vector<std::pair<int64_t, absl::Status>> failed_copies_;
  uint64_t demand_seq_ = 0;  // guarded by mu_
  // Guarded by mu_: per decoder layer, the predictor's top-B for it at the
  // last prefetch aimed at it (the commit miss policy's candidates).
  std::vector<std::vector<int>> predicted_;
  OffloadStats request_;                      // guarded by mu_
  std::unique_ptr<PreloadSet> preload_;       // guarded by mu_
  std::unique_ptr<TransferEngine> transfer_;  // declared last: joined first
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_OFFLOAD_EXPERT_PROVIDER_H_
