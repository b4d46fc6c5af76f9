// StatsSink: how the engine reports counters and timings to whoever serves it.
// The engine knows nothing of Prometheus; server/ implements this interface
// and maps each call onto the metric names fixed in DESIGN.md.
//
// Thread safety: implementations must accept calls from any engine thread.
#ifndef VISMOE_ENGINE_CORE_STATS_SINK_H_
#define VISMOE_ENGINE_CORE_STATS_SINK_H_

#include <cstdint>
#include <string_view>

#include "engine/core/expert_skipping.h"
#include "engine/core/phase.h"

namespace vismoe {

enum class SlotState { kFree, kRequired, kSpeculative, kExpired };

class StatsSink {
 public:
  virtual ~StatsSink() = default;
  // One expert lookup in the slab cache (or pinned prefix) at `layer`.
  virtual void OnExpertQuery(Phase phase, int layer, bool hit) = 0;
  // One activated expert outside the pinned prefix; `recalled` if it was
  // resident or in flight when needed (Hot Recall).
  virtual void OnPrefetchNeeded(int layer, bool recalled) = 0;
  virtual void OnPrefetchIssued(uint64_t count) = 0;
  virtual void OnPrefetchUsed(uint64_t count) = 0;
  virtual void OnBytesHostToDevice(uint64_t bytes) = 0;
  virtual void OnTransferStall(double seconds) = 0;
  virtual void OnVisualTokensPruned(uint64_t count) = 0;
  virtual void OnCompressionTime(double seconds) = 0;
  virtual void OnPredictorTime(double seconds) = 0;
  // Routed (token, expert) activations MoDES expert skipping dropped
  // (engine/core/expert_skipping.h), of tokens of `modality`.
  virtual void OnExpertsSkipped(TokenModality modality, uint64_t count) = 0;
  // Current number of slab slots in `state` (gauge).
  virtual void SetSlotCount(SlotState state, int64_t count) = 0;
  // Device memory carved for a region: "resident", "pinned_prefix",
  // "slab_cache", "activations", "kv_cache" (gauge).
  virtual void SetMemoryRegion(std::string_view region, int64_t bytes) = 0;
};

// A sink that drops everything; the default when nobody listens.
class NullStatsSink final : public StatsSink {
 public:
  void OnExpertQuery(Phase, int, bool) override {}
  void OnPrefetchNeeded(int, bool) override {}
  void OnPrefetchIssued(uint64_t) override {}
  void OnPrefetchUsed(uint64_t) override {}
  void OnBytesHostToDevice(uint64_t) override {}
  void OnTransferStall(double) override {}
  void OnVisualTokensPruned(uint64_t) override {}
  void OnCompressionTime(double) override {}
  void OnPredictorTime(double) override {}
  void OnExpertsSkipped(TokenModality, uint64_t) override {}
  void SetSlotCount(SlotState, int64_t) override {}
  void SetMemoryRegion(std::string_view, int64_t) override {}
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_STATS_SINK_H_
