#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/argmax.h"

namespace vismoe {
namespace {

// Candidates are bucketed by logit for the walks in decreasing order: a walk
// sums whole buckets until the one where its target falls, and sorts only
// that bucket's members.
constexpr int kBuckets = 4096;

}  // namespace

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

bool Sampler::Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

template <typename Fn>
void Sampler::ForEachCandidate(Fn fn) const {
  if (top_k_set_) {
    for (const Candidate& c : candidates_) fn(c.logit, c.id);
  } else {
    for (size_t i = 0; i < logits_.size(); ++i) fn(logits_[i], static_cast<int>(i));
  }
}

int Sampler::BucketOf(float logit) const {
  return static_cast<int>(std::min<double>(kBuckets - 1, (top_ - logit) * scale_));
}

double Sampler::WeightOf(float logit) const { return std::exp(logit / temperature_ - max_); }

double Sampler::Weigh(absl::Span<const float> logits) {
  logits_ = logits;
  const size_t v = logits.size();
  top_k_set_ = top_k_ > 0 && static_cast<size_t>(top_k_) < v;
  if (top_k_set_) {
    // Only the top_k survive: select them from a scratch list of every id.
    std::vector<int> ids(v);
    std::iota(ids.begin(), ids.end(), 0);
    auto before = [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    // A heap of k rejects most ids in one comparison: faster for a small k.
    if (static_cast<size_t>(top_k_) * 64 < v) {
      std::partial_sort(ids.begin(), ids.begin() + top_k_, ids.end(), before);
    } else {
      std::nth_element(ids.begin(), ids.begin() + top_k_, ids.end(), before);
    }
    candidates_.resize(top_k_);
    for (int i = 0; i < top_k_; ++i) candidates_[i] = {logits[ids[i]], ids[i], 0.0};
  }
  float low = std::numeric_limits<float>::infinity();
  float high = -low;
  ForEachCandidate([&](float logit, int) {
    low = std::min(low, logit);
    high = std::max(high, logit);
  });
  max_ = high / temperature_;
  top_ = high;
  // (top - logit) * scale never decreases as the logit falls, so a bucket
  // holds a range of logits and every bucket before it larger ones.
  const double range = top_ - low;
  scale_ = range > 0 ? kBuckets / range : 0.0;
  mass_.assign(kBuckets, 0.0);
  last_bucket_ = 0;
  double sum = 0;
  ForEachCandidate([&](float logit, int) {
    const double w = WeightOf(logit);
    const int b = BucketOf(logit);
    mass_[b] += w;
    last_bucket_ = std::max(last_bucket_, b);
    sum += w;
  });
  sorted_bucket_ = -1;
  return sum;
}

void Sampler::SortBucket(int bucket) {
  if (sorted_bucket_ == bucket) return;
  members_.clear();
  ForEachCandidate([&](float logit, int id) {
    if (BucketOf(logit) == bucket) members_.push_back({logit, id, WeightOf(logit)});
  });
  std::sort(members_.begin(), members_.end(), Before);
  sorted_bucket_ = bucket;
}

Sampler::Cut Sampler::FindCut(double target, bool strict, const Cut* limit) {
  auto reached = [&](double mass) { return strict ? mass > target : mass >= target; };
  const int last = limit != nullptr ? limit->bucket : last_bucket_;
  double mass = 0;
  int b = 0;
  // An empty bucket never stops the walk (the mass before it did not reach
  // the target), so b ends on a bucket with members.
  for (; b < last && !reached(mass + mass_[b]); ++b) mass += mass_[b];
  SortBucket(b);
  const size_t end = (limit != nullptr && b == limit->bucket) ? limit->rank + 1 : members_.size();
  for (size_t i = 0; i < end; ++i) {
    mass += members_[i].weight;
    if (reached(mass)) return {b, i, mass};
  }
  return {b, end - 1, mass};  // rounding kept the mass a hair short: the last candidate
}

int Sampler::Sample(absl::Span<const float> logits) {
  if (temperature_ == 0.0f) return Argmax(logits);
  // Softmax weights in double, for stable cumulative sums.
  const double sum = Weigh(logits);
  double kept = sum;
  Cut top_p;
  const Cut* limit = nullptr;
  if (top_p_ < 1.0f) {
    top_p = FindCut(top_p_ * sum, /*strict=*/false, nullptr);
    kept = top_p.mass;
    limit = &top_p;
  }
  // Draw u in [0, kept) from 53 random bits: portable, unlike the std distributions.
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * kept;
  const Cut drawn = FindCut(u, /*strict=*/true, limit);
  logits_ = {};  // the caller's row: not kept past the call
  return members_[drawn.rank].id;
}

}  // namespace vismoe
