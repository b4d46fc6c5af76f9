// PreloadSet: which experts the slab cache keeps for the running sequences
// (per-sequence preload, MELINOE's post-deployment stage; the rule is
// documented in engine/policy/preload.md).
//
// Each owner (a sequence past its prefill) registers its preferred experts:
// per decoder layer, best first. The set keeps them in preload order -- rank 0
// of every offloaded layer (shallowest first, the order decoding needs them),
// then rank 1 of every layer, and so on -- so a short share still covers every
// layer. The cache is shared by every running sequence, so each owner may
// keep at most
//   quota = floor(share * num_slabs / owners)
// experts: the first `quota` of its list. The protected set is the union of
// those prefixes; it never holds more than share * num_slabs experts, grows
// back when an owner leaves, and holds nothing when the quota is 0 (a cache
// too small to share: fewer than owners / share slabs). Experts of layers
// outside the slab cache (pinned or dense) are dropped, as are duplicates and
// ids out of [0, num_experts).
//
// Thread safety: none; the owner (OffloadExpertProvider) calls it under its
// own mutex. Ownership: plain value type.
#ifndef VISMOE_ENGINE_OFFLOAD_PRELOAD_SET_H_
#define VISMOE_ENGINE_OFFLOAD_PRELOAD_SET_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/offload/offload_options.h"

namespace vismoe {

// The preload options of `o` (preload, preload_experts, preload_share):
// InvalidArgument naming the option and value when one is out of range.
absl::Status CheckPreloadOptions(const OffloadOptions& o);

class PreloadSet {
 public:
  // `offloaded_layers`: the decoder layers whose experts live in the slab
  // cache. REQUIRES: num_slabs >= 0; 0 < share <= 1.
  PreloadSet(int num_slabs, double share, int num_experts, std::vector<int> offloaded_layers);

  // Registers `owner`'s preferred experts (`preferred[l]`: decoder layer l's,
  // best first), replacing any it had.
  void Set(uint64_t owner, const std::vector<std::vector<int>>& preferred);
  // Forgets `owner` (no-op when unknown).
  void Erase(uint64_t owner);

  int owners() const { return static_cast<int>(lists_.size()); }
  // Experts each owner may keep now.
  int Quota() const;
  // The protected (layer, expert) pairs: each owner's first Quota() entries
  // in preload order, owners in registration order, without repeats.
  std::vector<std::pair<int, int>> Protected() const;

 private:
  int num_slabs_;
  double share_;
  int num_experts_;
  std::vector<int> offloaded_;  // ascending
  // (owner, its experts in preload order), in registration order.
  std::vector<std::pair<uint64_t, std::vector<std::pair<int, int>>>> lists_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_OFFLOAD_PRELOAD_SET_H_
