// Sampler: picks the next token from a row of logits.
//
// temperature == 0 is greedy (argmax, lowest id on ties). Otherwise:
// logits / temperature -> keep the top_k largest (0 = all) -> softmax ->
// keep the smallest prefix (by decreasing probability) whose mass reaches
// top_p -> renormalise -> draw with a std::mt19937_64 seeded per request, so a
// given seed and logits sequence always give the same tokens. Nothing sorts
// the vocabulary: the candidates are bucketed by logit, and the top_p cut and
// the draw each sum whole buckets in decreasing order up to the one where
// their target falls, then sort that bucket alone. A token costs two passes
// over the logits (tests/engine/runtime/sampler_test.cc checks the tokens
// against a full sort; only the rounding of the sums differs).
// Thread safety: none (owns its generator and scratch); one per sequence.
#ifndef VISMOE_ENGINE_RUNTIME_SAMPLER_H_
#define VISMOE_ENGINE_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

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
  int BucketOf(float logit) const;  // by logit: 0 holds the largest
  double WeightOf(float logit) const;
  // members_ = the candidates of `bucket` with their weights, in order.
  void SortBucket(int bucket);
  // The first candidate in order at which the cumulative weight reaches
  // `target` (exceeds it when `strict`), going no further than `limit`;
  // the last one allowed when rounding keeps the sum short. Leaves members_
  // sorted for its bucket.
  Cut FindCut(double target, bool strict, const Cut* limit);

  float temperature_;
  int top_k_;
  float top_p_;
  std::mt19937_64 rng_;
  // State of one Sample call: its logits, the top_k candidates when top_k
  // applies, the buckets (from top_ down, scale_ per unit of logit).
  absl::Span<const float> logits_;
  bool top_k_set_ = false;
  std::vector<Candidate> candidates_;
  double max_ = 0;  // the largest logit / temperature
  double top_ = 0;
  double scale_ = 0;
  std::vector<double> mass_;  // [kBuckets] summed weights
  int last_bucket_ = 0;       // the last bucket with a member
  std::vector<Candidate> members_;
  int sorted_bucket_ = -1;  // whose members members_ holds
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_RUNTIME_SAMPLER_H_
