// OffloadExpertProvider's per-sequence preload (MELINOE's post-deployment
// stage; the rule in engine/policy/preload.md): kept apart from the demand,
// prefetch and eviction paths in offload_expert_provider.cc, which it touches
// only through the slab cache's protected set and the `preloaded` slot mark.
#include <utility>
#include <vector>

#include "engine/offload/offload_expert_provider.h"

namespace vismoe {
namespace {

// Transfer priority of preload copies: below every demand miss (1e12 - n),
// above every prefetch (predictor scores); earlier entries of the preload
// order first.
constexpr double kPreloadPriority = 1e9;

}  // namespace

void OffloadExpertProvider::Preload(uint64_t owner,
                                    const std::vector<std::vector<int>>& preferred) {
  std::lock_guard<std::mutex> lock(mu_);
  preload_->Set(owner, preferred);
  ApplyPreloadLocked();
}

void OffloadExpertProvider::EndPreload(uint64_t owner) {
  std::lock_guard<std::mutex> lock(mu_);
  const int before = preload_->owners();
  preload_->Erase(owner);
  if (preload_->owners() != before) ApplyPreloadLocked();
}

int64_t OffloadExpertProvider::ProtectedExperts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_->protected_count();
}

void OffloadExpertProvider::ApplyPreloadLocked() {
  const std::vector<std::pair<int, int>> keep = preload_->Protected();
  cache_->SetProtected(keep);
  // "Used" counts a preloaded expert used while it is kept: an expert that
  // lost its protection unused no longer counts as preloaded.
  for (int i = 0; i < cache_->num_slots(); ++i) {
    const SlabCache::Slot& s = cache_->slot(i);
    if (s.preloaded && !cache_->IsProtected(s.layer, s.expert)) cache_->SetPreloaded(i, false);
  }
  if (shutting_down_) return;
  uint64_t issued = 0;
  for (const auto& [layer, expert] : keep) {
    if (cache_->Find(layer, expert) >= 0) continue;
    // Free or unprotected Expired only: a preload never takes what a running
    // layer, a prefetch or another sequence's preferred set holds.
    const int victim = cache_->PickVictim(/*demand=*/false);
    if (victim < 0) break;
    cache_->Assign(victim, layer, expert, SlotState::kSpeculative, /*prefetched=*/false);
    cache_->SetPreloaded(victim, true);
    StartCopyLocked(victim, layer, expert, kPreloadPriority - static_cast<double>(issued));
    ++issued;
  }
  if (issued > 0) {
    request_.preload_issued += issued;
    sink_->OnPreloadIssued(issued);
  }
  PublishSlotGaugesLocked();
}

}  // namespace vismoe
