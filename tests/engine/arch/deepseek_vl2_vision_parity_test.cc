// DeepSeek-VL2's vision path on the CPU against the published code's outputs
// (golden/deepseek_vl2{,_mla}_vision.safetensors, written by the fixture's
// reference and checked there against DeepSeek-VL2's own modules): the
// SigLIP tower's output per tile, the projector's, and each image's token
// rows in the 2-D layout, fed the processor's golden pixel values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/arch/deepseek_vl2_vision.h"
#include "engine/model/checkpoint.h"
#include "engine/model/safetensors_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

std::vector<float> Floats(const SafetensorsFile& f, const std::string& name) {
  absl::StatusOr<TensorView> t = f.Get(name);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  std::vector<float> out(static_cast<size_t>(t->numel()));
  ToFloat(t->dtype, t->data, out.size(), out.data());
  return out;
}

// max |got - want| / max(1, max |want|) <= 1e-4.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float diff = 0, mag = 1;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - want[i]));
    mag = std::max(mag, std::fabs(want[i]));
  }
  std::printf("[vl2 vision] %s: max |diff| %.3g (scale %.3g)\n", what, diff, mag);
  EXPECT_LE(diff / mag, 1e-4f) << what;
}

// A fixture's tower and the checkpoint its weights view (null on failure).
struct Tower {
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<DeepseekVl2Vision> vision;
};

Tower LoadTower(const std::string& dir, ThreadPool* pool) {
  Tower t;
  absl::StatusOr<Vl2VisionConfig> config =
      Vl2VisionConfig::Parse(testing::ReadTextFile(dir + "/config.json"));
  EXPECT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!config.ok() || !ckpt.ok()) return t;
  t.ckpt = *std::move(ckpt);
  auto vision = DeepseekVl2Vision::Create(*config, *t.ckpt, pool);
  EXPECT_TRUE(vision.ok()) << vision.status();
  if (vision.ok()) t.vision = *std::move(vision);
  return t;
}

