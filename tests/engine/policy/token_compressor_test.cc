// Token compressors: Algorithm 1 on a hand-worked case, keep budgets, seeded
// randomness, and the factory's validation.
#include "engine/policy/token_compressor.h"

#include <algorithm>
#include <vector>

#include "engine/policy/affinity_compressor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// N = 10, alpha = 0.2 (K_core = 2), beta = 0.5 (K_keep = 5), lambda = 2,
// two experts per token. Saliency already spans [0, 1], so s~ = s.
const std::vector<float> kSaliency = {0.9f, 0.1f, 0.5f, 0.3f, 1.0f, 0.2f, 0.6f, 0.0f, 0.4f, 0.8f};
const std::vector<int> kExperts = {1, 2, 1, 3, 1, 5, 1, 2, 2, 3, 3, 3, 7, 8, 2, 1, 4, 9, 3, 6};

CompressionInput HandCase() {
  CompressionInput in;
  in.num_tokens = 10;
  in.saliency = kSaliency;
  in.active_experts = kExperts;
  in.experts_per_token = 2;
  return in;
}

TEST(AffinityCompressorTest, HandWorkedAlgorithm1) {
  auto s = ScoreAffinity(HandCase(), 0.2, 0.5, 2.0);
  ASSERT_TRUE(s.ok()) << s.status();
  // Core = top-2 saliency: token 4 (1.0), token 0 (0.9) -> E_target = {1, 2, 3}.
  EXPECT_THAT(s->core, ElementsAre(4, 0));
  // Delta = |E_i \ E_target| / |E_i|; token 5 routes {3, 3}: one distinct expert.
  const std::vector<float> want_delta = {0, 0, 0.5f, 0, 0, 0, 1, 0, 1, 0.5f};
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(s->delta[i], want_delta[i]) << i;
  // p = s~ - 2 Delta: 1 -> 0.1, 2 -> -0.5, 3 -> 0.3, 5 -> 0.2, 6 -> -1.4,
  // 7 -> 0.0, 8 -> -1.6, 9 -> -0.2. Best three: 3, 5, 1.
  EXPECT_FLOAT_EQ(s->score[6], 0.6f - 2.0f);
  EXPECT_THAT(s->kept, ElementsAre(0, 1, 3, 4, 5));
}

TEST(AffinityCompressorTest, LambdaZeroIsSaliencyOrder) {
  auto aff = MakeTokenCompressor({"affinity", 0.5, 0.2, 0.0, 0});
  auto sal = MakeTokenCompressor({"saliency", 0.5, 0.2, 2.0, 0});
  ASSERT_TRUE(aff.ok() && sal.ok());
  auto a = (*aff)->Select(HandCase());
  auto b = (*sal)->Select(HandCase());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_THAT(*b, ElementsAre(0, 2, 4, 6, 9));
  EXPECT_EQ(*a, *b);
}

TEST(AffinityCompressorTest, NormalizesSaliencyAndKeepsCore) {
  // Saliency in [0.01, 0.02] normalises to [0, 1]; sizes from 1 to 50 keep
  // exactly max(1, floor(beta N)) tokens, the core always among them.
  for (int n = 1; n <= 50; ++n) {
    std::vector<float> sal(n);
    std::vector<int> ex(n * 3);
    for (int i = 0; i < n; ++i) {
      sal[i] = 0.01f + 0.01f * static_cast<float>((i * 7 + 3) % 13) / 13.0f + 1e-5f * i;
      for (int j = 0; j < 3; ++j) ex[i * 3 + j] = (i * (j + 1)) % 11;
    }
    CompressionInput in{n, sal, ex, 3};
    for (double beta : {0.1, 0.25, 0.5, 0.75, 1.0}) {
      auto s = ScoreAffinity(in, std::min(0.1, beta), beta, 2.0);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(static_cast<int64_t>(s->kept.size()), KeepBudget(beta, n));
      EXPECT_TRUE(std::is_sorted(s->kept.begin(), s->kept.end()));
      for (int64_t c : s->core) {
        EXPECT_TRUE(std::binary_search(s->kept.begin(), s->kept.end(), c));
      }
      if (n > 1) {
        EXPECT_FLOAT_EQ(*std::max_element(s->normalized.begin(), s->normalized.end()), 1.0f);
      }
    }
  }
}

