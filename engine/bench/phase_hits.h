// PhaseHitCounter: the StatsSink vismoe-bench hands the engine, counting
// expert-cache lookups and hits per phase, so a report gives the decode hit
// ratio apart from prefill's (an image prefill looks up thousands of experts
// and would otherwise dominate the ratio), and the experts copied (transfers,
// MELINOE's figure of merit) per phase: a copy counts in the phase of the
// last lookup before it, except the copies a per-sequence preload makes after
// a prefill, which count apart. It also notes which layers are offloaded
// (those with prefetch_needed events). Everything else the engine reports is
// dropped: the per-request results carry it.
// A step that mixes prefill chunks and decode tokens counts as prefill (the
// decoder's rule); the bench runs one request at a time, so its steps do not
// mix and nothing else copies between a prefill and its preload.
// Thread safety: calls from any engine thread (atomics); Totals() at any time.
#ifndef VISMOE_ENGINE_BENCH_PHASE_HITS_H_
#define VISMOE_ENGINE_BENCH_PHASE_HITS_H_

#include <atomic>
#include <cstdint>

#include "engine/core/stats_sink.h"

namespace vismoe::bench {

// Lookups, hits and expert copies of one phase.
struct PhaseHits {
  uint64_t queries = 0;
  uint64_t hits = 0;
  uint64_t transfers = 0;   // experts copied host -> device
  uint64_t offloaded = 0;   // of the lookups, those outside the pinned prefix
  double HitRatio() const;  // 1 when there were no lookups
};

struct PhaseHitTotals {
  PhaseHits prefill;
  PhaseHits decode;
  uint64_t preload_transfers = 0;  // copied by per-sequence preload
  int offloaded_layers = 0;        // layers seen offloaded so far (not a counter)
};

class PhaseHitCounter : public NullStatsSink {
 public:
  void OnExpertQuery(Phase phase, int layer, bool hit) override;
  void OnPrefetchNeeded(int layer, bool recalled) override;
  void OnBytesHostToDevice(uint64_t bytes) override;
  void OnPreloadIssued(uint64_t count) override;
  PhaseHitTotals Totals() const;

 private:
  static int Index(Phase phase) { return phase == Phase::kPrefill ? 0 : 1; }
  static constexpr int kLayerWords = 4;  // layers 0..255
  std::atomic<uint64_t> queries_[2] = {0, 0};
  std::atomic<uint64_t> hits_[2] = {0, 0};
  std::atomic<uint64_t> transfers_[2] = {0, 0};
  std::atomic<uint64_t> offloaded_lookups_[2] = {0, 0};
  std::atomic<uint64_t> preload_ = 0;
  std::atomic<int> last_phase_ = 0;  // Index() of the last lookup
  std::atomic<uint64_t> offloaded_[kLayerWords] = {0, 0, 0, 0};
};

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_PHASE_HITS_H_
