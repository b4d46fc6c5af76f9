#include "engine/core/commit_miss_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

// softmax(logits) in double (the max subtracted first).
std::vector<double> Softmax(const float* logits, int num_experts) {
  std::vector<double> p(static_cast<size_t>(num_experts));
  const float mx = *std::max_element(logits, logits + num_experts);
  double sum = 0;
  for (int e = 0; e < num_experts; ++e) {
    p[e] = std::exp(static_cast<double>(logits[e]) - mx);
    sum += p[e];
  }
  for (double& v : p) v /= sum;
  return p;
}

// KL(p || uniform) in nats, as a float; rounding may leave a uniform row a
// hair below 0.
float KlToUniform(const std::vector<double>& p) {
  double kl = std::log(static_cast<double>(p.size()));
  for (double v : p) {
    if (v > 0) kl += v * std::log(v);
  }
  return static_cast<float>(std::max(kl, 0.0));
}

// One token's view of the rule: its slots, their probabilities, and which
// slots the router keeps, lost and had skipped.
struct Token {
  int k = 0;
  int* experts = nullptr;  // [k], rewritten in place
  float* weights = nullptr;
  const RouterResult* routing = nullptr;
  int64_t row = 0;
  std::vector<double> p;       // router softmax over all experts
  std::vector<int> missing;    // non-skipped slots whose expert is not there
  std::vector<int> original;   // the router's experts, per slot
  std::vector<char> replaced;  // per slot: a substitute took it
  bool skipped(int j) const { return routing->IsSkipped(row, j); }
};

// The predicted experts a token may take: there, not already its own, by
// decreasing router probability (ties: the predictor's order).
std::vector<int> Candidates(const Token& t, const ExpertAvailability& avail) {
  std::vector<int> out;
  for (int e : avail.predicted) {
    if (e < 0 || e >= static_cast<int>(t.p.size()) || !avail.Available(e)) continue;
    if (std::find(t.original.begin(), t.original.end(), e) != t.original.end()) continue;
    if (std::find(out.begin(), out.end(), e) != out.end()) continue;
    out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [&t](int a, int b) { return t.p[a] > t.p[b]; });
  return out;
}

// Weights without OWA: the router's gating as if the computed slots (and the
// skipped ones, which add nothing) had been its top-k.
void RouterWeights(Token& t, bool renormalize) {
  double z = 0;
  for (int j = 0; j < t.k; ++j) z += t.p[t.experts[j]];
  for (int j = 0; j < t.k; ++j) {
    if (t.skipped(j)) continue;
    t.weights[j] = static_cast<float>(renormalize ? t.p[t.experts[j]] / z : t.p[t.experts[j]]);
  }
}

// Eq. 5-6 over the router's scale G = p / Z. False (nothing changed) when the
// kept experts carry no weight.
bool OwaWeights(Token& t, const CommitMissPolicy& rule, bool renormalize) {
  double z = 1;
  if (renormalize) {
    z = 0;
    for (int e : t.original) z += t.p[e];
  }
  double kept_g = 0, lost_g = 0;
  for (int j = 0; j < t.k; ++j) {
    if (t.skipped(j)) continue;
    (t.replaced[j] ? lost_g : kept_g) += t.p[t.original[j]] / z;
  }
  if (!(kept_g > 0)) return false;
  std::vector<double> g1(static_cast<size_t>(t.k), 0.0);
  double sum1 = 0;
  for (int j = 0; j < t.k; ++j) {
    if (t.skipped(j)) continue;
    const double g = t.p[t.experts[j]] / z;
    g1[j] = t.replaced[j] ? g : g * (1.0 + lost_g / kept_g) * rule.owa_alpha1;  // Eq. 5
    sum1 += g1[j];
  }
  const double scale = (kept_g + lost_g) / sum1 * rule.owa_alpha2;  // Eq. 6
  for (int j = 0; j < t.k; ++j) {
    if (!t.skipped(j)) t.weights[j] = static_cast<float>(g1[j] * scale);
  }
  return true;
}

