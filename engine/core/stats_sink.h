// StatsSink: how the engine reports counters and timings to whoever serves it.
// The engine knows nothing of Prometheus; server/ implements this interface
// and maps each call onto the metric names fixed in DESIGN.md.
//
// Thread safety: implementations must accept calls from any engine thread.
#ifndef VISMOE_ENGINE_CORE_STATS_SINK_H_
#define VISMOE_ENGINE_CORE_STATS_SINK_H_

#include <cstdint>
#include <string_view>

#include "absl/types/span.h"
#include "engine/core/commit_miss_policy.h"
#include "engine/core/expert_skipping.h"
#include "engine/core/phase.h"

namespace vismoe {

enum class SlotState { kFree, kRequired, kSpeculative, kExpired };

// Device seconds one op family took in a forward step (OnDeviceStep).
struct DeviceOpTime {
  std::string_view family;
  double seconds = 0;
};

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
  // Per-sequence preload (MELINOE): experts copied in for a sequence's
  // preferred set; of those, used by a later step before eviction.
  virtual void OnPreloadIssued(uint64_t count) = 0;
  virtual void OnPreloadUsed(uint64_t count) = 0;
  virtual void OnBytesHostToDevice(uint64_t bytes) = 0;
  virtual void OnTransferStall(double seconds) = 0;
  // `count` experts computed on the host from the host expert store instead
  // of being copied to the device (miss policy cpu, static host layers), and
  // the `bytes_not_copied` that spared the copy engine.
  virtual void OnExpertsHostComputed(uint64_t count, uint64_t bytes_not_copied) = 0;
  virtual void OnVisualTokensPruned(uint64_t count) = 0;
  virtual void OnCompressionTime(double seconds) = 0;
  virtual void OnPredictorTime(double seconds) = 0;
  // Routed (token, expert) activations MoDES expert skipping dropped
  // (engine/core/expert_skipping.h), of tokens of `modality`.
  virtual void OnExpertsSkipped(TokenModality modality, uint64_t count) = 0;
  // Routed (token, expert) activations the commit miss policy computed without
  // a copy (engine/core/commit_miss_policy.h): `router` with the router's own
  // expert (resident or in flight), `substitute` with a predicted expert in
  // place of a missing one (differing from the router).
  virtual void OnExpertsCommitted(uint64_t router, uint64_t substitute) = 0;
  // (token, expert) pairs speculative execution computed ahead
  // (engine/core/speculative_execution.h): `kept` entered the output (the
  // router agreed), `discarded` did not.
  virtual void OnSpeculativeExecutions(uint64_t kept, uint64_t discarded) = 0;
  // Current number of slab slots in `state` (gauge).
  virtual void SetSlotCount(SlotState state, int64_t count) = 0;
  // Device memory carved for a region: "resident", "pinned_prefix",
  // "slab_cache", "activations", "kv_cache" (gauge).
  virtual void SetMemoryRegion(std::string_view region, int64_t bytes) = 0;
  // One forward step of the batch scheduler: how many sequences and rows
  // (decode tokens + prefill chunk tokens) it ran.
  virtual void OnSchedulerStep(int sequences, int64_t tokens) = 0;
  // Sequences the engine is running (admitted, holding KV blocks) and
  // waiting to be admitted (gauges).
  virtual void SetSequences(int64_t running, int64_t waiting) = 0;
  // KV cache blocks held by running sequences, of the pool's total (gauges).
  virtual void SetKvBlocks(int64_t used, int64_t total) = 0;
  // One running sequence preempted: its KV blocks freed for others, its
  // tokens to be recomputed when it runs again (counter).
  virtual void OnPreemption() = 0;
  // Where the device's time of one forward step of `rows` rows went: its
  // whole `seconds` and the share of each op family ("attention", "experts",
  // ...), from a device backend asked to time its ops
  // (EngineOptions::device_op_timing). Profiling only: not a metric.
  virtual void OnDeviceStep(int64_t /*rows*/, double /*seconds*/,
                            absl::Span<const DeviceOpTime> /*ops*/) {}
};

// A sink that drops everything; the default when nobody listens, and the
// base of a sink that wants only some of the calls (tests).
class NullStatsSink : public StatsSink {
 public:
  void OnExpertQuery(Phase, int, bool) override {}
  void OnPrefetchNeeded(int, bool) override {}
  void OnPrefetchIssued(uint64_t) override {}
  void OnPrefetchUsed(uint64_t) override {}
  void OnPreloadIssued(uint64_t) override {}
  void OnPreloadUsed(uint64_t) override {}
  void OnBytesHostToDevice(uint64_t) override {}
  void OnTransferStall(double) override {}
  void OnExpertsHostComputed(uint64_t, uint64_t) override {}
  void OnVisualTokensPruned(uint64_t) override {}
  void OnCompressionTime(double) override {}
  void OnPredictorTime(double) override {}
  void OnExpertsSkipped(TokenModality, uint64_t) override {}
  void OnExpertsCommitted(uint64_t, uint64_t) override {}
  void OnSpeculativeExecutions(uint64_t, uint64_t) override {}
  void SetSlotCount(SlotState, int64_t) override {}
  void SetMemoryRegion(std::string_view, int64_t) override {}
  void OnSchedulerStep(int, int64_t) override {}
  void SetSequences(int64_t, int64_t) override {}
  void SetKvBlocks(int64_t, int64_t) override {}
  void OnPreemption() override {}
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_STATS_SINK_H_
