// The policy kinds of the engine (DESIGN.md, Policies), one enum per kind, and
// the one table of their names. Names are the vocabulary of the flags, the
// server config, the proto's per-request overrides and the reports; every
// parser, validator and help text takes its list from here.
//
//   CompressorKind  none | random | saliency | affinity        (token compression)
//   PredictorKind   none | history | router-lookahead | mlp-lookahead  (expert prediction)
//   EvictionPolicy  lru | lfu | guarded ("guarded-priority" is accepted too)
//   SkipKind        none | dual-threshold                      (MoDES expert skipping)
//   PreloadKind     none | prefill-routing                     (MELINOE per-sequence preload)
//   MissPolicy      fetch | commit | cpu                       (an offloaded expert's miss)
//   HostStoreMode   auto | mapped | packed                     (where host experts are read from)
//
// Thread safety: constant tables and free functions.
#ifndef VISMOE_ENGINE_CORE_POLICY_NAMES_H_
#define VISMOE_ENGINE_CORE_POLICY_NAMES_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace vismoe {

enum class CompressorKind { kNone, kRandom, kSaliency, kAffinity };
enum class PredictorKind { kNone, kHistory, kRouterLookahead, kMlpLookahead };
enum class EvictionPolicy { kLru, kLfu, kGuardedPriority };
enum class SkipKind { kNone, kDualThreshold };
enum class PreloadKind { kNone, kPrefillRouting };
// What a MoE layer does about a routed expert that is neither resident nor in
// flight: fetch it (the exact path); commit to experts the predictor chose
// that are there (paper 003, engine/core/commit_miss_policy.h; lossy); or
// compute it on the host when that is measured to cost less than the copy
// (engine/policy/host_experts.md; exact).
enum class MissPolicy { kFetch, kCommit, kCpu };
// Where the offload runtime reads host experts from: the mmapped checkpoint
// (mapped: no second host copy) or a packed copy (page-locked on CUDA: full
// copy bandwidth); auto picks (engine/offload/host_store_mode.h).
enum class HostStoreMode { kAuto, kMapped, kPacked };

// The kind named `name` (or one of its aliases); nullopt for an unknown name.
template <typename Kind>
std::optional<Kind> PolicyFromName(absl::string_view name);
// The canonical name of `kind`.
const char* PolicyName(CompressorKind kind);
const char* PolicyName(PredictorKind kind);
const char* PolicyName(EvictionPolicy kind);
const char* PolicyName(SkipKind kind);
const char* PolicyName(PreloadKind kind);
const char* PolicyName(MissPolicy kind);
const char* PolicyName(HostStoreMode kind);
// Every canonical name of a kind, in table order, joined by `separator`:
// PolicyNames<CompressorKind>(", ") == "none, random, saliency, affinity".
template <typename Kind>
std::string PolicyNames(absl::string_view separator);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_POLICY_NAMES_H_
