// Hand-computed cases for the CPU reference kernels.
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu/activations.h"
#include "engine/ops/cpu/attention.h"
#include "engine/ops/cpu/group_router.h"
#include "engine/ops/cpu/moe.h"
#include "engine/ops/cpu/rms_norm.h"
#include "engine/ops/cpu/rope.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe::cpu {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

TensorView F32View(const std::vector<float>& v, Shape shape) {
  return TensorView{v.data(), DType::kF32, std::move(shape)};
}

TEST(ActivationsTest, KnownValues) {
  EXPECT_FLOAT_EQ(Silu(0.0f), 0.0f);
  EXPECT_NEAR(Silu(1.0f), 0.7310585786f, 1e-6);
  EXPECT_NEAR(Silu(-2.0f), -0.2384058440f, 1e-6);
  EXPECT_NEAR(GeluTanh(1.0f), 0.8411919906f, 1e-6);
  EXPECT_NEAR(GeluErf(1.0f), 0.8413447461f, 1e-6);
  EXPECT_NEAR(GeluErf(-1.0f), -0.1586552539f, 1e-6);
  std::vector<float> x = {1.0f, -1.0f};
  GeluErfInPlace(nullptr, x.data(), 2);
  EXPECT_NEAR(x[0], 0.8413447461f, 1e-6);
  std::vector<float> g = {1.0f, 0.0f}, u = {2.0f, 5.0f}, o(2);
  SiluMul(g.data(), u.data(), 2, o.data());
  EXPECT_NEAR(o[0], 2 * 0.7310585786f, 1e-6);
  EXPECT_EQ(o[1], 0.0f);
}

TEST(RmsNormTest, HandComputed) {
  ThreadPool pool(2);
  std::vector<float> x = {1, 2, 3, 4, -2, 0, 0, 0};
  std::vector<float> w = {1, 1, 2, 0.5};
  std::vector<float> y(8);
  RmsNorm(&pool, x.data(), 2, 4, F32View(w, {4}), 0.0f, y.data());
  const float inv0 = 1.0f / std::sqrt(7.5f);
  EXPECT_THAT(std::vector<float>(y.begin(), y.begin() + 4),
              Pointwise(FloatNear(1e-6), {inv0, 2 * inv0, 6 * inv0, 2 * inv0}));
  // Second row: mean square 1 -> unchanged times weight.
  EXPECT_THAT(std::vector<float>(y.begin() + 4, y.end()),
              Pointwise(FloatNear(1e-6), {-2.0f, 0.0f, 0.0f, 0.0f}));
  // eps matters and in-place works.
  RmsNorm(nullptr, x.data(), 1, 4, F32View(w, {4}), 0.5f, x.data());
  EXPECT_NEAR(x[0], 1.0f / std::sqrt(8.0f), 1e-6);
}

