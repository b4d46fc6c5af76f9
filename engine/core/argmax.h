// GreedyArgmax: the greedy token of a row of logits, defined once so the
// host sampler and a device's argmax kernel agree on every input: the first
// index whose value is greater than every value before it (a scan that
// replaces the best only on a strictly greater value). So equal maxima give
// the lowest index, NaN never wins against a number, and a NaN at index 0 is
// never replaced (nothing compares greater than it): 0.
// Thread safety: a pure function.
#ifndef VISMOE_ENGINE_CORE_ARGMAX_H_
#define VISMOE_ENGINE_CORE_ARGMAX_H_

#include "absl/types/span.h"
#include "engine/core/dtype.h"

namespace vismoe {

// REQUIRES: !logits.empty().
inline int GreedyArgmax(absl::Span<const float> logits) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

// Whether every logit is a finite number: a NaN or an infinity means the
// weights or the activations broke, and no token drawn from them is an
// answer (the request fails instead).
inline bool AllFinite(absl::Span<const float> logits) {
  return FirstNonFinite(DType::kF32, logits.data(), logits.size()) < 0;
}

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_ARGMAX_H_