TEST(AffinityCompressorTest, RejectsMissingRouting) {
  CompressionInput in = HandCase();
  in.active_experts = {};
  auto s = ScoreAffinity(in, 0.1, 0.5, 2.0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenCompressorTest, KeepBudgetFloors) {
  EXPECT_EQ(KeepBudget(0.5, 64), 32);
  EXPECT_EQ(KeepBudget(0.5, 7), 3);
  EXPECT_EQ(KeepBudget(0.29, 100), 29);
  EXPECT_EQ(KeepBudget(0.1, 5), 1);  // never empty
  EXPECT_EQ(KeepBudget(1.0, 5), 5);
  EXPECT_EQ(KeepBudget(0.5, 0), 0);
}

TEST(TokenCompressorTest, RandomIsSeeded) {
  CompressionInput in;
  in.num_tokens = 100;
  auto a = MakeTokenCompressor({"random", 0.3, 0.1, 2.0, 7});
  auto b = MakeTokenCompressor({"random", 0.3, 0.1, 2.0, 8});
  ASSERT_TRUE(a.ok() && b.ok());
  auto x1 = (*a)->Select(in), x2 = (*a)->Select(in), y = (*b)->Select(in);
  ASSERT_TRUE(x1.ok() && x2.ok() && y.ok());
  EXPECT_EQ(x1->size(), 30u);
  EXPECT_EQ(*x1, *x2);
  EXPECT_NE(*x1, *y);
  EXPECT_TRUE(std::is_sorted(x1->begin(), x1->end()));
  EXPECT_EQ(std::adjacent_find(x1->begin(), x1->end()), x1->end());
}

TEST(TokenCompressorTest, NoneKeepsAll) {
  auto c = MakeTokenCompressor({});
  ASSERT_TRUE(c.ok());
  auto k = (*c)->Select(HandCase());
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->size(), 10u);
}

TEST(TokenCompressorTest, FactoryValidates) {
  auto bad = MakeTokenCompressor({"zip", 0.5, 0.1, 2.0, 0});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'zip'"));
  EXPECT_FALSE(MakeTokenCompressor({"saliency", 0.0, 0.0, 2.0, 0}).ok());
  EXPECT_FALSE(MakeTokenCompressor({"saliency", 1.5, 0.1, 2.0, 0}).ok());
  EXPECT_FALSE(MakeTokenCompressor({"affinity", 0.5, 0.6, 2.0, 0}).ok());
}

// Every keep ratio in (0, 1] works for every kind: alpha follows beta down.
TEST(TokenCompressorTest, EveryKeepRatioIsValidForEveryKind) {
  CompressionInput in = HandCase();
  for (const char* kind : {"none", "random", "saliency", "affinity"}) {
    for (const double beta : {1.0, 0.5, 0.1, 0.05, 0.01}) {
      TokenCompressorOptions o;
      o.kind = kind;
      o = WithKeepRatio(o, beta);
      EXPECT_EQ(o.beta, beta);
      EXPECT_LE(o.alpha, beta);
      auto c = MakeTokenCompressor(o);
      ASSERT_TRUE(c.ok()) << kind << " " << beta << ": " << c.status();
      auto kept = (*c)->Select(in);
      ASSERT_TRUE(kept.ok()) << kind << " " << beta << ": " << kept.status();
      EXPECT_EQ(static_cast<int64_t>(kept->size()),
                std::string(kind) == "none" ? 10 : KeepBudget(beta, 10));
    }
  }
  TokenCompressorOptions o;
  EXPECT_EQ(WithKeepRatio(o, 0.5).alpha, o.alpha);  // unchanged when below beta
}

}  // namespace
}  // namespace vismoe
