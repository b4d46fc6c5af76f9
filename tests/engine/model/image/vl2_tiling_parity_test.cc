// DeepSeek-VL2's tiling plan against the published processor's own numbers
// (tests/fixtures/golden/deepseek_vl2_tiling_cases.json: select_best_resolution
// and ImageOps.pad geometry over 126 image sizes, for the published 384-pixel
// candidate list and the tiny fixture's 48-pixel one), and the <image> token
// counts of the tiny checkpoint's golden conversations (one tile, 3 x 3
// tiles, two images, three images without tiling).
#include <string>
#include <vector>

#include "engine/model/image/vl2_tiling.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

Vl2Size SizeOf(const nlohmann::json& pair) { return {pair[0].get<int>(), pair[1].get<int>()}; }

std::vector<Vl2Size> Candidates(const nlohmann::json& list) {
  std::vector<Vl2Size> out;
  for (const nlohmann::json& c : list) out.push_back(SizeOf(c));
  return out;
}

TEST(Vl2TilingParityTest, PlansAsThePublishedProcessor) {
  const nlohmann::json golden =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_vl2_tiling_cases.json");
  int checked = 0;
  for (const char* set : {"published", "tiny"}) {
    SCOPED_TRACE(set);
    const nlohmann::json& g = golden.at(set);
    const std::vector<Vl2Size> candidates = Candidates(g.at("candidate_resolutions"));
    const int tile = g.at("image_size").get<int>();
    for (const nlohmann::json& c : g.at("cases")) {
      const Vl2Size image{c.at("width").get<int>(), c.at("height").get<int>()};
      SCOPED_TRACE(::testing::Message() << image.width << "x" << image.height);
      absl::StatusOr<Vl2Tiling> t = PlanVl2Tiling(image, tile, candidates, /*cropping=*/true);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->best, SizeOf(c.at("best_resolution")));
      EXPECT_EQ(t->width_tiles, c.at("images_spatial_crop")[0].get<int>());
      EXPECT_EQ(t->height_tiles, c.at("images_spatial_crop")[1].get<int>());
      EXPECT_EQ(t->global.resized, SizeOf(c.at("global_resized")));
      EXPECT_EQ(t->global.x, c.at("global_offset")[0].get<int>());
      EXPECT_EQ(t->global.y, c.at("global_offset")[1].get<int>());
      EXPECT_EQ(t->local.resized, SizeOf(c.at("local_resized")));
      EXPECT_EQ(t->local.x, c.at("local_offset")[0].get<int>());
      EXPECT_EQ(t->local.y, c.at("local_offset")[1].get<int>());
      ++checked;
    }
  }
  EXPECT_GE(checked, 200);
}

TEST(Vl2TilingParityTest, ImageTokensOfTheGoldenConversations) {
  const std::string dir = testing::FixturesDir() + "/tiny-deepseek-vl2";
  const nlohmann::json config = testing::ReadJsonFile(dir + "/config.json");
  const std::vector<Vl2Size> candidates = Candidates(config.at("candidate_resolutions"));
  const int tile = config.at("vision_config").at("image_size").get<int>();
  const int patch = config.at("vision_config").at("patch_size").get<int>();
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_vl2_cases.json");
  int images = 0;
  for (const nlohmann::json& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const nlohmann::json& imgs = c.at("images");
    const bool cropping = imgs.size() <= 2;  // format_messages_v2
    for (size_t i = 0; i < imgs.size(); ++i) {
      const nlohmann::json& img = imgs[i];
      absl::StatusOr<Vl2Tiling> t =
          PlanVl2Tiling(SizeOf(img.at("size")), tile, candidates, cropping);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->best, SizeOf(img.at("best_resolution")));
      EXPECT_EQ(t->width_tiles, c.at("images_spatial_crop")[i][0].get<int>());
      EXPECT_EQ(t->height_tiles, c.at("images_spatial_crop")[i][1].get<int>());
      EXPECT_EQ(t->global.resized, SizeOf(img.at("global_pad")[0]));
      EXPECT_EQ(t->local.resized, SizeOf(img.at("local_pad")[0]));
      EXPECT_EQ((Vl2Size{t->local.x, t->local.y}), SizeOf(img.at("local_pad")[1]));
      EXPECT_EQ(Vl2ImageTokens(*t, tile, patch, /*downsample=*/2),
                c.at("num_image_tokens")[i].get<int64_t>());
      ++images;
    }
  }
  EXPECT_EQ(images, 8);
}

TEST(Vl2TilingTest, RefusesWhatCannotBeTiled) {
  const std::vector<Vl2Size> ok = {{384, 384}, {768, 384}};
  EXPECT_FALSE(PlanVl2Tiling({0, 10}, 384, ok, true).ok());
  EXPECT_FALSE(PlanVl2Tiling({10, 10}, 384, {}, true).ok());
  const std::vector<Vl2Size> bad = {{384, 500}};
  EXPECT_EQ(PlanVl2Tiling({10, 10}, 384, bad, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Without cropping (more than two images in the conversation): one tile.
  absl::StatusOr<Vl2Tiling> t = PlanVl2Tiling({1920, 1080}, 384, ok, false);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->best, (Vl2Size{384, 384}));
  EXPECT_EQ(Vl2ImageTokens(*t, 384, 14, 2), 421);  // 210 + 1 + 210, the published count
}

}  // namespace
}  // namespace vismoe
