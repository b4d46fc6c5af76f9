// M-RoPE positions and image-pad expansion: hand-worked cases following
// transformers' Qwen3VLMoeModel.get_rope_index, and error cases.
#include "engine/arch/mrope_positions.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kPad = 9;    // image_token_id
constexpr int kStart = 7;  // vision_start
constexpr int kEnd = 8;    // vision_end
constexpr int kVideo = 6;

ModelConfig Config() {
  ModelConfig c;
  c.image_token_id = kPad;
  c.video_token_id = kVideo;
  c.vision_start_token_id = kStart;
  c.vision_end_token_id = kEnd;
  c.has_vision = true;
  c.vision.spatial_merge_size = 2;
  return c;
}

TEST(MropePositionsTest, TextOnlyIsArange) {
  auto r = ComputeMropePositions({1, 2, 3}, {}, Config());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->positions, ElementsAre(0, 1, 2, 0, 1, 2, 0, 1, 2));
  EXPECT_EQ(r->rope_delta, 0);
}

TEST(MropePositionsTest, OneImageHandWorked) {
  // "a <start> [2x3 merged grid = patches (1, 4, 6)] <end> b"
  const std::vector<int> ids = {1, kStart, kPad, kPad, kPad, kPad, kPad, kPad, kEnd, 2};
  auto r = ComputeMropePositions(ids, {GridThw{1, 4, 6}}, Config());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->length(), 10);
  // text 0, 1; image starts at s = 2: t = 2, h = 2 + row, w = 2 + col;
  // then s = 2 + max(2, 3) = 5 for <end>, 6 for b.
  const std::vector<int64_t> t(r->positions.begin(), r->positions.begin() + 10);
  const std::vector<int64_t> h(r->positions.begin() + 10, r->positions.begin() + 20);
  const std::vector<int64_t> w(r->positions.begin() + 20, r->positions.end());
  EXPECT_THAT(t, ElementsAre(0, 1, 2, 2, 2, 2, 2, 2, 5, 6));
  EXPECT_THAT(h, ElementsAre(0, 1, 2, 2, 2, 3, 3, 3, 5, 6));
  EXPECT_THAT(w, ElementsAre(0, 1, 2, 3, 4, 2, 3, 4, 5, 6));
  EXPECT_EQ(r->rope_delta, 6 + 1 - 10);
}

TEST(MropePositionsTest, TwoImagesAndTemporalGrid) {
  // Image 1: (1, 2, 2) -> 1 token; image 2: (2, 2, 4) -> 2 frames x 1 x 2 = 4 tokens.
  const std::vector<int> ids = {kStart, kPad, kEnd, kStart, kPad, kPad, kPad, kPad, kEnd};
  auto r = ComputeMropePositions(ids, {GridThw{1, 2, 2}, GridThw{2, 2, 4}}, Config());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<int64_t> t(r->positions.begin(), r->positions.begin() + 9);
  const std::vector<int64_t> w(r->positions.begin() + 18, r->positions.end());
  // s: 0 start, image at 1 (s -> 2), end 2, start 3, image at 4 (s -> 4 + 2 = 6), end 6.
  EXPECT_THAT(t, ElementsAre(0, 1, 2, 3, 4, 4, 5, 5, 6));
  EXPECT_THAT(w, ElementsAre(0, 1, 2, 3, 4, 5, 4, 5, 6));
  EXPECT_EQ(r->rope_delta, 6 + 1 - 9);
}

TEST(MropePositionsTest, Errors) {
  const ModelConfig c = Config();
  EXPECT_THAT(ComputeMropePositions({kPad}, {}, c).status().message(),
              HasSubstr("more image-pad runs"));
  EXPECT_THAT(ComputeMropePositions({1}, {GridThw{1, 2, 2}}, c).status().message(),
              HasSubstr("0 image-pad runs but 1"));
  EXPECT_THAT(ComputeMropePositions({kPad, kPad}, {GridThw{1, 2, 2}}, c).status().message(),
              HasSubstr("needs 1"));
  EXPECT_THAT(ComputeMropePositions({kPad}, {GridThw{1, 3, 2}}, c).status().message(),
              HasSubstr("divisible"));
  EXPECT_THAT(ComputeMropePositions({kVideo}, {}, c).status().message(), HasSubstr("video"));
}

TEST(ExpandImagePadsTest, ExpandsEachPlaceholder) {
  auto r = ExpandImagePads({1, kStart, kPad, kEnd, kStart, kPad, kEnd},
                           {GridThw{1, 4, 4}, GridThw{1, 2, 2}}, Config());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre(1, kStart, kPad, kPad, kPad, kPad, kEnd, kStart, kPad, kEnd));
  // The expansion is what ComputeMropePositions accepts.
  EXPECT_TRUE(ComputeMropePositions(*r, {GridThw{1, 4, 4}, GridThw{1, 2, 2}}, Config()).ok());
}

TEST(ExpandImagePadsTest, Errors) {
  const ModelConfig c = Config();
  EXPECT_THAT(ExpandImagePads({kPad, kPad}, {GridThw{1, 2, 2}}, c).status().message(),
              HasSubstr("already expanded"));
  EXPECT_THAT(ExpandImagePads({kPad}, {}, c).status().message(), HasSubstr("more image"));
  EXPECT_THAT(ExpandImagePads({1}, {GridThw{1, 2, 2}}, c).status().message(),
              HasSubstr("0 image placeholders but 1"));
  EXPECT_THAT(ExpandImagePads({kPad}, {GridThw{0, 2, 2}}, c).status().message(), HasSubstr("grid"));
}

}  // namespace
}  // namespace vismoe
