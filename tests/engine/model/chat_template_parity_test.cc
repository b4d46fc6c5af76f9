// ChatTemplate against transformers' apply_chat_template for Qwen3-VL
// (golden/chat_cases.json): the rendered text and its input ids must match.
#include <fstream>
#include <string>
#include <vector>

#include "engine/model/chat_template.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

// Converts transformers' message form (content: string or list of
// {"type": "text"|"image"}) to the engine's ChatMessage.
std::vector<ChatMessage> ToMessages(const nlohmann::json& messages) {
  std::vector<ChatMessage> out;
  int images = 0;
  for (const auto& m : messages) {
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (m["content"].is_string()) {
      msg.content.push_back({ContentPart::Kind::kText, m["content"].get<std::string>(), -1});
    } else {
      for (const auto& part : m["content"]) {
        if (part["type"] == "image") {
          msg.content.push_back({ContentPart::Kind::kImage, "", images++});
        } else {
          msg.content.push_back({ContentPart::Kind::kText, part["text"].get<std::string>(), -1});
        }
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

TEST(ChatTemplateParityTest, MatchesTransformersTextAndIds) {
  auto tok = Tokenizer::Load(testing::TinyModelDir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto config = ModelConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(config.ok()) << config.status();
  auto by_names = ChatTemplate::Create(**tok);
  ASSERT_TRUE(by_names.ok()) << by_names.status();
  auto by_config = ChatTemplate::Create(**tok, *config);
  ASSERT_TRUE(by_config.ok()) << by_config.status();
  EXPECT_EQ(by_config->image_pad_id(), config->image_token_id);
  EXPECT_EQ(by_names->image_pad_id(), config->image_token_id);

  std::ifstream in(testing::FixturesDir() + "/golden/chat_cases.json");
  ASSERT_TRUE(in);
  const auto cases = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(cases.is_array());
  ASSERT_GE(cases.size(), 5u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto messages = ToMessages(c["messages"]);
    const bool agp = c["add_generation_prompt"].get<bool>();
    for (const ChatTemplate* t : {&*by_names, &*by_config}) {
      auto text = t->Render(messages, agp);
      ASSERT_TRUE(text.ok()) << "case " << i << ": " << text.status();
      EXPECT_EQ(*text, c["text"].get<std::string>()) << "case " << i;
      EXPECT_EQ((*tok)->Encode(*text), c["input_ids"].get<std::vector<int>>()) << "case " << i;
    }
  }
}

}  // namespace
}  // namespace vismoe