// The rule for one uncertain token; counts what it did.
void CommitToken(const CommitMissPolicy& rule, bool renormalize, const ExpertAvailability& avail,
                 Token& t, RouterResult* routing, CommitCounts& c) {
  int active = 0;
  for (int j = 0; j < t.k; ++j) {
    if (t.skipped(j)) continue;
    ++active;
    if (!avail.Available(t.experts[j])) t.missing.push_back(j);
  }
  c.committed_router += static_cast<uint64_t>(active) - t.missing.size();
  if (t.missing.empty()) return;
  const std::vector<int> cand = Candidates(t, avail);
  const size_t m = std::min(t.missing.size(), cand.size());
  c.fetched += t.missing.size() - m;
  c.committed_substitute += m;
  if (m == 0) return;
  if (routing->committed.empty()) routing->committed.assign(routing->experts.size(), 0);
  t.replaced.assign(static_cast<size_t>(t.k), 0);
  for (size_t i = 0; i < m; ++i) {
    const int j = t.missing[i];
    t.experts[j] = cand[i];
    t.replaced[j] = 1;
    routing->committed[static_cast<size_t>(t.row * t.k + j)] = 1;
  }
  const int kept = active - static_cast<int>(m);
  if (rule.owa() && kept >= rule.owa_min_correct && kept <= rule.owa_max_correct &&
      OwaWeights(t, rule, renormalize)) {
    ++c.owa_tokens;
    return;
  }
  RouterWeights(t, renormalize);
}

}  // namespace

float RouterCertainty(const float* logits, int num_experts) {
  return KlToUniform(Softmax(logits, num_experts));
}

absl::Status ValidateCommitMissPolicy(const CommitMissPolicy& rule, int top_k) {
  auto bad = [](const char* name, const char* what, double v) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit miss policy: ", name, " must be ", what, ", got ", v));
  };
  if (!std::isfinite(rule.threshold) || rule.threshold < 0) {
    return bad("threshold", "a finite value >= 0", rule.threshold);
  }
  if (!(rule.owa_alpha1 >= 0 && rule.owa_alpha1 <= kMaxOwaAlpha)) {
    return bad("owa_alpha1", "in [0, 16] (0 = OWA off)", rule.owa_alpha1);
  }
  if (!(rule.owa_alpha2 > 0 && rule.owa_alpha2 <= kMaxOwaAlpha)) {
    return bad("owa_alpha2", "in (0, 16]", rule.owa_alpha2);
  }
  if (!rule.owa()) return absl::OkStatus();
  if (rule.owa_min_correct < 1 || rule.owa_min_correct > rule.owa_max_correct ||
      rule.owa_max_correct > top_k - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "commit miss policy: OWA's trigger range [", rule.owa_min_correct, ", ",
        rule.owa_max_correct, "] of correctly predicted experts must lie in [1, top_k - 1] = [1, ",
        top_k - 1, "]"));
  }
  return absl::OkStatus();
}

void CommitMisses(const CommitMissPolicy& rule, bool renormalize, const ExpertAvailability& avail,
                  int64_t first, int64_t n, RouterResult* routing, CommitCounts* counts) {
  if (avail.all) return;
  CommitCounts c;
  const int k = routing->top_k;
  const int num_experts = routing->num_experts;
  for (int64_t row = first; row < first + n; ++row) {
    ++c.tokens;
    Token t;
    t.p = Softmax(routing->logits.data() + row * num_experts, num_experts);
    // Certain (at the threshold included): fetch as today.
    if (!(KlToUniform(t.p) < rule.threshold)) continue;
    ++c.uncertain_tokens;
    t.k = k;
    t.row = row;
    t.routing = routing;
    t.experts = routing->experts.data() + row * k;
    t.weights = routing->weights.data() + row * k;
    t.original.assign(t.experts, t.experts + k);
    CommitToken(rule, renormalize, avail, t, routing, c);
  }
  if (counts != nullptr) counts->Add(c);
}

}  // namespace vismoe
