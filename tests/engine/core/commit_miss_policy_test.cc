// The commit miss policy's rule (paper 003): router certainty, the gate at
// the threshold (at it: fetch), substitutes taken only from the predictor's
// resident or in-flight choices by router probability, the weights with and
// without OWA (Eq. 5-6) and its trigger range, skipped slots, the edge cases
// (everything resident, no candidate, one candidate for two misses, threshold
// 0) and validation.
#include "engine/core/commit_miss_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Routing of tokens with router probabilities `probs` (one row per token):
// logits = log p, top-k by p (ties to the lower id), weights renormalised
// over the top-k when `renormalize`, as the CPU router computes them.
RouterResult Routed(const std::vector<std::vector<double>>& probs, int k, bool renormalize = true) {
  RouterResult r;
  r.n = static_cast<int64_t>(probs.size());
  r.num_experts = static_cast<int>(probs[0].size());
  r.top_k = k;
  for (const auto& p : probs) {
    for (double v : p) r.logits.push_back(static_cast<float>(std::log(v)));
    std::vector<int> idx(p.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&p](int a, int b) { return p[a] > p[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += p[idx[j]];
    for (int j = 0; j < k; ++j) {
      r.experts.push_back(idx[j]);
      r.weights.push_back(static_cast<float>(renormalize ? p[idx[j]] / sum : p[idx[j]]));
    }
  }
  return r;
}

ExpertAvailability Avail(int num_experts, std::vector<int> there, std::vector<int> predicted) {
  ExpertAvailability a;
  a.available.assign(static_cast<size_t>(num_experts), 0);
  for (int e : there) a.available[e] = 1;
  a.predicted = std::move(predicted);
  return a;
}

CommitMissPolicy Always() {
  CommitMissPolicy rule;
  rule.threshold = 100.0f;  // above ln(E): every token is uncertain
  return rule;
}

// 8 experts; the router prefers 0 (0.30) and 1 (0.25), then 2, 3, ...
const std::vector<double> kRow = {0.30, 0.25, 0.12, 0.10, 0.08, 0.07, 0.05, 0.03};

TEST(RouterCertaintyTest, IsKlToUniform) {
  const std::vector<float> uniform(8, 0.5f);
  EXPECT_NEAR(RouterCertainty(uniform.data(), 8), 0.0, 1e-6);
  const std::vector<float> two = {std::log(0.75f), std::log(0.25f)};
  const double want = std::log(2.0) + 0.75 * std::log(0.75) + 0.25 * std::log(0.25);
  EXPECT_NEAR(RouterCertainty(two.data(), 2), want, 1e-6);
  const std::vector<float> peaked = {40.0f, 0, 0, 0};
  EXPECT_NEAR(RouterCertainty(peaked.data(), 4), std::log(4.0), 1e-5);
}

TEST(CommitMissPolicyTest, SubstituteIsTheMostProbablePredictedExpertThere) {
  RouterResult r = Routed({kRow}, 2);
  // Expert 1 is missing; 3 and 5 were predicted and are there; 2 is there
  // too and more probable, but the predictor did not choose it.
  const ExpertAvailability a = Avail(8, {0, 2, 3, 5}, {5, 3, 1});
  CommitCounts c;
  CommitMisses(Always(), true, a, 0, 1, &r, &c);
  EXPECT_THAT(r.experts, ElementsAre(0, 3));
  EXPECT_THAT(r.committed, ElementsAre(0, 1));
  EXPECT_NEAR(r.weights[0], 0.30 / 0.40, 1e-6);  // the router's gating over {0, 3}
  EXPECT_NEAR(r.weights[1], 0.10 / 0.40, 1e-6);
  EXPECT_EQ(c.tokens, 1u);
  EXPECT_EQ(c.uncertain_tokens, 1u);
  EXPECT_EQ(c.committed_router, 1u);
  EXPECT_EQ(c.committed_substitute, 1u);
  EXPECT_EQ(c.fetched, 0u);
  EXPECT_EQ(c.owa_tokens, 0u);
}

TEST(CommitMissPolicyTest, CertainTokensFetchAndTheThresholdItselfIsCertain) {
  const ExpertAvailability a = Avail(8, {0, 3}, {3});
  RouterResult r = Routed({kRow}, 2);
  const float certainty = RouterCertainty(r.logits.data(), 8);
  CommitMissPolicy at;
  at.threshold = certainty;  // exactly at the threshold: certain, fetch
  CommitCounts c;
  CommitMisses(at, true, a, 0, 1, &r, &c);
  EXPECT_THAT(r.experts, ElementsAre(0, 1));
  EXPECT_TRUE(r.committed.empty());
  EXPECT_EQ(c.tokens, 1u);
  EXPECT_EQ(c.uncertain_tokens, 0u);
  EXPECT_EQ(c.committed(), 0u);
  CommitMissPolicy above = at;  // the next float up: uncertain, commits
  above.threshold = std::nextafter(certainty, 1e9f);
  CommitMisses(above, true, a, 0, 1, &r, &c);
  EXPECT_THAT(r.experts, ElementsAre(0, 3));
  EXPECT_EQ(c.uncertain_tokens, 1u);
}

TEST(CommitMissPolicyTest, ThresholdZeroNeverCommitsEvenAUniformRouter) {
  RouterResult r = Routed({std::vector<double>(8, 0.125)}, 2);
  const RouterResult before = r;
  CommitMissPolicy zero;
  CommitCounts c;
  CommitMisses(zero, true, Avail(8, {5}, {5}), 0, 1, &r, &c);
  EXPECT_EQ(r.experts, before.experts);
  EXPECT_EQ(r.weights, before.weights);
  EXPECT_EQ(c.uncertain_tokens, 0u);
}

TEST(CommitMissPolicyTest, EverythingResidentChangesAndCountsNothing) {
  RouterResult r = Routed({kRow}, 2);
  const RouterResult before = r;
  ExpertAvailability all;
  all.all = true;
  all.predicted = {5};
  CommitCounts c;
  CommitMisses(Always(), true, all, 0, 1, &r, &c);
  EXPECT_EQ(r.experts, before.experts);
  EXPECT_EQ(r.weights, before.weights);
  EXPECT_TRUE(r.committed.empty());
  EXPECT_EQ(c.tokens, 0u);
  // Every routed expert there (not the `all` flag): committed to the router's.
  CommitMisses(Always(), true, Avail(8, {0, 1}, {5}), 0, 1, &r, &c);
  EXPECT_EQ(r.weights, before.weights);  // bit for bit
  EXPECT_TRUE(r.committed.empty());
  EXPECT_EQ(c.committed_router, 2u);
  EXPECT_EQ(c.committed_substitute, 0u);
}

TEST(CommitMissPolicyTest, WithoutACandidateTheMissIsFetched) {
  RouterResult r = Routed({kRow}, 2);
  const RouterResult before = r;
  CommitCounts c;
  // Predicted experts absent, or the token's own: no substitute.
  CommitMisses(Always(), true, Avail(8, {0}, {0, 4}), 0, 1, &r, &c);
  EXPECT_EQ(r.experts, before.experts);
  EXPECT_EQ(r.weights, before.weights);
  EXPECT_TRUE(r.committed.empty());
  EXPECT_EQ(c.committed_router, 1u);
  EXPECT_EQ(c.fetched, 1u);
}

TEST(CommitMissPolicyTest, OneCandidateForTwoMissesFetchesTheOther) {
  // As with a one-slab cache: at most one expert of the layer is there.
  RouterResult r = Routed({kRow}, 2);
  CommitCounts c;
  CommitMisses(Always(), true, Avail(8, {6}, {6}), 0, 1, &r, &c);
  // The first missing slot (the router's most probable) takes the substitute.
  EXPECT_THAT(r.experts, ElementsAre(6, 1));
  EXPECT_THAT(r.committed, ElementsAre(1, 0));
  EXPECT_NEAR(r.weights[0], 0.05 / 0.30, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.25 / 0.30, 1e-6);
  EXPECT_EQ(c.committed_substitute, 1u);
  EXPECT_EQ(c.fetched, 1u);
  EXPECT_EQ(c.committed_router, 0u);
}

TEST(CommitMissPolicyTest, WithoutRenormalisationSubstitutesTakeTheirProbability) {
  RouterResult r = Routed({kRow}, 2, /*renormalize=*/false);
  CommitMisses(Always(), false, Avail(8, {0, 3}, {3}), 0, 1, &r, nullptr);
  EXPECT_THAT(r.experts, ElementsAre(0, 3));
  EXPECT_NEAR(r.weights[0], 0.30, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.10, 1e-6);
}

TEST(CommitMissPolicyTest, OwaRedistributesAndScalesPerEquations5And6) {
  RouterResult r = Routed({kRow}, 4);  // top-4: 0, 1, 2, 3 (0.77 of the mass)
  CommitMissPolicy rule = Always();
  rule.owa_alpha1 = 1.3f;
  rule.owa_alpha2 = 1.1f;
  rule.owa_min_correct = 2;
  rule.owa_max_correct = 3;
  // 2 and 3 missing; 4 and 5 predicted and there: 2 of 4 correct.
  CommitCounts c;
  CommitMisses(rule, true, Avail(8, {0, 1, 4, 5}, {5, 4}), 0, 1, &r, &c);
  EXPECT_THAT(r.experts, ElementsAre(0, 1, 4, 5));
  const double z = 0.77;  // the router's renormaliser
  const double g0 = 0.30 / z, g1 = 0.25 / z, lost = (0.12 + 0.10) / z;
  const double kept = g0 + g1;
  const double p0 = g0 * (1 + lost / kept) * 1.3, p1 = g1 * (1 + lost / kept) * 1.3;  // Eq. 5
  const double p4 = 0.08 / z, p5 = 0.07 / z;
  const double scale = (kept + lost) / (p0 + p1 + p4 + p5) * 1.1;  // Eq. 6
  EXPECT_NEAR(r.weights[0], p0 * scale, 1e-6);
  EXPECT_NEAR(r.weights[1], p1 * scale, 1e-6);
  EXPECT_NEAR(r.weights[2], p4 * scale, 1e-6);
  EXPECT_NEAR(r.weights[3], p5 * scale, 1e-6);
  EXPECT_EQ(c.owa_tokens, 1u);
  // Neutral OWA (1, 1) keeps the router's total mass.
  RouterResult n = Routed({kRow}, 4);
  rule.owa_alpha1 = rule.owa_alpha2 = 1.0f;
  CommitMisses(rule, true, Avail(8, {0, 1, 4, 5}, {5, 4}), 0, 1, &n, nullptr);
  EXPECT_NEAR(n.weights[0] + n.weights[1] + n.weights[2] + n.weights[3], 1.0, 1e-6);
}

TEST(CommitMissPolicyTest, OwaOutsideItsTriggerRangeLeavesTheRouterWeights) {
  CommitMissPolicy rule = Always();
  rule.owa_alpha1 = 1.3f;
  rule.owa_min_correct = 2;
  rule.owa_max_correct = 3;
  // Only 1 of 4 kept (three missing): below the range, no OWA.
  RouterResult r = Routed({kRow}, 4);
  CommitCounts c;
  CommitMisses(rule, true, Avail(8, {0, 4, 5, 6}, {4, 5, 6}), 0, 1, &r, &c);
  EXPECT_THAT(r.experts, ElementsAre(0, 4, 5, 6));
  const double s = 0.30 + 0.08 + 0.07 + 0.05;
  EXPECT_NEAR(r.weights[0], 0.30 / s, 1e-6);
  EXPECT_NEAR(r.weights[3], 0.05 / s, 1e-6);
  EXPECT_EQ(c.owa_tokens, 0u);
}

TEST(CommitMissPolicyTest, SkippedSlotsAreNeitherMissingNorReplaced) {
  RouterResult r = Routed({kRow}, 2);
  r.skipped = {0, 1};  // expert 1 skipped (MoDES): not a miss
  CommitCounts c;
  CommitMisses(Always(), true, Avail(8, {0, 3}, {3}), 0, 1, &r, &c);
  EXPECT_THAT(r.experts, ElementsAre(0, 1));
  EXPECT_TRUE(r.committed.empty());
  EXPECT_EQ(c.committed_router, 1u);
  // Expert 0 missing, 1 skipped: 0 is replaced; the skipped slot stays in the
  // renormaliser, so the kept weights keep skipping's (unrenormalised) scale.
  RouterResult s = Routed({kRow}, 2);
  s.skipped = {0, 1};
  CommitMisses(Always(), true, Avail(8, {3}, {3}), 0, 1, &s, nullptr);
  EXPECT_THAT(s.experts, ElementsAre(3, 1));
  EXPECT_NEAR(s.weights[0], 0.10 / 0.35, 1e-6);
}

TEST(CommitMissPolicyTest, OnlyTheGivenRowsChange) {
  RouterResult r = Routed({kRow, kRow, kRow}, 2);
  CommitCounts c;
  CommitMisses(Always(), true, Avail(8, {0, 3}, {3}), 1, 1, &r, &c);
  EXPECT_THAT(r.experts, ElementsAre(0, 1, 0, 3, 0, 1));
  EXPECT_THAT(r.committed, ElementsAre(0, 0, 0, 1, 0, 0));
  EXPECT_EQ(c.tokens, 1u);
}

TEST(CommitMissPolicyTest, ValidationNamesTheField) {
  CommitMissPolicy rule;
  EXPECT_TRUE(ValidateCommitMissPolicy(rule, 4).ok());
  rule.threshold = -0.1f;
  EXPECT_THAT(ValidateCommitMissPolicy(rule, 4).message(), HasSubstr("threshold"));
  rule.threshold = std::nanf("");
  EXPECT_THAT(ValidateCommitMissPolicy(rule, 4).message(), HasSubstr("threshold"));
  rule.threshold = 1;
  rule.owa_alpha2 = 0;
  EXPECT_THAT(ValidateCommitMissPolicy(rule, 4).message(), HasSubstr("owa_alpha2"));
  rule.owa_alpha2 = 1;
  rule.owa_alpha1 = -1;
  EXPECT_THAT(ValidateCommitMissPolicy(rule, 4).message(), HasSubstr("owa_alpha1"));
  rule.owa_alpha1 = 3e38f;  // gates times this overflow to infinity
  EXPECT_THAT(ValidateCommitMissPolicy(rule, 4).message(),
              HasSubstr("owa_alpha1 must be in [0, 16]"));
  rule.owa_alpha1 = 1;
  rule.owa_alpha2 = std::nanf("");
  EXPECT_THAT(ValidateCommitMissPolicy(rule, 4).message(),
              HasSubstr("owa_alpha2 must be in (0, 16]"));
  rule.owa_alpha2 = 1;
  rule.owa_alpha1 = 1.2f;
  rule.owa_min_correct = 2;
  rule.owa_max_correct = 4;  // a perfect prediction needs no adjustment
  EXPECT_THAT(ValidateCommitMissPolicy(rule, 4).message(), HasSubstr("[1, 3]"));
  rule.owa_max_correct = 3;
  EXPECT_TRUE(ValidateCommitMissPolicy(rule, 4).ok());
  rule.owa_min_correct = 0;
  EXPECT_FALSE(ValidateCommitMissPolicy(rule, 4).ok());
}

}  // namespace
}  // namespace vismoe
