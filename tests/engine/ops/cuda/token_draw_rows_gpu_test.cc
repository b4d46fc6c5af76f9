// DrawTokenRows (engine/ops/cuda/token_draw_rows.h) against TokenPicker
// (engine/core/token_draw.h) on the host: every sampled row draws the host's
// token, over vocabularies of 7 to 151,936 logits, flat and peaked rows,
// ties, temperatures and top_p cuts; greedy and non-finite rows keep what
// GreedyArgmaxRows gave them; top_k rows and buckets of more than
// kTokenDrawMaxMembers logits go to the host.
#include "gtest/gtest.h"

#ifndef VISMOE_HAVE_CUDA
TEST(TokenDrawRowsGpuTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/token_draw.h"
#include "engine/ops/cuda/greedy_argmax.h"
#include "engine/ops/cuda/token_draw_rows.h"
#include "tests/engine/ops/cuda/gpu_test_util.h"

namespace vismoe::cuda {
namespace {

using testing::Download;
using testing::Upload;

// Rows of `vocab` logits and their draws, through GreedyArgmaxRows then
// DrawTokenRows; the device's token per row.
std::vector<int32_t> DeviceTokens(const std::vector<float>& logits, int64_t vocab,
                                  const std::vector<TokenDraw>& draws) {
  const int64_t rows = static_cast<int64_t>(draws.size());
  std::vector<DeviceTokenDraw> dd;
  for (const TokenDraw& d : draws) dd.push_back({d.temperature, d.top_k, d.top_p, 0, d.uniform});
  auto dl = Upload(logits);
  auto ddraws = Upload(dd);
  auto work = DeviceBuffer::Allocate(GreedyArgmaxWorkspaceBytes(rows));
  auto out = DeviceBuffer::Allocate(rows * 4);
  EXPECT_TRUE(dl.ok() && ddraws.ok() && work.ok() && out.ok());
  if (!(dl.ok() && ddraws.ok() && work.ok() && out.ok())) return {};
  EXPECT_TRUE(
      GreedyArgmaxRows(dl->as<float>(), rows, vocab, out->as<int32_t>(), work->data(), nullptr)
          .ok());
  const absl::Status st = DrawTokenRows(dl->as<float>(), rows, vocab, ddraws->as<DeviceTokenDraw>(),
                                        out->as<int32_t>(), nullptr);
  EXPECT_TRUE(st.ok()) << st;
  auto got = Download<int32_t>(*out, rows);
  EXPECT_TRUE(got.ok());
  return got.ok() ? *got : std::vector<int32_t>{};
}

// What the host draws from row r.
int HostToken(const std::vector<float>& logits, int64_t vocab, int64_t r, const TokenDraw& d) {
  TokenPicker picker;
  return DrawToken(absl::MakeConstSpan(logits).subspan(r * vocab, vocab), d, &picker);
}

TEST(TokenDrawRowsGpuTest, SampledRowsDrawTheHostsToken) {
  VISMOE_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (const int64_t vocab : {int64_t{151936}, int64_t{1000}, int64_t{7}}) {
    // Flat (N(0, 0.3)), spread (N(0, 3)), and peaked (one logit 12 above) rows.
    std::vector<float> logits;
    std::vector<TokenDraw> draws;
    for (const float scale : {0.3f, 3.0f}) {
      for (const bool peaked : {false, true}) {
        for (const float temperature : {0.4f, 1.0f, 2.5f}) {
          for (const float top_p : {0.05f, 0.5f, 0.9f, 1.0f}) {
            std::normal_distribution<float> normal(0.0f, scale);
            const size_t first = logits.size();
            for (int64_t i = 0; i < vocab; ++i) logits.push_back(normal(rng));
            if (peaked) logits[first + vocab / 3] += 12.0f;
            draws.push_back({temperature, 0, top_p, uniform(rng)});
          }
        }
      }
    }
    const std::vector<int32_t> got = DeviceTokens(logits, vocab, draws);
    ASSERT_EQ(got.size(), draws.size());
    for (size_t r = 0; r < draws.size(); ++r) {
      EXPECT_EQ(got[r], HostToken(logits, vocab, static_cast<int64_t>(r), draws[r]))
          << "vocab " << vocab << " row " << r << " T " << draws[r].temperature << " top_p "
          << draws[r].top_p << " u " << draws[r].uniform;
    }
  }
}

TEST(TokenDrawRowsGpuTest, TiesGreedyNonFiniteTopKAndCrowdedRows) {
  VISMOE_SKIP_WITHOUT_GPU();
  constexpr int64_t kVocab = 4000;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> steps(-40, 40);
  std::vector<float> logits;
  std::vector<TokenDraw> draws;
  // Rows 0-7: logits on a grid of 1/16, many equal (ties by id), sampled.
  for (int r = 0; r < 8; ++r) {
    for (int64_t i = 0; i < kVocab; ++i) logits.push_back(static_cast<float>(steps(rng)) / 16.0f);
    draws.push_back({1.0f, 0, r % 2 == 0 ? 0.7f : 1.0f, (r + 0.5) / 8.0});
  }
  auto row = [&](float value) { logits.insert(logits.end(), kVocab, value); };
  row(1.0f);  // 8: greedy
  logits[8 * kVocab + 17] = 2.0f;
  draws.push_back({0.0f, 0, 1.0f, 0.5});
  row(1.0f);  // 9: sampled with a NaN
  logits[9 * kVocab + 5] = std::numeric_limits<float>::quiet_NaN();
  draws.push_back({1.0f, 0, 1.0f, 0.5});
  row(0.5f);  // 10: top_k set
  draws.push_back({1.0f, 5, 1.0f, 0.5});
  row(0.5f);  // 11: every logit equal: one bucket of 4000 -- fits
  draws.push_back({1.0f, 0, 1.0f, 0.5});
  row(-1.0f);  // 12: a temperature whose quotient overflows: greedy
  logits[12 * kVocab + 99] = 3.0f;
  draws.push_back({1e-40f, 0, 0.9f, 0.5});
  const std::vector<int32_t> got = DeviceTokens(logits, kVocab, draws);
  ASSERT_EQ(got.size(), draws.size());
  for (int r = 0; r < 13; ++r) {
    if (r == 10) continue;
    EXPECT_EQ(got[r], HostToken(logits, kVocab, r, draws[r])) << "row " << r;
  }
  EXPECT_EQ(got[8], 17);
  EXPECT_EQ(got[9], -1);
  EXPECT_EQ(got[10], kDrawOnHost);
  EXPECT_EQ(got[11], 2000);  // the ids in order, u = 0.5: the middle one
  EXPECT_EQ(got[12], 99);

  // Every logit equal over more than a bucket holds: left to the host.
  const int64_t wide = kTokenDrawMaxMembers + 1;
  const std::vector<int32_t> crowded =
      DeviceTokens(std::vector<float>(wide, 0.25f), wide, {{1.0f, 0, 1.0f, 0.5}});
  ASSERT_EQ(crowded.size(), 1u);
  EXPECT_EQ(crowded[0], kDrawOnHost);
}

TEST(TokenDrawRowsGpuTest, BadArgumentsAreRefused) {
  EXPECT_EQ(DrawTokenRows(nullptr, 1, 10, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DrawTokenRows(nullptr, 70000, 10, nullptr, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vismoe::cuda

#endif  // VISMOE_HAVE_CUDA
