// TokenDraw / TokenPicker: how one token is drawn from a row of logits,
// defined once so the host sampler and a device kernel draw the same tokens.
//
// temperature == 0 is greedy (GreedyArgmax). Otherwise: logits / temperature
// -> keep the top_k largest (0 = all) -> softmax -> keep the smallest prefix
// (by decreasing logit, lowest id on ties) whose mass reaches top_p ->
// renormalise -> the token where the cumulative mass of that prefix first
// exceeds uniform * its mass. A temperature so small that the largest
// logit / temperature overflows draws the greedy token, its limit. `uniform` is the request's
// random number for this token (runtime/sampler.h draws it), so a draw is a pure function.
//
// Nothing sorts the vocabulary: the candidates are bucketed by logit
// (BucketOf; bucket 0 holds the largest), and the top_p cut and the draw each
// sum whole buckets in decreasing order up to the one where their target
// falls, then sort that bucket alone. A token costs two passes over the
// logits. tests/engine/runtime/sampler_test.cc checks the tokens against a
// full sort; only the rounding of the sums differs.
// Thread safety: TokenPicker holds scratch; one per thread.
#ifndef VISMOE_ENGINE_CORE_TOKEN_DRAW_H_
#define VISMOE_ENGINE_CORE_TOKEN_DRAW_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace vismoe {

struct TokenDraw {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // in (0, 1]
  double uniform = 0.0;      // in [0, 1)
};

// The buckets of the walks: kTokenDrawBuckets of equal width from the largest
// logit `top` down to the smallest, `scale` = buckets per unit of logit. A
// device kernel computes them with the same double operations.
inline constexpr int kTokenDrawBuckets = 4096;
inline int TokenDrawBucket(double top, double scale, float logit) {
  const double b = (top - logit) * scale;
  return b < kTokenDrawBuckets - 1 ? static_cast<int>(b) : kTokenDrawBuckets - 1;
}

class TokenPicker {
 public:
  // REQUIRES: logits not empty and finite; temperature > 0; top_k >= 0;
  // top_p in (0, 1]; uniform in [0, 1).
  int Pick(absl::Span<const float> logits, const TokenDraw& draw);

 private:
  struct Candidate {
    float logit;
    int id;
    double weight;  // exp(logit / temperature - max logit / temperature)
  };
  // Where a walk in decreasing order stopped: the rank-th member of a bucket
  // in order, and the weight summed through it.
  struct Cut {
    int bucket = 0;
    size_t rank = 0;
    double mass = 0;
  };
  static bool Before(const Candidate& a, const Candidate& b);
  // Sets up this call: the candidates (every logit, or the top_k into
  // candidates_), the buckets and mass_ per bucket; returns the sum of the
  // weights.
  double Weigh(absl::Span<const float> logits);
  // fn(logit, id) for each candidate of this call.
  template <typename Fn>
  void ForEachCandidate(Fn fn) const;
  double WeightOf(float logit) const;
  // members_ = the candidates of `bucket` with their weights, in order.
  void SortBucket(int bucket);
  // The first candidate in order at which the cumulative weight reaches
  // `target` (exceeds it when `strict`), going no further than `limit`;
  // the last one allowed when rounding keeps the sum short. Leaves members_
  // sorted for its bucket.
  Cut FindCut(double target, bool strict, const Cut* limit);

  // State of one Pick: its logits and draw, the top_k candidates when top_k
  // applies, the buckets.
  absl::Span<const float> logits_;
  TokenDraw draw_;
  bool top_k_set_ = false;
  std::vector<Candidate> candidates_;
  double max_ = 0;  // the largest logit / temperature
  double top_ = 0;
  double scale_ = 0;
  std::vector<double> mass_;  // [kTokenDrawBuckets] summed weights
  int last_bucket_ = 0;       // the last bucket with a member
  std::vector<Candidate> members_;
  int sorted_bucket_ = -1;  // whose members members_ holds
};

// A step's token for a row: -1 when the row holds a NaN or an infinity
// (AllFinite: no token is an answer then), GreedyArgmax for a greedy draw,
// picker->Pick otherwise. REQUIRES: row not empty.
int DrawToken(absl::Span<const float> row, const TokenDraw& draw, TokenPicker* picker);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_TOKEN_DRAW_H_
