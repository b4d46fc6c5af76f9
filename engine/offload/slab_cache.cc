#include "engine/offload/slab_cache.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace vismoe {

absl::StatusOr<EvictionPolicy> ParseEvictionPolicy(absl::string_view name) {
  if (std::optional<EvictionPolicy> p = PolicyFromName<EvictionPolicy>(name)) return *p;
  return absl::InvalidArgumentError(absl::StrCat(
      "eviction policy must be one of ", PolicyNames<EvictionPolicy>(", "), "; got '", name, "'"));
}

const char* EvictionPolicyName(EvictionPolicy p) { return PolicyName(p); }

SlabCache::SlabCache(int num_slots, EvictionPolicy policy)
    : policy_(policy), slots_(num_slots > 0 ? num_slots : 0) {
  counts_[static_cast<int>(SlotState::kFree)] = num_slots > 0 ? num_slots : 0;
}

int SlabCache::Find(int layer, int expert) const {
  auto it = where_.find(Key(layer, expert));
  return it == where_.end() ? -1 : it->second;
}

bool SlabCache::Before(int a, int b) const {
  const Slot& x = slots_[a];
  const Slot& y = slots_[b];
  if (policy_ == EvictionPolicy::kLfu) {
    const uint64_t ux = UseCount(x.layer, x.expert);
    const uint64_t uy = UseCount(y.layer, y.expert);
    if (ux != uy) return ux < uy;
  } else if (policy_ == EvictionPolicy::kGuardedPriority) {
    const double px = Priority(x.layer, x.expert);
    const double py = Priority(y.layer, y.expert);
    if (px != py) return px < py;
  }
  if (x.last_use != y.last_use) return x.last_use < y.last_use;
  return a < b;
}

int SlabCache::PickVictim(bool demand) const {
  int expired = -1;
  int speculative = -1;
  int kept = -1;  // protected: a demand miss's last resort
  for (int i = 0; i < num_slots(); ++i) {
    const Slot& s = slots_[i];
    if (s.state == SlotState::kFree) return i;
    if (s.pins > 0 || s.in_flight) continue;
    if (s.state != SlotState::kExpired && !(s.state == SlotState::kSpeculative && demand)) continue;
    if (IsProtected(s.layer, s.expert)) {
      if (demand && (kept < 0 || Before(i, kept))) kept = i;
    } else if (s.state == SlotState::kExpired) {
      if (expired < 0 || Before(i, expired)) expired = i;
    } else if (speculative < 0 || Before(i, speculative)) {
      speculative = i;
    }
  }
  if (expired >= 0) return expired;
  return speculative >= 0 ? speculative : kept;
}

void SlabCache::Assign(int slot, int layer, int expert, SlotState state, bool prefetched) {
  Slot& s = slots_[slot];
  if (s.state == SlotState::kRequired || s.pins > 0 || s.in_flight || state == SlotState::kFree ||
      state == SlotState::kExpired || Find(layer, expert) >= 0) {
    spdlog::critical("SlabCache::Assign: slot {} (state {}, pins {}, in flight {}) for {}/{}", slot,
                     static_cast<int>(s.state), s.pins, s.in_flight, layer, expert);
    std::abort();
  }
  if (s.state != SlotState::kFree) where_.erase(Key(s.layer, s.expert));
  --counts_[static_cast<int>(s.state)];
  s.layer = layer;
  s.expert = expert;
  s.state = state;
  s.in_flight = true;
  s.prefetched = prefetched;
  s.preloaded = false;
  s.last_use = ++clock_;
  ++counts_[static_cast<int>(state)];
  where_[Key(layer, expert)] = slot;
}

void SlabCache::MarkLoaded(int slot) { slots_[slot].in_flight = false; }

void SlabCache::Drop(int slot) {
  Slot& s = slots_[slot];
  if (s.state == SlotState::kFree || s.pins > 0 || !s.in_flight) {
    spdlog::critical("SlabCache::Drop: slot {} (state {}, pins {}, in flight {})", slot,
                     static_cast<int>(s.state), s.pins, s.in_flight);
    std::abort();
  }
  where_.erase(Key(s.layer, s.expert));
  --counts_[static_cast<int>(s.state)];
  ++counts_[static_cast<int>(SlotState::kFree)];
  s = Slot();
}

void SlabCache::SetState(int slot, SlotState state) {
  Slot& s = slots_[slot];
  if (s.state == SlotState::kFree || state == SlotState::kFree) {
    spdlog::critical("SlabCache::SetState: slot {} from/to Free", slot);
    std::abort();
  }
  --counts_[static_cast<int>(s.state)];
  s.state = state;
  ++counts_[static_cast<int>(state)];
}

void SlabCache::Touch(int slot) {
  Slot& s = slots_[slot];
  s.last_use = ++clock_;
  ++uses_[Key(s.layer, s.expert)];
}

void SlabCache::Unpin(int slot) {
  if (slots_[slot].pins <= 0) {
    spdlog::critical("SlabCache::Unpin: slot {} is not pinned", slot);
    std::abort();
  }
  --slots_[slot].pins;
}

void SlabCache::SetPriority(int layer, int expert, double priority) {
  priority_[Key(layer, expert)] = priority;
}

void SlabCache::SetProtected(const std::vector<std::pair<int, int>>& experts) {
  protected_.clear();
  for (const auto& [layer, expert] : experts) protected_.insert(Key(layer, expert));
}

double SlabCache::Priority(int layer, int expert) const {
  auto it = priority_.find(Key(layer, expert));
  return it == priority_.end() ? 0.0 : it->second;
}

uint64_t SlabCache::UseCount(int layer, int expert) const {
  auto it = uses_.find(Key(layer, expert));
  return it == uses_.end() ? 0 : it->second;
}

bool SlabCache::CheckInvariants(std::string* why) const {
  std::array<int64_t, 4> counts{};
  int held = 0;
  for (int i = 0; i < num_slots(); ++i) {
    const Slot& s = slots_[i];
    ++counts[static_cast<int>(s.state)];
    if (s.pins < 0) return *why = absl::StrCat("slot ", i, " has negative pins"), false;
    if (s.state == SlotState::kFree) {
      if (s.pins > 0 || s.in_flight) {
        return *why = absl::StrCat("free slot ", i, " is pinned or in flight"), false;
      }
      continue;
    }
    ++held;
    if (Find(s.layer, s.expert) != i) {
      return *why = absl::StrCat("slot ", i, " not indexed as ", s.layer, "/", s.expert), false;
    }
  }
  if (held != static_cast<int>(where_.size())) {
    return *why = absl::StrCat("index has ", where_.size(), " entries for ", held, " slots"), false;
  }
  if (counts != counts_) return *why = "state counts out of step", false;
  return true;
}

}  // namespace vismoe