TEST(RopeTest, PlainHandComputed) {
  // head_dim 4, theta 10000: inv_freq = [1, 0.01]; position 1.
  std::vector<int64_t> pos = {1};
  RopeTable t = BuildRopeTable(pos.data(), 1, 4, 10000.0, {});
  EXPECT_NEAR(t.cos[0], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(t.cos[1], std::cos(0.01f), 1e-6);
  EXPECT_NEAR(t.cos[2], std::cos(1.0f), 1e-6);
  EXPECT_NEAR(t.sin[3], std::sin(0.01f), 1e-6);
  std::vector<float> x = {1, 0, 0, 0};
  ApplyRope(nullptr, t, x.data(), 1, 1, 4, 4);
  // x*cos + rotate_half(x)*sin, rotate_half([1,0,0,0]) = [0,0,1,0].
  EXPECT_THAT(x, Pointwise(FloatNear(1e-6), {std::cos(1.0f), 0.0f, std::sin(1.0f), 0.0f}));
}

TEST(RopeTest, MropeWithEqualAxesMatchesPlain) {
  const int n = 5, head_dim = 32;
  std::vector<int64_t> pos(3 * n);
  for (int a = 0; a < 3; ++a) {
    for (int i = 0; i < n; ++i) pos[a * n + i] = 7 + 3 * i;
  }
  RopeTable plain = BuildRopeTable(pos.data(), n, head_dim, 5e6, {});
  RopeTable m = BuildRopeTable(pos.data(), n, head_dim, 5e6, {6, 5, 5});
  EXPECT_EQ(plain.cos, m.cos);
  EXPECT_EQ(plain.sin, m.sin);
}

TEST(RopeTest, MropeInterleavesAxes) {
  // head_dim 12 -> 6 frequencies, section [2, 2, 2]: j = 0,3 -> t; 1,4 -> h; 2,5 -> w.
  std::vector<int64_t> pos = {1, 2, 3};  // t=1, h=2, w=3 for one token
  RopeTable t = BuildRopeTable(pos.data(), 1, 12, 10000.0, {2, 2, 2});
  const int axis_of[6] = {0, 1, 2, 0, 1, 2};
  for (int j = 0; j < 6; ++j) {
    const float inv = 1.0f / static_cast<float>(std::pow(10000.0, (2.0 * j) / 12.0));
    const float f = static_cast<float>(pos[axis_of[j]]) * inv;
    EXPECT_NEAR(t.cos[j], std::cos(f), 1e-6) << j;
    EXPECT_NEAR(t.sin[j + 6], std::sin(f), 1e-6) << j;
  }
  // Section [3, 2, 1]: j = 2 -> w (2 < 3), j = 5 -> t (5 >= 3*1).
  RopeTable u = BuildRopeTable(pos.data(), 1, 12, 10000.0, {3, 2, 1});
  const float inv5 = 1.0f / static_cast<float>(std::pow(10000.0, 10.0 / 12.0));
  EXPECT_NEAR(u.cos[5], std::cos(1.0f * inv5), 1e-6);
  const float inv2 = 1.0f / static_cast<float>(std::pow(10000.0, 4.0 / 12.0));
  EXPECT_NEAR(u.cos[2], std::cos(3.0f * inv2), 1e-6);
}

TEST(AttentionTest, CausalHandComputed) {
  // One head, head_dim 2 (scale 1/sqrt(2)), two tokens.
  std::vector<float> q = {1, 0, 0, 1};
  std::vector<float> k = {1, 0, 0, 1};
  std::vector<float> v = {1, 2, 3, 4};
  std::vector<float> out(4), sal(2);
  AttentionShape shape{1, 1, 2};
  Attention(nullptr, shape, q.data(), 2, k.data(), v.data(), 2, true, 0, out.data(), sal.data());
  // Row 0 sees key 0 only.
  EXPECT_THAT(std::vector<float>(out.begin(), out.begin() + 2), ElementsAre(1.0f, 2.0f));
  // Row 1: scores [0, 1/sqrt2].
  const float s = 1.0f / std::sqrt(2.0f);
  const float p1 = std::exp(s) / (1.0f + std::exp(s)), p0 = 1.0f - p1;
  EXPECT_NEAR(out[2], p0 * 1 + p1 * 3, 1e-6);
  EXPECT_NEAR(out[3], p0 * 2 + p1 * 4, 1e-6);
  EXPECT_NEAR(sal[0], (1.0f + p0) / 2, 1e-6);
  EXPECT_NEAR(sal[1], p1 / 2, 1e-6);
  EXPECT_NEAR(sal[0] + sal[1], 1.0f, 1e-6);

  // Non-causal: row 0 now also sees key 1.
  Attention(nullptr, shape, q.data(), 2, k.data(), v.data(), 2, false, 0, out.data());
  EXPECT_NEAR(out[0], p1 * 1 + p0 * 3, 1e-6);
  // Causal with an offset: a single query at position 1 sees both keys.
  std::vector<float> o1(2);
  Attention(nullptr, shape, q.data() + 2, 1, k.data(), v.data(), 2, true, 1, o1.data());
  EXPECT_NEAR(o1[0], out[2], 1e-6);
}

// GPT-OSS's sinks: a per-head logit in the denominator with no value, so a
// row's probabilities sum to less than 1.
TEST(AttentionTest, SinksTakeTheirShareOfTheSoftmax) {
  const std::vector<float> q = {1, 0};  // one head, head_dim 2
  std::vector<float> k = {1, 0, 0, 1}, v = {1, 2, 3, 4}, out(2);
  const std::vector<float> sinks = {0.5f};
  AttentionShape shape{1, 1, 2};
  shape.sinks = sinks.data();
  // The query at position 1 sees keys 0 (score 1/sqrt2) and 1 (score 0).
  Attention(nullptr, shape, q.data(), 1, k.data(), v.data(), 2, true, 1, out.data());
  const float e0 = std::exp(1.0f / std::sqrt(2.0f)), e1 = 1.0f, es = std::exp(0.5f);
  const float z = e0 + e1 + es;
  EXPECT_NEAR(out[0], (e0 * 1 + e1 * 3) / z, 1e-6);
  EXPECT_NEAR(out[1], (e0 * 2 + e1 * 4) / z, 1e-6);
}

TEST(AttentionTest, GqaSharesKvHeadsAndMatchesThreaded) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  const int nq = 3, nk = 5, heads = 4, kv_heads = 2, d = 8;
  std::vector<float> q(nq * heads * d), k(nk * kv_heads * d), v(nk * kv_heads * d);
  for (auto* vec : {&q, &k, &v}) {
    for (float& x : *vec) x = nd(rng);
  }
  // Heads 0 and 1 share kv head 0: give them the same query -> same output.
  for (int i = 0; i < nq; ++i) {
    for (int t = 0; t < d; ++t) q[(i * heads + 1) * d + t] = q[(i * heads + 0) * d + t];
  }
  std::vector<float> out(nq * heads * d), out2(out.size()), sal(nk), sal2(nk);
  AttentionShape shape{heads, kv_heads, d};
  Attention(nullptr, shape, q.data(), nq, k.data(), v.data(), nk, true, 2, out.data(), sal.data());
  for (int i = 0; i < nq; ++i) {
    for (int t = 0; t < d; ++t) {
      EXPECT_FLOAT_EQ(out[(i * heads + 1) * d + t], out[(i * heads + 0) * d + t]);
    }
  }
  EXPECT_NEAR(std::accumulate(sal.begin(), sal.end(), 0.0f), 1.0f, 1e-5);
  ThreadPool pool(3);
  Attention(&pool, q.data(), nq, k.data(), v.data(), nk, heads, kv_heads, d, 0, true, 2,
            out2.data(), sal2.data());
  EXPECT_EQ(out, out2);
  EXPECT_EQ(sal, sal2);
  // Query 0 sits at position 2: keys 3 and 4 get nothing from it; the last key
  // is seen by query 2 only.
  Attention(&pool, q.data(), 1, k.data(), v.data(), nk, heads, kv_heads, d, 0, true, 2, out2.data(),
            sal2.data());
  EXPECT_EQ(sal2[3], 0.0f);
  EXPECT_EQ(sal2[4], 0.0f);
}

