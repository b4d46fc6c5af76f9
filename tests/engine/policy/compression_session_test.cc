// CompressionSession's choice of rows: text rows always kept, each image's
// visual rows ranked by the compressor; rows marked as layout (DeepSeek-VL2's
// newlines and view separator) kept whatever the ranking, the keep ratio
// applying to the others.
#include "engine/policy/compression_session.h"

#include <cstdint>
#include <vector>

#include "engine/policy/token_compressor.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

constexpr int kImage = 9;
const std::vector<int> kTokens = {5, kImage, kImage, kImage, kImage, kImage, 6};
const std::vector<int64_t> kPerImage = {5};
const std::vector<float> kSaliency = {0.1f, 0.9f, 0.0f, 0.5f, 0.2f};

std::unique_ptr<TokenCompressor> Saliency(double beta) {
  TokenCompressorOptions o;
  o.kind = "saliency";
  o.beta = beta;
  return *MakeTokenCompressor(o);
}

TEST(CompressionSessionTest, RanksEveryVisualRowWithoutLayout) {
  const auto compressor = Saliency(0.5);
  CompressionSession s(compressor.get(), kTokens, kImage, kPerImage, kSaliency, 0);
  absl::StatusOr<std::vector<int64_t>> rows = s.KeptRows();
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, (std::vector<int64_t>{0, 2, 4, 6}));  // floor(0.5 * 5) = 2: saliency 0.9, 0.5
  EXPECT_EQ(s.kept_visual(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(s.visual_after(), 2);
}

TEST(CompressionSessionTest, KeepsLayoutRowsAndRanksTheOthers) {
  const auto compressor = Saliency(0.5);
  const std::vector<uint8_t> layout = {0, 0, 1, 0, 0};  // the third visual row
  CompressionSession s(compressor.get(), kTokens, kImage, kPerImage, kSaliency, 0, nullptr, layout);
  absl::StatusOr<std::vector<int64_t>> rows = s.KeptRows();
  ASSERT_TRUE(rows.ok()) << rows.status();
  // floor(0.5 * 4) = 2 of the ranked rows (saliency 0.9 and 0.5), plus the layout row.
  EXPECT_EQ(*rows, (std::vector<int64_t>{0, 2, 3, 4, 6}));
  EXPECT_EQ(s.kept_visual(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(s.visual_before(), 5);
  EXPECT_EQ(s.visual_after(), 3);
  // An image of layout rows only keeps them all.
  const std::vector<uint8_t> all(5, 1);
  CompressionSession only(compressor.get(), kTokens, kImage, kPerImage, kSaliency, 0, nullptr, all);
  rows = only.KeptRows();
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), kTokens.size());
}

TEST(CompressionSessionTest, RefusesALayoutOfAnotherSize) {
  const auto compressor = Saliency(0.5);
  const std::vector<uint8_t> layout = {0, 1};
  CompressionSession s(compressor.get(), kTokens, kImage, kPerImage, kSaliency, 0, nullptr, layout);
  absl::StatusOr<std::vector<int64_t>> rows = s.KeptRows();
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vismoe
