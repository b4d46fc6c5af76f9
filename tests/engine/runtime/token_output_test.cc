// TokenOutput's text: a plain reply as decoded text with stop strings; a
// harmony reply (GPT-OSS) split into reasoning and answer, with its headers
// and control tokens left out, stop strings matching the answer only, and
// every delta's ids adding up to the reply's. Replies are written with the
// published GPT-OSS tokenizer's harmony tokens (tests/fixtures/chat_templates/gpt_oss).
#include "engine/runtime/token_output.h"

#include <string>
#include <vector>

#include "engine/model/harmony_reply.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

class TokenOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::Load(testing::FixturesDir() + "/chat_templates/gpt_oss");
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = *std::move(t);
    harmony_ = HarmonyTokens::Find(*tokenizer_);
    ASSERT_TRUE(harmony_.has_value());
    ret_ = tokenizer_->TokenToId("<|return|>");
    ASSERT_GE(ret_, 0);
  }

  // Streams `reply` then <|return|>; the deltas' text and reasoning joined.
  GenerateResult Run(const std::string& reply, bool harmony, std::vector<std::string> stop = {},
                     std::string* streamed = nullptr, std::string* streamed_reasoning = nullptr) {
    SamplingParams sampling;
    sampling.stop = std::move(stop);
    GenerateResult result;
    std::vector<int> delta_ids;
    std::string text, reasoning;
    TokenOutput out(
        sampling, tokenizer_.get(), std::vector<int>{ret_}, harmony ? &*harmony_ : nullptr,
        [&](const TokenDelta& d) {
          text += d.text;
          reasoning += d.reasoning;
          delta_ids.insert(delta_ids.end(), d.token_ids.begin(), d.token_ids.end());
          return true;
        },
        &result);
    std::vector<int> ids = tokenizer_->Encode(reply);
    ids.push_back(ret_);
    for (int id : ids) {
      if (out.AcceptToken(id, /*room=*/true)) break;
    }
    EXPECT_TRUE(out.finished());
    EXPECT_EQ(delta_ids, result.token_ids);
    EXPECT_EQ(text, result.text);
    EXPECT_EQ(reasoning, result.reasoning);
    if (streamed != nullptr) *streamed = text;
    if (streamed_reasoning != nullptr) *streamed_reasoning = reasoning;
    return result;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<HarmonyTokens> harmony_;
  int ret_ = -1;
};

constexpr char kReply[] =
    "<|channel|>analysis<|message|>The user asks for 2+2. Easy.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.";

TEST_F(TokenOutputTest, HarmonyReplySplitsReasoningFromTheAnswer) {
  const GenerateResult r = Run(kReply, /*harmony=*/true);
  EXPECT_EQ(r.finish_reason, FinishReason::kEos);
  EXPECT_EQ(r.reasoning, "The user asks for 2+2. Easy.");
  EXPECT_EQ(r.text, "2 + 2 = 4.");
}

TEST_F(TokenOutputTest, StopStringsMatchTheAnswerOnly) {
  const GenerateResult r = Run(kReply, /*harmony=*/true, {"Easy", "= 4"});
  EXPECT_EQ(r.finish_reason, FinishReason::kStopString);
  EXPECT_EQ(r.reasoning, "The user asks for 2+2. Easy.");
  EXPECT_EQ(r.text, "2 + 2 ");
}

TEST_F(TokenOutputTest, HeadersWithRecipientsAndConstraintsAreNotText) {
  const GenerateResult r =
      Run("<|channel|>analysis to=functions.lookup<|message|>Need the tool.<|end|>"
          "<|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json"
          "<|message|>{\"q\": \"x\"}",
          /*harmony=*/true);
  EXPECT_EQ(r.reasoning, "Need the tool.");
  EXPECT_EQ(r.text, "{\"q\": \"x\"}");
  // A message without a channel header is answer text.
  EXPECT_EQ(Run("<|message|>plain", /*harmony=*/true).text, "plain");
}

TEST_F(TokenOutputTest, PlainReplyKeepsEveryWordOfText) {
  // Without harmony, special tokens are skipped and the headers' words stay.
  const GenerateResult r = Run(kReply, /*harmony=*/false);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.text, "analysisThe user asks for 2+2. Easy.assistantfinal2 + 2 = 4.");
}

}  // namespace
}  // namespace vismoe