TEST(MoeTest, TopKTiesPickLowerIndex) {
  std::vector<float> p = {0.1f, 0.3f, 0.3f, 0.2f, 0.3f};
  int idx[3];
  float val[3];
  TopK(p.data(), 5, 3, idx, val);
  EXPECT_THAT(idx, ElementsAre(1, 2, 4));
}

TEST(MoeTest, RouterSoftmaxTopKRenormalise) {
  // W_g = identity, so the logits are x itself.
  std::vector<float> w = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::vector<float> x = {0.0f, 2.0f, 1.0f, -1.0f};
  RouterResult r;
  Route(nullptr, x.data(), 1, 4, F32View(w, {4, 4}), 2, true, &r);
  EXPECT_THAT(r.logits, ElementsAre(0.0f, 2.0f, 1.0f, -1.0f));
  EXPECT_THAT(r.experts, ElementsAre(1, 2));
  const float e = std::exp(1.0f);  // p1 / p2 = e
  EXPECT_NEAR(r.weights[0], e / (1 + e), 1e-6);
  EXPECT_NEAR(r.weights[1], 1 / (1 + e), 1e-6);
  Route(nullptr, x.data(), 1, 4, F32View(w, {4, 4}), 2, false, &r);
  const float z = 1 + std::exp(2.0f) + e + std::exp(-1.0f);
  EXPECT_NEAR(r.weights[0], std::exp(2.0f) / z, 1e-6);
  EXPECT_NEAR(r.weights[1], e / z, 1e-6);
}

