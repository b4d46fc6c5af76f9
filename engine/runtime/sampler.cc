#include "engine/runtime/sampler.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/argmax.h"

namespace vismoe {

absl::Status Sampler::Validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.temperature must be a finite value >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_k must be >= 0 (0 = off), got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p must be in (0, 1], got ", p.top_p));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& p)
    : temperature_(p.temperature), top_k_(p.top_k), top_p_(p.top_p), rng_(p.seed) {}

int Sampler::Argmax(absl::Span<const float> logits) { return GreedyArgmax(logits); }

TokenDraw Sampler::NextDraw() {
  if (temperature_ > 0.0f && !pending_) {
    // 53 random bits: portable, unlike the std distributions.
    uniform_ = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
    pending_ = true;
  }
  return TokenDraw{temperature_, top_k_, top_p_, uniform_};
}

int Sampler::Sample(absl::Span<const float> logits) {
  const TokenDraw draw = NextDraw();
  Consumed();
  if (draw.temperature == 0.0f) return Argmax(logits);
  return picker_.Pick(logits, draw);
}

}  // namespace vismoe
