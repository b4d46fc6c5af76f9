#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

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

int Sampler::Sample(absl::Span<const float> logits) {
  if (temperature_ == 0.0f) return Argmax(logits);
  const int v = static_cast<int>(logits.size());
  std::vector<int> order(v);
  std::iota(order.begin(), order.end(), 0);
  const int k = (top_k_ > 0 && top_k_ < v) ? top_k_ : v;
  auto by_logit = [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  order.resize(k);
  // Softmax over the kept candidates, in double for a stable cumulative sum.
  std::vector<double> p(k);
  const double mx = logits[order[0]] / temperature_;
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    p[i] = std::exp(logits[order[i]] / temperature_ - mx);
    sum += p[i];
  }
  int keep = k;
  if (top_p_ < 1.0f) {
    double cum = 0;
    for (int i = 0; i < k; ++i) {
      cum += p[i] / sum;
      if (cum >= top_p_) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += p[i];
  // Draw u in [0, kept) from 53 random bits: portable, unlike the std distributions.
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * kept;
  double acc = 0;
  for (int i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace vismoe
