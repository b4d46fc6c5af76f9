#include "engine/bench/phase_hits.h"

namespace vismoe::bench {

double PhaseHits::HitRatio() const {
  return queries > 0 ? static_cast<double>(hits) / static_cast<double>(queries) : 1.0;
}

void PhaseHitCounter::OnExpertQuery(Phase phase, int /*layer*/, bool hit) {
  queries_[Index(phase)].fetch_add(1, std::memory_order_relaxed);
  if (hit) hits_[Index(phase)].fetch_add(1, std::memory_order_relaxed);
}

PhaseHitTotals PhaseHitCounter::Totals() const {
  PhaseHitTotals t;
  t.prefill = {queries_[0].load(), hits_[0].load()};
  t.decode = {queries_[1].load(), hits_[1].load()};
  return t;
}

}  // namespace vismoe::bench
