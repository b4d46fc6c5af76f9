// DeepSeek-VL2 end to end on the CPU against the published code
// (tests/fixtures/tiny-deepseek-vl2 with VL2-Tiny's plain multi-head
// attention and greedy softmax routing; tiny-deepseek-vl2-mla with VL2's
// latent attention and biased sigmoid routing): the processor's golden pixels
// through the vision path (deepseek_vl2_vision.h), the image rows in place of
// the <image> tokens, then the language model (a deepseek_vl_v2 config's
// language_config, as the published modeling_deepseek reads it). Prompt
// logits within 1e-4 of each row's range and 32 greedy tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/arch/deepseek_vl2_vision.h"
#include "engine/arch/qwen3_vl_moe.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors_file.h"
#include "engine/offload/resident_expert_provider.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// The id of `content` among tokenizer.json's added tokens, or -1.
int AddedTokenId(const std::string& dir, const std::string& content) {
  const nlohmann::json t = nlohmann::json::parse(testing::ReadTextFile(dir + "/tokenizer.json"));
  for (const nlohmann::json& a : t.at("added_tokens")) {
    if (a.at("content") == content) return a.at("id").get<int>();
  }
  return -1;
}

int Argmax(const float* row, int vocab) {
  return static_cast<int>(std::max_element(row, row + vocab) - row);
}

// The image rows of case `c` (every image's layout, in prompt order).
std::vector<float> ImageRows(const DeepseekVl2Vision& vision, const nlohmann::json& c,
                             const std::vector<float>& tiles) {
  const Vl2VisionConfig& vc = vision.config();
  absl::StatusOr<std::vector<float>> features = vision.Encode(tiles);
  EXPECT_TRUE(features.ok()) << features.status();
  if (!features.ok()) return {};
  const std::vector<float> projected = vision.Project(*features);
  const int64_t per_tile = int64_t{vc.side()} * vc.side() * vc.n_embed;
  const nlohmann::json& imgs = c.at("images");
  std::vector<float> rows;
  int64_t tile = 0;
  for (const nlohmann::json& img : imgs) {
    absl::StatusOr<Vl2Tiling> plan =
        PlanVl2Tiling({img.at("size")[0].get<int>(), img.at("size")[1].get<int>()}, vc.image_size,
                      vc.candidates, imgs.size() <= 2);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    const int64_t n = 1 + int64_t{plan->width_tiles} * plan->height_tiles;
    const std::vector<float> r =
        vision.Layout(absl::MakeConstSpan(projected).subspan(tile * per_tile, n * per_tile), *plan);
    rows.insert(rows.end(), r.begin(), r.end());
    tile += n;
  }
  return rows;
}

void CheckFixture(const std::string& key) {
  ThreadPool pool(2);
  std::string fixture = "tiny-" + key;
  std::replace(fixture.begin(), fixture.end(), '_', '-');
  const std::string dir = testing::FixturesDir() + "/" + fixture;
  absl::StatusOr<ModelConfig> config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  config->image_token_id = AddedTokenId(dir, "<image>");
  ASSERT_GE(config->image_token_id, 0);
  absl::StatusOr<Vl2VisionConfig> vc =
      Vl2VisionConfig::Parse(testing::ReadTextFile(dir + "/config.json"));
  ASSERT_TRUE(vc.ok()) << vc.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto vision = DeepseekVl2Vision::Create(*vc, **ckpt, &pool);
  ASSERT_TRUE(vision.ok()) << vision.status();
  auto experts =
      ResidentExpertProvider::Create(**ckpt, config->text, Qwen3VlMoeModel::Experts(*config));
  ASSERT_TRUE(experts.ok()) << experts.status();
  auto model = Qwen3VlMoeModel::Create(*config, **ckpt, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto pixels = SafetensorsFile::Open(testing::FixturesDir() +
                                      "/golden/deepseek_vl2_pixel_values.safetensors");
  ASSERT_TRUE(pixels.ok()) << pixels.status();
  auto golden =
      SafetensorsFile::Open(testing::FixturesDir() + "/golden/" + key + "_logits.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/" + key + "_cases.json");
  const int vocab = config->text.vocab_size;
  for (const nlohmann::json& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::vector<int> ids = c.at("input_ids").get<std::vector<int>>();
    const std::vector<int> want = c.at("greedy_ids").get<std::vector<int>>();
    std::vector<float> rows;
    if (!c.at("images").empty()) {
      absl::StatusOr<TensorView> t = (*pixels)->Get(name);
      ASSERT_TRUE(t.ok()) << t.status();
      std::vector<float> tiles(static_cast<size_t>(t->numel()));
      ToFloat(t->dtype, t->data, tiles.size(), tiles.data());
      rows = ImageRows(**vision, c, tiles);
    }
    const int64_t image_tokens = std::count(ids.begin(), ids.end(), config->image_token_id);
    ASSERT_EQ(static_cast<int64_t>(rows.size()), image_tokens * config->text.hidden_size);
    auto cache = (*model)->NewKvCache(static_cast<int64_t>(ids.size() + want.size()));
    DecoderInput input;
    input.tokens = ids;
    input.all_logits = true;
    input.visual_embeds = rows.empty() ? nullptr : rows.data();
    input.num_visual = image_tokens;
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(input, cache.get(), experts->get(), &logits).ok());
    absl::StatusOr<TensorView> ref = (*golden)->Get(name);
    ASSERT_TRUE(ref.ok()) << ref.status();
    std::vector<float> w(static_cast<size_t>(ref->numel()));
    ToFloat(ref->dtype, ref->data, w.size(), w.data());
    ASSERT_EQ(w.size(), logits.size());
    float worst_ratio = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* r = w.data() + t * vocab;
      const float* g = logits.data() + t * vocab;
      const auto [mn, mx] = std::minmax_element(r, r + vocab);
      float worst = 0;
      for (int v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(r[v] - g[v]));
      worst_ratio = std::max(worst_ratio, worst / (*mx - *mn));
    }
    std::printf("[vl2 parity] %s %s: max |logit diff| / range = %.3g (limit 1e-4)\n", key.c_str(),
                name.c_str(), worst_ratio);
    EXPECT_LE(worst_ratio, 1e-4f);
    std::vector<int> got;
    for (size_t i = 0; i < want.size(); ++i) {
      if (i > 0) {
        DecoderInput step;
        step.tokens = absl::MakeConstSpan(&want[i - 1], 1);
        step.phase = Phase::kDecode;
        ASSERT_TRUE((*model)->Forward(step, cache.get(), experts->get(), &logits).ok());
      }
      got.push_back(Argmax(logits.data() + logits.size() - vocab, vocab));
    }
    EXPECT_EQ(got, want);
  }
}

TEST(DeepseekVl2ParityTest, TinyMatchesThePublishedCode) { CheckFixture("deepseek_vl2"); }

TEST(DeepseekVl2ParityTest, MlaSigmoidRoutingMatchesThePublishedCode) {
  CheckFixture("deepseek_vl2_mla");
}

}  // namespace
}  // namespace vismoe
