// Each family's published chat template (tests/fixtures/chat_templates,
// SOURCES.md) rendered by ChatTemplate::Load against transformers'
// apply_chat_template: the text, the token ids as the tokenizer reads the
// text (sanitize_control_tokens off), and the ids with the messages' text
// read as ordinary text (sanitize_control_tokens on, our TextTokens::kPlain),
// for the conversations of tests/fixtures/make_chat_template_goldens.py.
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "engine/model/chat_template.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

std::vector<ChatMessage> Messages(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  int images = 0;
  for (const auto& m : j) {
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (m["content"].is_string()) {
      msg.content.push_back({ContentPart::Kind::kText, m["content"].get<std::string>(), -1});
    } else {
      for (const auto& p : m["content"]) {
        if (p["type"] == "image") {
          msg.content.push_back({ContentPart::Kind::kImage, "", images++});
        } else {
          msg.content.push_back({ContentPart::Kind::kText, p["text"].get<std::string>(), -1});
        }
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

struct Family {
  const char* name;
  std::string dir;     // tokenizer and template
  std::string config;  // config.json's directory
};

class ChatTemplateFamiliesTest : public ::testing::TestWithParam<Family> {};

TEST_P(ChatTemplateFamiliesTest, RendersAsApplyChatTemplate) {
  const Family& f = GetParam();
  auto tok = Tokenizer::Load(f.dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto config = ModelConfig::Load(f.config);
  ASSERT_TRUE(config.ok()) << config.status();
  auto t = ChatTemplate::Load(f.dir, **tok, *config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->source(), "built-in ChatML");
  const std::string goldens = testing::FixturesDir() + "/chat_templates/" + f.name + "/cases.json";
  const nlohmann::json cases = testing::ReadJsonFile(goldens);
  ASSERT_TRUE(cases.is_array() && cases.size() >= 7) << goldens;
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<ChatMessage> messages = Messages(c["messages"]);
    const bool gen = c["add_generation_prompt"].get<bool>();
    auto text = t->Render(messages, gen);
    if (c.contains("error")) {
      ASSERT_FALSE(text.ok()) << *text;
      EXPECT_THAT(std::string(text.status().message()), HasSubstr(c["error"].get<std::string>()));
      continue;
    }
    ASSERT_TRUE(text.ok()) << text.status();
    std::string want = c["text"].get<std::string>();
    if (c.value("dated", false)) want = absl::StrReplaceAll(want, {{"@@DATE@@", Today()}});
    EXPECT_EQ(*text, want);
    auto ids = t->Tokenize(**tok, messages, gen, ChatTemplate::TextTokens::kAllowSpecial);
    auto plain = t->Tokenize(**tok, messages, gen, ChatTemplate::TextTokens::kPlain);
    ASSERT_TRUE(ids.ok() && plain.ok());
    if (c.value("dated",
                false)) {  // the date's tokens change daily: as the tokenizer reads the text
      EXPECT_EQ(*ids, (*tok)->Encode(want));
      continue;
    }
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int>>());
    EXPECT_EQ(*plain, c["plain_ids"].get<std::vector<int>>());
  }
}

// A forged turn marker in a message is text under kPlain, a marker under kAllowSpecial.
TEST_P(ChatTemplateFamiliesTest, ForgedMarkersStayText) {
  const Family& f = GetParam();
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/chat_templates/" + f.name + "/cases.json");
  for (const auto& c : cases) {
    if (c["name"] != "forged control tokens" || c.value("dated", false)) continue;
    EXPECT_NE(c["ids"], c["plain_ids"]) << "the golden conversation forges nothing";
  }
}

// A checkpoint directory made of tiny-qwen3-moe's tokenizer and the given files.
class TemplateDir {
 public:
  explicit TemplateDir(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() / ("vismoe_chat_template_" + name)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::filesystem::copy_file(testing::FixturesDir() + "/tiny-qwen3-moe/tokenizer.json",
                               dir_ / "tokenizer.json");
  }
  ~TemplateDir() { std::filesystem::remove_all(dir_); }
  void Write(const std::string& file, const std::string& text) {
    std::ofstream(dir_ / file, std::ios::binary) << text;
  }
  absl::StatusOr<ChatTemplate> Load() {
    auto tok = Tokenizer::Load(dir_.string());
    EXPECT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
    auto config = ModelConfig::Load(testing::FixturesDir() + "/tiny-qwen3-moe");
    EXPECT_TRUE(config.ok());
    return ChatTemplate::Load(dir_.string(), *tok_, *config);
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Tokenizer> tok_;
};

std::string RenderOne(const ChatTemplate& t) {
  auto out = t.Render({{"user", {{ContentPart::Kind::kText, "hi", -1}}}}, false);
  return out.ok() ? *out : std::string(out.status().message());
}

TEST(ChatTemplateLoadTest, FindsTheTemplateInTransformersOrder) {
  TemplateDir d("order");
  d.Write("tokenizer_config.json", R"({"chat_template": "config:{{ messages[0].content }}"})");
  auto t = d.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOne(*t), "config:hi");
  d.Write("chat_template.json", R"({"chat_template": "json:{{ messages[0].content }}"})");
  t = d.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOne(*t), "json:hi");
  d.Write("chat_template.jinja", "jinja:{{ messages[0].content }}");
  t = d.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOne(*t), "jinja:hi");
  EXPECT_THAT(t->source(), HasSubstr("chat_template.jinja"));
}

TEST(ChatTemplateLoadTest, NamedTemplatesUseTheDefault) {
  TemplateDir d("named");
  d.Write("tokenizer_config.json",
          R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                                {"name": "default", "template": "default:{{ bos_token }}"}],
              "bos_token": {"content": "<|endoftext|>", "special": true}})");
  auto t = d.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderOne(*t), "default:<|endoftext|>");
}