TEST(DeepseekVl2VisionParityTest, TowerProjectorAndLayoutMatchThePublishedCode) {
  ThreadPool pool(2);
  auto pixels = SafetensorsFile::Open(testing::FixturesDir() +
                                      "/golden/deepseek_vl2_pixel_values.safetensors");
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  int images = 0;
  for (const char* key : {"deepseek_vl2", "deepseek_vl2_mla"}) {
    SCOPED_TRACE(key);
    std::string fixture = std::string("tiny-") + key;
    std::replace(fixture.begin(), fixture.end(), '_', '-');
    const Tower tower = LoadTower(testing::FixturesDir() + "/" + fixture, &pool);
    ASSERT_NE(tower.vision, nullptr);
    const DeepseekVl2Vision* vision = tower.vision.get();
    const Vl2VisionConfig* config = &vision->config();
    auto golden =
        SafetensorsFile::Open(testing::FixturesDir() + "/golden/" + key + "_vision.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status();
    const nlohmann::json cases =
        testing::ReadJsonFile(testing::FixturesDir() + "/golden/" + key + "_cases.json");
    for (const nlohmann::json& c : cases) {
      const std::string name = c.at("name").get<std::string>();
      const nlohmann::json& imgs = c.at("images");
      if (imgs.empty()) continue;
      SCOPED_TRACE(name);
      const std::vector<float> tiles = Floats(**pixels, name);
      absl::StatusOr<std::vector<float>> features = vision->Encode(tiles);
      ASSERT_TRUE(features.ok()) << features.status();
      ExpectClose(*features, Floats(**golden, name + ".vision"), (name + " tower").c_str());
      const std::vector<float> projected = vision->Project(*features);
      ExpectClose(projected, Floats(**golden, name + ".projector"), (name + " projector").c_str());
      const int64_t per_tile = int64_t{config->side()} * config->side() * config->n_embed;
      std::vector<float> embeds;
      int64_t tile = 0;
      for (const nlohmann::json& img : imgs) {
        absl::StatusOr<Vl2Tiling> plan =
            PlanVl2Tiling({img.at("size")[0].get<int>(), img.at("size")[1].get<int>()},
                          config->image_size, config->candidates, imgs.size() <= 2);
        ASSERT_TRUE(plan.ok()) << plan.status();
        const int64_t n = 1 + int64_t{plan->width_tiles} * plan->height_tiles;
        const std::vector<float> rows = vision->Layout(
            absl::MakeConstSpan(projected).subspan(tile * per_tile, n * per_tile), *plan);
        EXPECT_EQ(
            static_cast<int64_t>(rows.size()),
            Vl2ImageTokens(*plan, config->image_size, config->patch_size, config->downsample) *
                config->n_embed);
        embeds.insert(embeds.end(), rows.begin(), rows.end());
        tile += n;
        ++images;
      }
      ExpectClose(embeds, Floats(**golden, name + ".image_embeds"), (name + " layout").c_str());
    }
  }
  EXPECT_GE(images, 10);
}

// As the engine's VisionTower: the golden image rows in order, the newline and
// view-separator rows marked as layout with saliency 0, and each tile's tokens
// carrying a quarter of the attention its patches receive.
TEST(DeepseekVl2VisionParityTest, ForwardMarksLayoutRowsAndCarriesSaliency) {
  ThreadPool pool(2);
  const Tower tower = LoadTower(testing::FixturesDir() + "/tiny-deepseek-vl2", &pool);
  ASSERT_NE(tower.vision, nullptr);
  const DeepseekVl2Vision* vision = tower.vision.get();
  const Vl2VisionConfig* config = &vision->config();
  auto pixels = SafetensorsFile::Open(testing::FixturesDir() +
                                      "/golden/deepseek_vl2_pixel_values.safetensors");
  auto golden =
      SafetensorsFile::Open(testing::FixturesDir() + "/golden/deepseek_vl2_vision.safetensors");
  ASSERT_TRUE(pixels.ok() && golden.ok());
  // two_images: one tile (1 x 1) and a 1 x 9 column of tiles.
  const std::vector<GridThw> grids = {{1, 1, 1}, {1, 9, 1}};
  absl::StatusOr<VisionOutput> out = vision->Forward(Floats(**pixels, "two_images"), grids);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectClose(out->embeds, Floats(**golden, "two_images.image_embeds"), "Forward");
  const int64_t side = config->side(), d = config->n_embed;
  ASSERT_EQ(out->tokens_per_image, (std::vector<int64_t>{13, 61}));
  ASSERT_EQ(out->saliency.size(), 74u);
  ASSERT_EQ(out->layout.size(), 74u);
  int64_t first = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    int64_t layout = 0;
    double content = 0;
    for (int64_t t = first; t < first + out->tokens_per_image[i]; ++t) {
      EXPECT_GE(out->saliency[t], 0.0f);
      if (out->layout[t] == 0) {
        content += out->saliency[t];
        continue;
      }
      ++layout;
      EXPECT_EQ(out->saliency[t], 0.0f);
      // A layout row is the newline or the view separator itself.
      const float* row = out->embeds.data() + t * d;
      EXPECT_TRUE(std::equal(row, row + d, out->embeds.data() + (first + side) * d) ||
                  std::equal(row, row + d, out->embeds.data() + (first + side * (side + 1)) * d))
          << t;
    }
    EXPECT_EQ(layout, side + 1 + grids[i].h * side);  // newlines of both views + the separator
    EXPECT_NEAR(content, (1 + grids[i].h * grids[i].w) / 4.0, 1e-5);
    first += out->tokens_per_image[i];
  }
  // A grid that is not the tiles' is refused.
  EXPECT_FALSE(vision->Forward(Floats(**pixels, "two_images"), {{1, 2, 2}}).ok());
}

TEST(DeepseekVl2VisionTest, ConfigRefusalsNameTheField) {
  const std::string dir = testing::FixturesDir() + "/tiny-deepseek-vl2";
  const nlohmann::json good = nlohmann::json::parse(testing::ReadTextFile(dir + "/config.json"));
  const std::pair<const char*, std::function<void(nlohmann::json&)>> bad[] = {
      {"vision_config.width", [](nlohmann::json& j) { j["vision_config"].erase("width"); }},
      {"vision_config.heads", [](nlohmann::json& j) { j["vision_config"]["heads"] = 5; }},
      {"projector_config.projector_type",
       [](nlohmann::json& j) { j["projector_config"]["projector_type"] = "linear"; }},
      {"projector_config.token_pooling",
       [](nlohmann::json& j) { j["projector_config"]["token_pooling"] = true; }},
      {"tile_tag", [](nlohmann::json& j) { j["tile_tag"] = "1D"; }},
      {"candidate_resolutions", [](nlohmann::json& j) { j["candidate_resolutions"] = {{48}}; }},
  };
  for (const auto& [field, mutate] : bad) {
    nlohmann::json j = good;
    mutate(j);
    absl::StatusOr<Vl2VisionConfig> c = Vl2VisionConfig::Parse(j.dump());
    EXPECT_FALSE(c.ok()) << field;
    EXPECT_NE(std::string(c.status().message()).find(field), std::string::npos)
        << c.status().message();
  }
  EXPECT_FALSE(Vl2VisionConfig::Parse("[").ok());
}

}  // namespace
}  // namespace vismoe
