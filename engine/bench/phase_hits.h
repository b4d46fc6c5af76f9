// PhaseHitCounter: the StatsSink vismoe-bench hands the engine, counting
// expert-cache lookups and hits per phase, so a report gives the decode hit
// ratio apart from prefill's (an image prefill looks up thousands of experts
// and would otherwise dominate the ratio). Everything else the engine reports
// is dropped: the per-request results carry it.
// A step that mixes prefill chunks and decode tokens counts as prefill (the
// decoder's rule); the bench runs one request at a time, so its steps do not mix.
// Thread safety: calls from any engine thread (atomics); Totals() at any time.
#ifndef VISMOE_ENGINE_BENCH_PHASE_HITS_H_
#define VISMOE_ENGINE_BENCH_PHASE_HITS_H_

#include <atomic>
#include <cstdint>

#include "engine/core/stats_sink.h"

namespace vismoe::bench {

// Lookups and hits of one phase.
struct PhaseHits {
  uint64_t queries = 0;
  uint64_t hits = 0;
  double HitRatio() const;  // 1 when there were no lookups
};

struct PhaseHitTotals {
  PhaseHits prefill;
  PhaseHits decode;
};

class PhaseHitCounter : public NullStatsSink {
 public:
  void OnExpertQuery(Phase phase, int layer, bool hit) override;
  PhaseHitTotals Totals() const;

 private:
  static int Index(Phase phase) { return phase == Phase::kPrefill ? 0 : 1; }
  std::atomic<uint64_t> queries_[2] = {0, 0};
  std::atomic<uint64_t> hits_[2] = {0, 0};
};

}  // namespace vismoe::bench

#endif  // VISMOE_ENGINE_BENCH_PHASE_HITS_H_
