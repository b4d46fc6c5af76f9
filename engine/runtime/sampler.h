// Sampler: one sequence's draws. Each token's TokenDraw (engine/core/
// token_draw.h) takes its uniform from a std::mt19937_64 seeded per request,
// one number per token produced, so a given seed and logits sequence always
// give the same tokens -- whether the host picks them (Sample) or a device
// does from NextDraw() (TokenOutput::AcceptToken then calls Consumed()).
// Thread safety: none (owns its generator and scratch); one per sequence.
#ifndef VISMOE_ENGINE_RUNTIME_SAMPLER_H_
#define VISMOE_ENGINE_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <random>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/api/request.h"
#include "engine/core/token_draw.h"

namespace vismoe {

class Sampler {
 public:
  // InvalidArgument naming the field for temperature < 0 or not finite,
  // top_k < 0, top_p outside (0, 1].
  static absl::Status Validate(const SamplingParams& params);

  // REQUIRES: Validate(params).ok().
  explicit Sampler(const SamplingParams& params);

  // The draw of the next token: the same until Consumed(), so a step whose
  // token is not taken (a prompt chunk, a failed step) spends no number.
  TokenDraw NextDraw();
  // The next token's draw was used.
  void Consumed() { pending_ = false; }

  // The next token, picked on the host. REQUIRES: logits not empty.
  int Sample(absl::Span<const float> logits);

  static int Argmax(absl::Span<const float> logits);

 private:
  float temperature_;
  int top_k_;
  float top_p_;
  std::mt19937_64 rng_;
  bool pending_ = false;  // uniform_ is the next token's
  double uniform_ = 0.0;
  TokenPicker picker_;
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_SAMPLER_H_
