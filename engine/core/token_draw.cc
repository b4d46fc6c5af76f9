#include "engine/core/token_draw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/core/argmax.h"

namespace vismoe {

bool TokenPicker::Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

template <typename Fn>
void TokenPicker::ForEachCandidate(Fn fn) const {
  if (top_k_set_) {
    for (const Candidate& c : candidates_) fn(c.logit, c.id);
  } else {
    for (size_t i = 0; i < logits_.size(); ++i) fn(logits_[i], static_cast<int>(i));
  }
}

double TokenPicker::WeightOf(float logit) const {
  return std::exp(logit / draw_.temperature - max_);
}

double TokenPicker::Weigh(absl::Span<const float> logits) {
  logits_ = logits;
  const size_t v = logits.size();
  top_k_set_ = draw_.top_k > 0 && static_cast<size_t>(draw_.top_k) < v;
  if (top_k_set_) {
    // Only the top_k survive: select them from a scratch list of every id.
    std::vector<int> ids(v);
    std::iota(ids.begin(), ids.end(), 0);
    auto before = [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    // A heap of k rejects most ids in one comparison: faster for a small k.
    if (static_cast<size_t>(draw_.top_k) * 64 < v) {
      std::partial_sort(ids.begin(), ids.begin() + draw_.top_k, ids.end(), before);
    } else {
      std::nth_element(ids.begin(), ids.begin() + draw_.top_k, ids.end(), before);
    }
    candidates_.resize(draw_.top_k);
    for (int i = 0; i < draw_.top_k; ++i) candidates_[i] = {logits[ids[i]], ids[i], 0.0};
  }
  float low = std::numeric_limits<float>::infinity();
  float high = -low;
  ForEachCandidate([&](float logit, int) {
    low = std::min(low, logit);
    high = std::max(high, logit);
  });
  max_ = high / draw_.temperature;
  top_ = high;
  // (top - logit) * scale never decreases as the logit falls, so a bucket
  // holds a range of logits and every bucket before it larger ones.
  const double range = top_ - low;
  scale_ = range > 0 ? kTokenDrawBuckets / range : 0.0;
  mass_.assign(kTokenDrawBuckets, 0.0);
  last_bucket_ = 0;
  double sum = 0;
  ForEachCandidate([&](float logit, int) {
    const double w = WeightOf(logit);
    const int b = TokenDrawBucket(top_, scale_, logit);
    mass_[b] += w;
    last_bucket_ = std::max(last_bucket_, b);
    sum += w;
  });
  sorted_bucket_ = -1;
  return sum;
}

void TokenPicker::SortBucket(int bucket) {
  if (sorted_bucket_ == bucket) return;
  members_.clear();
  ForEachCandidate([&](float logit, int id) {
    if (TokenDrawBucket(top_, scale_, logit) == bucket)
      members_.push_back({logit, id, WeightOf(logit)});
  });
  std::sort(members_.begin(), members_.end(), Before);
  sorted_bucket_ = bucket;
}

TokenPicker::Cut TokenPicker::FindCut(double target, bool strict, const Cut* limit) {
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

int DrawToken(absl::Span<const float> row, const TokenDraw& draw, TokenPicker* picker) {
  if (!AllFinite(row)) return -1;
  return draw.temperature == 0.0f ? GreedyArgmax(row) : picker->Pick(row, draw);
}

int TokenPicker::Pick(absl::Span<const float> logits, const TokenDraw& draw) {
  draw_ = draw;
  // Softmax weights in double, for stable cumulative sums.
  const double sum = Weigh(logits);
  if (!std::isfinite(max_)) {  // a temperature so small the quotient overflows: its limit
    logits_ = {};
    return GreedyArgmax(logits);
  }
  double kept = sum;
  Cut top_p;
  const Cut* limit = nullptr;
  if (draw_.top_p < 1.0f) {
    top_p = FindCut(draw_.top_p * sum, /*strict=*/false, nullptr);
    kept = top_p.mass;
    limit = &top_p;
  }
  const Cut drawn = FindCut(draw_.uniform * kept, /*strict=*/true, limit);
  logits_ = {};  // the caller's row: not kept past the call
  return members_[drawn.rank].id;
}

}  // namespace vismoe
