// SlabCache: the slot table of the dynamic expert cache (VisMMOE 3.4.2).
// N fixed-size slots, each holding one (layer, expert) or nothing.
//
// Slot states (stats_sink.h SlotState):
//   Free        holds nothing.
//   Required    declared by the layer now running and not yet released: the
//               head of the lookahead window. Never evicted.
//   Speculative prefetched for a layer ahead, not yet demanded (kept to absorb
//               short-term prediction shifts). Reclaimable by a demand miss only.
//   Expired     its layer is done for the current token (released, or the
//               layer ended, or the prefetch target passed unused).
// Victim choice: a Free slot first; else the Expired slot the policy ranks
// lowest; for a demand miss only, else the lowest-ranked Speculative slot.
// A slot that is Required, pinned (Acquire'd) or in flight (copy not done) is
// never a victim. A slot holding a protected expert (SetProtected: a running
// sequence's preferred set, preload_set.h) is passed over by both rules; a
// demand miss takes the lowest-ranked protected Expired or Speculative slot
// only when nothing else may be taken, so protection never starves the
// running layer. Ranking, lowest evicted first (ties: lower slot index):
//   lru      last use (logical clock of Touch/Assign)
//   lfu      uses of the key since start (persists across evictions), then last use
//   guarded  priority set from outside (SetPriority; default 0), then last use
//
// Thread safety: none; the owner (OffloadExpertProvider) calls it under its
// own mutex. Ownership: plain value type.
#ifndef VISMOE_ENGINE_OFFLOAD_SLAB_CACHE_H_
#define VISMOE_ENGINE_OFFLOAD_SLAB_CACHE_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/policy_names.h"
#include "engine/core/stats_sink.h"

namespace vismoe {

// "lru" | "lfu" | "guarded" (also "guarded-priority").
absl::StatusOr<EvictionPolicy> ParseEvictionPolicy(absl::string_view name);
const char* EvictionPolicyName(EvictionPolicy p);

class SlabCache {
 public:
  struct Slot {
    int layer = -1;
    int expert = -1;
    SlotState state = SlotState::kFree;
    int pins = 0;
    bool in_flight = false;
    bool prefetched = false;  // filled by a prefetch and not demanded since
    bool preloaded = false;   // filled by a preload, kept and not used since
    uint64_t last_use = 0;
  };

  SlabCache(int num_slots, EvictionPolicy policy);

  int num_slots() const { return static_cast<int>(slots_.size()); }
  EvictionPolicy policy() const { return policy_; }
  const Slot& slot(int i) const { return slots_[i]; }
  // Slot holding (layer, expert), or -1.
  int Find(int layer, int expert) const;
  // See the class comment; -1 when no slot may be taken.
  int PickVictim(bool demand) const;
  // Puts (layer, expert) into `slot`, dropping its old content; in flight
  // until MarkLoaded(). REQUIRES: `slot` was just returned by PickVictim and
  // (layer, expert) is not cached; `state` is Required or Speculative.
  void Assign(int slot, int layer, int expert, SlotState state, bool prefetched);
  void MarkLoaded(int slot);
  // A copy into `slot` failed: it holds nothing again (Free, not in flight).
  // REQUIRES: the slot is in flight and not pinned.
  void Drop(int slot);
  // REQUIRES: the slot holds an expert; `state` is not Free.
  void SetState(int slot, SlotState state);
  void ClearPrefetched(int slot) { slots_[slot].prefetched = false; }
  // Preload bookkeeping: Assign clears the mark; the provider sets it on the
  // slots a preload filled and clears it at their first use.
  void SetPreloaded(int slot, bool preloaded) { slots_[slot].preloaded = preloaded; }
  // A use of the slot's expert: updates LRU clock and LFU count.
  void Touch(int slot);
  void Pin(int slot) { ++slots_[slot].pins; }
  // REQUIRES: pinned.
  void Unpin(int slot);
  void SetPriority(int layer, int expert, double priority);
  double Priority(int layer, int expert) const;
  uint64_t UseCount(int layer, int expert) const;
  // The experts protected from eviction (see the class comment), replacing
  // the previous set; they need not be cached.
  void SetProtected(const std::vector<std::pair<int, int>>& experts);
  bool IsProtected(int layer, int expert) const {
    return !protected_.empty() && protected_.contains(Key(layer, expert));
  }
  int64_t protected_count() const { return static_cast<int64_t>(protected_.size()); }

  int64_t Count(SlotState s) const { return counts_[static_cast<int>(s)]; }
  // Consistency of the index, counts and per-slot fields; false with a reason.
  bool CheckInvariants(std::string* why) const;

 private:
  static int64_t Key(int layer, int expert) {
    return (static_cast<int64_t>(layer) << 32) | static_cast<uint32_t>(expert);
  }
  // True when slot a should be evicted before slot b.
  bool Before(int a, int b) const;

  EvictionPolicy policy_;
  std::vector<Slot> slots_;
  absl::flat_hash_map<int64_t, int> where_;        // key -> slot
  absl::flat_hash_map<int64_t, uint64_t> uses_;    // key -> uses (LFU)
  absl::flat_hash_map<int64_t, double> priority_;  // key -> priority (guarded)
  absl::flat_hash_set<int64_t> protected_;         // keys kept for running sequences
  std::array<int64_t, 4> counts_{};
  uint64_t clock_ = 0;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_SLAB_CACHE_H_