TEST(ChatTemplateLoadTest, BadTemplatesAreStartUpErrorsNamingFileAndConstruct) {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"chat_template": "{% include 'x.jinja' %}"})", "unsupported tag 'include'"},
      {R"({"chat_template": "{{ messages | frobnicate }}"})", "unsupported filter 'frobnicate'"},
      {R"({"chat_template": 42})", "chat_template must be a string"},
      {R"({"chat_template": [{"name": "tool_use", "template": "x"}]})", "without a \"default\""},
      {R"({"chat_template": "x", "bos_token": 7})", "bos_token must be a string"},
      {R"(not json)", "not a JSON object"},
  };
  for (const auto& [config, why] : bad) {
    SCOPED_TRACE(config);
    TemplateDir d("bad");
    d.Write("tokenizer_config.json", config);
    auto t = d.Load();
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer_config.json"));
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(why));
  }
}

TEST(ChatTemplateLoadTest, WithoutATemplateChatMlIsBuiltIn) {
  TemplateDir d("none");
  d.Write("tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  auto t = d.Load();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->source(), "built-in ChatML");
  EXPECT_EQ(RenderOne(*t), "<|im_start|>user\nhi<|im_end|>\n");
}

const std::string kFixtures = testing::FixturesDir();
INSTANTIATE_TEST_SUITE_P(
    Published, ChatTemplateFamiliesTest,
    ::testing::Values(
        Family{"qwen3_vl", kFixtures + "/tiny-qwen3-vl-moe", kFixtures + "/tiny-qwen3-vl-moe"},
        Family{"qwen3", kFixtures + "/chat_templates/qwen3", kFixtures + "/tiny-qwen3-moe"},
        Family{"mixtral", kFixtures + "/chat_templates/mixtral", kFixtures + "/tiny-mixtral"},
        Family{"olmoe", kFixtures + "/chat_templates/olmoe", kFixtures + "/tiny-olmoe"},
        Family{"phimoe", kFixtures + "/chat_templates/phimoe", kFixtures + "/tiny-qwen3-moe"},
        Family{"gpt_oss", kFixtures + "/chat_templates/gpt_oss", kFixtures + "/tiny-qwen3-moe"},
        Family{"deepseek_v2", kFixtures + "/chat_templates/deepseek_v2",
               kFixtures + "/tiny-deepseek-v2-lite"},
        Family{"deepseek_v3", kFixtures + "/chat_templates/deepseek_v3",
               kFixtures + "/tiny-deepseek-v3"}),
    [](const ::testing::TestParamInfo<Family>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace vismoe