// GPT-OSS's router: the top-k of the biased logits, softmax over those k.
TEST(MoeTest, TopKSoftmaxRoutesOnBiasedLogits) {
  std::vector<float> w(16, 0.0f);
  for (int i = 0; i < 4; ++i) w[i * 4 + i] = 1;
  const std::vector<float> x = {1.0f, 0.0f, 0.5f, 2.0f}, bias = {0.0f, 1.5f, 0.0f, -2.0f};
  RouterResult r;
  RouteTopKSoftmax(nullptr, x.data(), 1, 4, F32View(w, {4, 4}), F32View(bias, {4}), 2, &r);
  EXPECT_THAT(r.logits, ElementsAre(1.0f, 1.5f, 0.5f, 0.0f));
  EXPECT_THAT(r.experts, ElementsAre(1, 0));
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-0.5f)), 1e-6);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0f, 1e-6);
}

TEST(MoeTest, SparseMixerMasksFarLogitsAndPicksTwo) {
  // W_g = identity: logits = x. eps 0.1: masked when (m - l) / max(|l|, m) > 0.2.
  std::vector<float> w(25, 0.0f);
  for (int i = 0; i < 5; ++i) w[i * 5 + i] = 1;
  std::vector<float> x = {1.0f, 0.9f, 0.5f, 0.85f, -2.0f};
  RouterResult r;
  RouteSparseMixer(nullptr, x.data(), 1, 5, F32View(w, {5, 5}), 0.1f, &r);
  EXPECT_EQ(r.top_k, 2);
  EXPECT_THAT(r.logits, ElementsAre(1.0f, 0.9f, 0.5f, 0.85f, -2.0f));
  EXPECT_THAT(r.experts, ElementsAre(0, 1));
  // Pick 1 (m = 1): 0.9 and 0.85 stay (ratios 0.1, 0.15), 0.5 and -2 go.
  const float z1 = std::exp(0.0f) + std::exp(-0.1f) + std::exp(-0.15f);
  EXPECT_NEAR(r.weights[0], 1.0f / z1, 1e-6);
  // Pick 2 (expert 0 out, m = 0.9): 0.85 stays (0.05 / 0.9), 0.5 goes (0.4 / 0.9).
  const float z2 = 1.0f + std::exp(-0.05f);
  EXPECT_NEAR(r.weights[1], 1.0f / z2, 1e-6);
  // eps 0: only the maximum survives each pick's mask.
  RouteSparseMixer(nullptr, x.data(), 1, 5, F32View(w, {5, 5}), 0.0f, &r);
  EXPECT_THAT(r.experts, ElementsAre(0, 1));
  EXPECT_THAT(r.weights, ElementsAre(1.0f, 1.0f));
}

// DeepSeek-V2's router: softmax over all experts; group-limited, a group
// scores its best probability and the others' experts drop out; the kept
// probabilities (not renormalised) times routed_scaling_factor.
TEST(MoeTest, GroupSoftmaxKeepsTheBestGroups) {
  // W_g = identity: logits = x. Groups {0,1} {2,3} {4,5}.
  std::vector<float> w(36, 0.0f);
  for (int i = 0; i < 6; ++i) w[i * 6 + i] = 1;
  const std::vector<float> x = {2.0f, 1.9f, 2.1f, -3.0f, 0.0f, 0.5f};
  float z = 0;
  for (float v : x) z += std::exp(v);
  GroupRouting g;
  g.top_k = 2;
  g.scale = 2.0f;
  RouterResult r;
  RouteGroupSoftmax(nullptr, x.data(), 1, 6, F32View(w, {6, 6}), g, &r);
  EXPECT_THAT(r.experts, ElementsAre(2, 0));  // plain top-2
  EXPECT_NEAR(r.weights[0], 2 * std::exp(2.1f) / z, 1e-6);
  g.group_limited = true;
  g.n_group = 3;
  g.topk_group = 2;  // groups {0,1} (max 2.0) and {2,3} (max 2.1) stay
  RouteGroupSoftmax(nullptr, x.data(), 1, 6, F32View(w, {6, 6}), g, &r);
  EXPECT_THAT(r.experts, ElementsAre(2, 0));
  g.topk_group = 1;  // only {2,3}: expert 3, far below expert 0, is taken
  RouteGroupSoftmax(nullptr, x.data(), 1, 6, F32View(w, {6, 6}), g, &r);
  EXPECT_THAT(r.experts, ElementsAre(2, 3));
  EXPECT_NEAR(r.weights[1], 2 * std::exp(-3.0f) / z, 1e-7);
}

