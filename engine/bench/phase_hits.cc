#include "engine/bench/phase_hits.h"

#include <bit>

namespace vismoe::bench {

double PhaseHits::HitRatio() const {
  return queries > 0 ? static_cast<double>(hits) / static_cast<double>(queries) : 1.0;
}

void PhaseHitCounter::OnExpertQuery(Phase phase, int /*layer*/, bool hit) {
  queries_[Index(phase)].fetch_add(1, std::memory_order_relaxed);
  if (hit) hits_[Index(phase)].fetch_add(1, std::memory_order_relaxed);
  last_phase_.store(Index(phase), std::memory_order_relaxed);
}

// Called right after its lookup's OnExpertQuery, so last_phase_ is its phase.
void PhaseHitCounter::OnPrefetchNeeded(int layer, bool /*recalled*/) {
  offloaded_lookups_[last_phase_.load(std::memory_order_relaxed)].fetch_add(
      1, std::memory_order_relaxed);
  if (layer < 0 || layer >= 64 * kLayerWords) return;
  offloaded_[layer / 64].fetch_or(uint64_t{1} << (layer % 64), std::memory_order_relaxed);
}

// One call per expert copy (OffloadExpertProvider::StartCopyLocked).
void PhaseHitCounter::OnBytesHostToDevice(uint64_t /*bytes*/) {
  transfers_[last_phase_.load(std::memory_order_relaxed)].fetch_add(1, std::memory_order_relaxed);
}

// A preload's copies were just counted in the phase of the prefill before
// them: move them to their own count.
void PhaseHitCounter::OnPreloadIssued(uint64_t count) {
  transfers_[last_phase_.load(std::memory_order_relaxed)].fetch_sub(count,
                                                                    std::memory_order_relaxed);
  preload_.fetch_add(count, std::memory_order_relaxed);
}

PhaseHitTotals PhaseHitCounter::Totals() const {
  PhaseHitTotals t;
  t.prefill = {queries_[0].load(), hits_[0].load(), transfers_[0].load(),
               offloaded_lookups_[0].load()};
  t.decode = {queries_[1].load(), hits_[1].load(), transfers_[1].load(),
              offloaded_lookups_[1].load()};
  t.preload_transfers = preload_.load();
  for (const std::atomic<uint64_t>& w : offloaded_) t.offloaded_layers += std::popcount(w.load());
  return t;
}

}  // namespace vismoe::bench
