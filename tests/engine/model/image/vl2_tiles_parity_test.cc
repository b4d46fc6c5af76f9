// DeepSeek-VL2's tiles against the published processor's pixel values
// (golden/deepseek_vl2_pixel_values.safetensors, the tiny checkpoint's 48-pixel
// tiles): the global view then the local tiles of each image, in prompt order,
// equal to the level (Pillow's fixed-point resample, ResizeBicubicPillow; the
// RGBA picture read with alpha dropped).
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/image/vl2_tiles.h"
#include "engine/model/safetensors_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/image_file.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

int Level(float normalised) {
  return static_cast<int>(std::lround((normalised * 0.5f + 0.5f) * 255.0f));
}

TEST(Vl2TilesParityTest, TilesMatchThePublishedProcessor) {
  const std::string dir = testing::FixturesDir() + "/tiny-deepseek-vl2";
  const nlohmann::json config = testing::ReadJsonFile(dir + "/config.json");
  std::vector<Vl2Size> candidates;
  for (const nlohmann::json& c : config.at("candidate_resolutions")) {
    candidates.push_back({c[0].get<int>(), c[1].get<int>()});
  }
  const int s = config.at("vision_config").at("image_size").get<int>();
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_vl2_cases.json");
  auto golden = SafetensorsFile::Open(testing::FixturesDir() +
                                      "/golden/deepseek_vl2_pixel_values.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  int compared_cases = 0;
  for (const nlohmann::json& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    const nlohmann::json& names = c.at("image_names");
    if (names.empty()) continue;
    SCOPED_TRACE(name);
    std::vector<float> ours;
    for (const nlohmann::json& n : names) {
      absl::StatusOr<RgbImage> image =
          testing::LoadImageFile(testing::FixturesDir() + "/golden/images/" + n.get<std::string>());
      ASSERT_TRUE(image.ok()) << image.status();
      // multi_turn's picture is RGBA: the published loader drops alpha.
      if (!image->alpha_dropped.empty()) image->pixels = image->alpha_dropped;
      absl::StatusOr<Vl2Tiling> plan =
          PlanVl2Tiling({image->width, image->height}, s, candidates, names.size() <= 2);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const std::vector<float> tiles = Vl2Tiles(*image, *plan, s);
      ours.insert(ours.end(), tiles.begin(), tiles.end());
    }
    absl::StatusOr<TensorView> want = (*golden)->Get(name);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(want->dtype, DType::kF16);
    ASSERT_EQ(static_cast<size_t>(want->numel()), ours.size());
    std::vector<float> w(ours.size());
    ToFloat(want->dtype, want->data, w.size(), w.data());
    size_t differ = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      if (Level(ours[i]) == Level(w[i])) continue;
      if (++differ <= 5) {
        ADD_FAILURE() << "value " << i << " ours " << Level(ours[i]) << " want " << Level(w[i]);
      }
    }
    EXPECT_EQ(differ, 0u) << " of " << ours.size();
    ++compared_cases;
  }
  EXPECT_EQ(compared_cases, 5);
}

}  // namespace
}  // namespace vismoe