// DeepSeek-V3's router: the bias picks the groups (sum of each group's two
// best biased scores) and the experts; the weights are the unbiased sigmoids,
// normalised, times routed_scaling_factor.
TEST(MoeTest, GroupSigmoidSelectsWithTheBiasAndWeighsWithout) {
  std::vector<float> w(16, 0.0f);
  for (int i = 0; i < 4; ++i) w[i * 4 + i] = 1;
  const std::vector<float> x = {1.0f, 0.0f, 0.5f, -1.0f};  // groups {0,1} {2,3}
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 3.0f};
  auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  GroupRouting g;
  g.top_k = 2;
  g.n_group = 2;
  g.topk_group = 1;
  g.group_limited = true;
  g.normalize = true;
  g.scale = 2.5f;
  RouterResult r;
  RouteGroupSigmoid(nullptr, x.data(), 1, 4, F32View(w, {4, 4}), F32View(bias, {4}), g, &r);
  // Group {2,3} scores sig(.5) + sig(-1) + 3 > sig(1) + sig(0): experts 3 then 2.
  EXPECT_THAT(r.experts, ElementsAre(3, 2));
  const float s2 = sig(0.5f), s3 = sig(-1.0f);
  EXPECT_NEAR(r.weights[0], 2.5f * s3 / (s2 + s3), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5f * s2 / (s2 + s3), 1e-6);
  g.normalize = false;
  RouteGroupSigmoid(nullptr, x.data(), 1, 4, F32View(w, {4, 4}), F32View(bias, {4}), g, &r);
  EXPECT_NEAR(r.weights[0], 2.5f * s3, 1e-6);
}

// YaRN's frequencies (transformers' _compute_yarn_parameters, dim 8, theta
// 10000, factor 4, original context 64: the ramp runs over [0, 2]): the first
// pair keeps its frequency, those past the ramp are divided by the factor,
// and the one inside is blended half and half.
TEST(RopeTest, YarnBlendsExtrapolatedAndInterpolatedFrequencies) {
  const std::vector<float> inv = YarnInvFreq(8, 10000.0, 4.0, 64, 32, 1, true);
  ASSERT_EQ(inv.size(), 4u);
  const auto base = [](int j) { return std::pow(10000.0f, 2.0f * j / 8.0f); };
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[1], 0.5f / base(1) + 0.5f / (4 * base(1)), 1e-7);
  EXPECT_NEAR(inv[2], 1.0f / (4 * base(2)), 1e-9);
  EXPECT_NEAR(inv[3], 1.0f / (4 * base(3)), 1e-9);
}

// DeepSeek-V2's RoPE rotates interleaved pairs (x[2j], x[2j+1]).
TEST(RopeTest, PairsRotateInterleavedElements) {
  std::vector<int64_t> pos = {2};
  const RopeTable t = BuildRopeTable(pos.data(), 1, 4, std::vector<float>{1.0f, 0.5f});
  std::vector<float> v = {1.0f, 0.0f, 0.0f, 1.0f};
  ApplyRopePairs(nullptr, t, v.data(), 1, 1, 4, 4);
  EXPECT_NEAR(v[0], std::cos(2.0f), 1e-6);  // (1 + 0i) e^{2i}
  EXPECT_NEAR(v[1], std::sin(2.0f), 1e-6);
  EXPECT_NEAR(v[2], -std::sin(1.0f), 1e-6);  // (0 + 1i) e^{1i}
  EXPECT_NEAR(v[3], std::cos(1.0f), 1e-6);
}

TEST(RopeTest, LongRopeFactorsDivideTheFrequencies) {
  std::vector<int64_t> pos = {3};
  const std::vector<float> ext = {2.0f, 4.0f};
  RopeTable t = BuildRopeTable(pos.data(), 1, 4, 10000.0, {}, &ext);
  EXPECT_NEAR(t.cos[0], std::cos(3.0f / 2.0f), 1e-6);
  EXPECT_NEAR(t.sin[1], std::sin(0.03f / 4.0f), 1e-6);
  ScaleRopeRows(&t, 0, 1, 1.5f);
  EXPECT_NEAR(t.cos[2], 1.5f * std::cos(3.0f / 2.0f), 1e-6);
  EXPECT_NEAR(t.sin[3], 1.5f * std::sin(0.03f / 4.0f), 1e-6);
}

