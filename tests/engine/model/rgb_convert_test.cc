#include "engine/model/rgb_convert.h"

#include <vector>

#include "gtest/gtest.h"

namespace vismoe {
namespace {

TEST(RgbConvertTest, CompositeMatchesPillowSpotValues) {
  // Values produced by PIL.Image.alpha_composite over opaque white.
  EXPECT_EQ(CompositeOnWhite(0, 0), 255);
  EXPECT_EQ(CompositeOnWhite(0, 255), 0);
  EXPECT_EQ(CompositeOnWhite(200, 255), 200);
  EXPECT_EQ(CompositeOnWhite(0, 128), 127);
  EXPECT_EQ(CompositeOnWhite(100, 1), 254);
  EXPECT_EQ(CompositeOnWhite(10, 200), 63);
}

TEST(RgbConvertTest, AllLayouts) {
  const std::vector<uint8_t> gray = {7, 9};
  auto g = ToRgb(gray.data(), gray.size(), 2, 1, 1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->pixels, (std::vector<uint8_t>{7, 7, 7, 9, 9, 9}));
  EXPECT_TRUE(g->alpha_dropped.empty());

  const std::vector<uint8_t> la = {0, 128};
  auto l = ToRgb(la.data(), la.size(), 1, 1, 2);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->pixels, (std::vector<uint8_t>{127, 127, 127}));
  EXPECT_EQ(l->alpha_dropped, (std::vector<uint8_t>{0, 0, 0}));  // PIL's LA -> RGB

  const std::vector<uint8_t> rgba = {10, 20, 30, 255, 10, 20, 30, 0};
  auto r = ToRgb(rgba.data(), rgba.size(), 1, 2, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->width, 1);
  EXPECT_EQ(r->height, 2);
  EXPECT_EQ(r->pixels, (std::vector<uint8_t>{10, 20, 30, 255, 255, 255}));
  EXPECT_EQ(r->alpha_dropped, (std::vector<uint8_t>{10, 20, 30, 10, 20, 30}));
  const std::vector<uint8_t> rgb = {1, 2, 3};
  EXPECT_TRUE(ToRgb(rgb.data(), rgb.size(), 1, 1, 3)->alpha_dropped.empty());
}

TEST(RgbConvertTest, RejectsBadLayouts) {
  const std::vector<uint8_t> buf(12, 0);
  EXPECT_EQ(ToRgb(buf.data(), buf.size(), 2, 2, 5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ToRgb(buf.data(), buf.size(), 2, 2, 5).status().message().find("channel layout"),
            std::string::npos);
  EXPECT_FALSE(ToRgb(buf.data(), buf.size(), 2, 2, 4).ok());  // 12 != 16 bytes
  EXPECT_FALSE(ToRgb(buf.data(), buf.size(), 0, 2, 3).ok());
}

}  // namespace
}  // namespace vismoe
