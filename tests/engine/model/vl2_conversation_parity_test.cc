// DeepSeek-VL2's prompt ids against the published processor's
// (golden/deepseek_vl2{,_mla}_cases.json input_ids): system message, images
// (one tile, tiled, two and three images), multi-turn with an answer, text
// only; and the conversations it refuses.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/model/image/vl2_tiling.h"
#include "engine/model/vl2_conversation.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

TEST(Vl2ConversationParityTest, IdsMatchThePublishedProcessor) {
  int cases_checked = 0;
  for (const char* key : {"deepseek_vl2", "deepseek_vl2_mla"}) {
    SCOPED_TRACE(key);
    std::string fixture = std::string("tiny-") + key;
    for (char& ch : fixture) ch = ch == '_' ? '-' : ch;
    const std::string dir = testing::FixturesDir() + "/" + fixture;
    auto tokenizer = Tokenizer::Load(dir);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    absl::StatusOr<Vl2SpecialIds> special = Vl2SpecialIds::From(**tokenizer);
    ASSERT_TRUE(special.ok()) << special.status();
    const nlohmann::json config = testing::ReadJsonFile(dir + "/config.json");
    std::vector<Vl2Size> candidates;
    for (const nlohmann::json& c : config.at("candidate_resolutions")) {
      candidates.push_back({c[0].get<int>(), c[1].get<int>()});
    }
    const int tile = config.at("vision_config").at("image_size").get<int>();
    const int patch = config.at("vision_config").at("patch_size").get<int>();
    const nlohmann::json cases =
        testing::ReadJsonFile(testing::FixturesDir() + "/golden/" + key + "_cases.json");
    for (const nlohmann::json& c : cases) {
      SCOPED_TRACE(c.at("name").get<std::string>());
      std::vector<Vl2Message> messages;
      for (const nlohmann::json& m : c.at("messages")) {
        messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
      }
      const nlohmann::json& imgs = c.at("images");
      std::vector<int64_t> tokens;
      for (const nlohmann::json& img : imgs) {
        absl::StatusOr<Vl2Tiling> plan =
            PlanVl2Tiling({img.at("size")[0].get<int>(), img.at("size")[1].get<int>()}, tile,
                          candidates, imgs.size() <= 2);
        ASSERT_TRUE(plan.ok()) << plan.status();
        tokens.push_back(Vl2ImageTokens(*plan, tile, patch, 2));
      }
      absl::StatusOr<std::vector<int>> ids =
          Vl2ConversationIds(**tokenizer, *special, messages, tokens);
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_EQ(*ids, c.at("input_ids").get<std::vector<int>>());
      ++cases_checked;
    }
  }
  EXPECT_EQ(cases_checked, 10);
}

TEST(Vl2ConversationTest, RefusesMalformedConversations) {
  auto tokenizer = Tokenizer::Load(testing::FixturesDir() + "/tiny-deepseek-vl2");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Vl2SpecialIds special = *Vl2SpecialIds::From(**tokenizer);
  const Vl2Message user{"<|User|>", "Hi"}, open{"<|Assistant|>", ""};
  const Vl2Message system{"system", "Be brief."}, answer{"<|Assistant|>", "Yes."};
  const std::vector<int64_t> none;
  EXPECT_FALSE(Vl2ConversationIds(**tokenizer, special, {user}, none).ok());
  EXPECT_FALSE(Vl2ConversationIds(**tokenizer, special, {user, answer}, none).ok());
  EXPECT_FALSE(Vl2ConversationIds(**tokenizer, special, {user, system, open}, none).ok());
  EXPECT_FALSE(Vl2ConversationIds(**tokenizer, special, {{"tool", "x"}, open}, none).ok());
  const Vl2Message with_image{"user", "<image> what?"};
  EXPECT_FALSE(Vl2ConversationIds(**tokenizer, special, {with_image, open}, none).ok());
  const std::vector<int64_t> one = {13};
  EXPECT_FALSE(Vl2ConversationIds(**tokenizer, special, {user, open}, one).ok());
  absl::StatusOr<std::vector<int>> ids =
      Vl2ConversationIds(**tokenizer, special, {with_image, open}, one);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(std::count(ids->begin(), ids->end(), special.image), 13);
  EXPECT_EQ(ids->front(), special.bos);
}

}  // namespace
}  // namespace vismoe
