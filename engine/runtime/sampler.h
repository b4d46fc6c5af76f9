// Sampler: picks the next token from a row of logits.
//
// temperature == 0 is greedy (argmax, lowest id on ties). Otherwise:
// logits / temperature -> keep the top_k largest (0 = all) -> softmax ->
// keep the smallest prefix (by decreasing probability) whose mass reaches
// top_p -> renormalise -> draw with a std::mt19937_64 seeded per request, so a
// given seed and logits sequence always give the same tokens.
// Thread safety: none (owns its generator); one per sequence.
#ifndef VISMOE_ENGINE_RUNTIME_SAMPLER_H_
#define VISMOE_ENGINE_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <random>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/api/request.h"

namespace vismoe {

class Sampler {
 public:
  // InvalidArgument naming the field for temperature < 0 or not finite,
  // top_k < 0, top_p outside (0, 1].
  static absl::Status Validate(const SamplingParams& params);

  // REQUIRES: Validate(params).ok().
  explicit Sampler(const SamplingParams& params);

  // REQUIRES: logits not empty.
  int Sample(absl::Span<const float> logits);

  static int Argmax(absl::Span<const float> logits);

 private:
  float temperature_;
  int top_k_;
  float top_p_;
  std::mt19937_64 rng_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_SAMPLER_H_