TEST(MoeTest, SwiGluBothLayoutsMatchNaive) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int n = 3, h = 6, inter = 4;
  std::vector<float> gate(inter * h), up(inter * h), down(h * inter), x(n * h);
  for (auto* vec : {&gate, &up, &down, &x}) {
    for (float& f : *vec) f = nd(rng);
  }
  // Naive reference.
  std::vector<float> ref(n * h, 0.0f);
  for (int t = 0; t < n; ++t) {
    std::vector<float> a(inter);
    for (int i = 0; i < inter; ++i) {
      float g = 0, u = 0;
      for (int d = 0; d < h; ++d) {
        g += x[t * h + d] * gate[i * h + d];
        u += x[t * h + d] * up[i * h + d];
      }
      a[i] = g / (1 + std::exp(-g)) * u;
    }
    for (int d = 0; d < h; ++d) {
      for (int i = 0; i < inter; ++i) ref[t * h + d] += a[i] * down[d * inter + i];
    }
  }
  ExpertWeights sep;
  sep.layout = ExpertWeights::Layout::kSeparate;
  sep.gate = F32View(gate, {inter, h});
  sep.up = F32View(up, {inter, h});
  sep.down = F32View(down, {h, inter});
  std::vector<float> y(n * h);
  ExpertForward(nullptr, sep, x.data(), n, h, inter, y.data());
  EXPECT_THAT(y, Pointwise(FloatNear(1e-5), ref));

  // Fused transposed: gate_up [H, 2I] with gate in columns [0, I); down [I, H].
  std::vector<float> gate_up(h * 2 * inter), down_t(inter * h);
  for (int d = 0; d < h; ++d) {
    for (int i = 0; i < inter; ++i) {
      gate_up[d * 2 * inter + i] = gate[i * h + d];
      gate_up[d * 2 * inter + inter + i] = up[i * h + d];
      down_t[i * h + d] = down[d * inter + i];
    }
  }
  ExpertWeights fused;
  fused.gate_up = F32View(gate_up, {h, 2 * inter});
  fused.down = F32View(down_t, {inter, h});
  ThreadPool pool(2);
  ExpertForward(&pool, fused, x.data(), n, h, inter, y.data());
  EXPECT_THAT(y, Pointwise(FloatNear(1e-5), ref));
}

// GPT-OSS's expert: gate_up [H, 2I] with gate in the even columns and up in
// the odd ones, biases, and the clamps at +-limit.
TEST(MoeTest, ClampedSwigluExpertMatchesAHandLoop) {
  const int64_t h = 2, inter = 2;
  // Columns (g0, u0, g1, u1); x = (1, 2).
  const std::vector<float> gate_up = {3, 1, -1, 10,  //
                                      4, 0, 1,  -6};
  const std::vector<float> gu_bias = {0.5f, 0, 0, 1}, down = {1, 2, 3, 4}, d_bias = {0.25f, -1};
  ExpertWeights fused;
  fused.gate_up = F32View(gate_up, {h, 2 * inter});
  fused.down = F32View(down, {inter, h});
  ClampedSwigluExpert oss;
  oss.gate_up_bias = F32View(gu_bias, {2 * inter});
  oss.down_bias = F32View(d_bias, {h});
  oss.alpha = 1.702f;
  oss.limit = 7.0f;
  const std::vector<float> x = {1, 2};
  std::vector<float> y(h);
  ExpertForward(nullptr, fused, x.data(), 1, h, inter, y.data(), &oss);
  // Pre-activations: g0 = 3 + 8 + .5 = 11.5 -> 7 (clamped), u0 = 1; g1 = 1, u1 = 10 - 12 + 1 = -1.
  auto act = [](float g, float u) { return (u + 1) * g / (1 + std::exp(-1.702f * g)); };
  const float a0 = act(7.0f, 1.0f), a1 = act(1.0f, -1.0f);
  EXPECT_NEAR(y[0], a0 * 1 + a1 * 3 + 0.25f, 1e-5);
  EXPECT_NEAR(y[1], a0 * 2 + a1 * 4 - 1.0f, 1e-5);
}

}  // namespace
}  // namespace vismoe::cpu
