// Sampler: the draw against a reference that sorts every candidate (the
// definition in sampler.h, as the sampler was first written), and its limits.
#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

// sampler.h's definition, written the slow way: every candidate sorted.
class FullSortSampler {
 public:
  explicit FullSortSampler(const SamplingParams& p)
      : temperature_(p.temperature), top_k_(p.top_k), top_p_(p.top_p), rng_(p.seed) {}

  int Sample(const std::vector<float>& logits) {
    const int v = static_cast<int>(logits.size());
    std::vector<int> order(v);
    std::iota(order.begin(), order.end(), 0);
    const int k = (top_k_ > 0 && top_k_ < v) ? top_k_ : v;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    order.resize(k);
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
    const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * kept;
    double acc = 0;
    for (int i = 0; i < keep; ++i) {
      acc += p[i];
      if (u < acc) return order[i];
    }
    return order[keep - 1];
  }

 private:
  float temperature_;
  int top_k_;
  float top_p_;
  std::mt19937_64 rng_;
};

// Random logits; `step` > 0 rounds them to its multiples, so many tie.
std::vector<float> Logits(std::mt19937_64& rng, int v, float scale, float step) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(v);
  for (float& x : out) {
    x = normal(rng);
    if (step > 0) x = std::round(x / step) * step;
  }
  return out;
}

// How many candidates come before token `id` in the sampler's order.
int Rank(const std::vector<float>& logits, int id) {
  int rank = 0;
  for (int i = 0; i < static_cast<int>(logits.size()); ++i) {
    rank += logits[i] > logits[id] || (logits[i] == logits[id] && i < id);
  }
  return rank;
}

TEST(SamplerTest, DrawsWhatAFullSortDraws) {
  std::mt19937_64 rng(7);
  int draws = 0;
  int deepest = 0;
  for (const int v : {1, 2, 5, 64, 300, 5000}) {
    for (const auto& [scale, step] :
         {std::pair{3.0f, 0.0f}, std::pair{0.3f, 0.0f}, std::pair{2.0f, 0.5f}}) {
      const std::vector<float> logits = Logits(rng, v, scale, step);
      for (const float temperature : {0.4f, 1.0f, 2.5f}) {
        for (const int top_k : {0, 1, 7, 50, v - 1, v, v + 3}) {
          for (const float top_p : {0.05f, 0.5f, 0.9f, 1.0f}) {
            SamplingParams p;
            p.temperature = temperature;
            p.top_k = std::max(top_k, 0);
            p.top_p = top_p;
            p.seed = static_cast<uint64_t>(draws);
            Sampler fast(p);
            FullSortSampler slow(p);
            for (int i = 0; i < 6; ++i, ++draws) {
              const int got = fast.Sample(logits);
              ASSERT_EQ(got, slow.Sample(logits))
                  << "v " << v << " scale " << scale << " step " << step << " T " << temperature
                  << " top_k " << top_k << " top_p " << top_p << " draw " << i;
              deepest = std::max(deepest, Rank(logits, got));
            }
          }
        }
      }
    }
  }
  // Some draws reach past several chunks of the order, not only the first.
  EXPECT_GT(deepest, 2000) << draws << " draws";
}

TEST(SamplerTest, AVocabularyTheSizeOfQwensDrawsTheSameTokens) {
  std::mt19937_64 rng(11);
  const std::vector<float> logits = Logits(rng, 151936, 2.0f, 0.0f);
  for (const float top_p : {0.9f, 1.0f}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    p.seed = 5;
    Sampler fast(p);
    FullSortSampler slow(p);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(fast.Sample(logits), slow.Sample(logits)) << i;
  }
}

TEST(SamplerTest, GreedyTopKAndTopPLimits) {
  std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f};
  SamplingParams p;
  EXPECT_EQ(Sampler(p).Sample(logits), 1);
  p.temperature = 5.0f;
  p.top_k = 1;
  EXPECT_EQ(Sampler(p).Sample(logits), 1);
  p.top_k = 0;
  p.top_p = 0.01f;
  EXPECT_EQ(Sampler(p).Sample(logits), 1);
  // top_k = 2 never yields tokens 0 or 3; both survivors appear.
  p.top_p = 1.0f;
  p.top_k = 2;
  p.seed = 3;
  Sampler s(p);
  std::set<int> seen;
  for (int i = 0; i < 200; ++i) seen.insert(s.Sample(logits));
  EXPECT_EQ(seen, (std::set<int>{1, 2}));
  p.seed = 3;
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.Sample(logits), b.Sample(logits));
  // Mass exactly at top_p is enough: two equal logits at top_p 0.5 keep one.
  p.top_k = 0;
  p.top_p = 0.5f;
  const std::vector<float> even = {0.0f, 0.0f};
  Sampler half(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(half.Sample(even), 0) << i;
  // A temperature whose quotient overflows: the greedy token, its limit.
  p.temperature = 1e-40f;
  p.top_p = 1.0f;
  ASSERT_TRUE(Sampler::Validate(p).ok());
  EXPECT_EQ(Sampler(p).Sample(logits), 1);
  const std::vector<float> negative = {-3.0f, -1.0f, -2.0f};
  EXPECT_EQ(Sampler(p).Sample(negative), 1);
  p.top_p = 1.5f;
  EXPECT_FALSE(Sampler::Validate(p).ok());
}

}  // namespace
}  // namespace vismoe
