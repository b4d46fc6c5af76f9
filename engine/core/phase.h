// Phase: which part of a request a forward step belongs to. Stats, the expert
// providers and the observers all report per phase.
#ifndef VISMOE_ENGINE_CORE_PHASE_H_
#define VISMOE_ENGINE_CORE_PHASE_H_

namespace vismoe {

enum class Phase { kPrefill, kDecode };
inline const char* PhaseName(Phase p) { return p == Phase::kPrefill ? "prefill" : "decode"; }

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_PHASE_H_
