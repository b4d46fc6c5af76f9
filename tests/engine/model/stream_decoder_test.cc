// StreamDecoder: pushes never emit part of a UTF-8 character, and the pieces
// plus Flush() always equal Tokenizer::Decode of the same ids.
#include "engine/model/stream_decoder.h"

#include <fstream>
#include <string>
#include <vector>

#include "engine/model/byte_level.h"
#include "engine/model/utf8.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

class StreamDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::Load(testing::TinyModelDir());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
  }

  int ByteId(uint8_t b) const { return tok_->TokenToId(byte_level::ByteToUtf8()[b]); }

  std::vector<int> ByteIds(const std::string& bytes) const {
    std::vector<int> ids;
    for (const char c : bytes) ids.push_back(ByteId(static_cast<uint8_t>(c)));
    return ids;
  }

  // Streams `ids`; checks every delta is valid UTF-8 and the total equals
  // Decode(ids). Returns the deltas (Flush last).
  std::vector<std::string> Stream(const std::vector<int>& ids, bool skip_special = false) {
    StreamDecoder dec(tok_.get(), skip_special);
    std::vector<std::string> deltas;
    std::string total;
    for (const int id : ids) {
      deltas.push_back(dec.Push(id));
      EXPECT_TRUE(utf8::IsValid(deltas.back())) << "delta after id " << id;
      total += deltas.back();
    }
    deltas.push_back(dec.Flush());
    total += deltas.back();
    EXPECT_EQ(total, tok_->Decode(ids, skip_special));
    EXPECT_EQ(dec.pending_bytes(), 0u);
    return deltas;
  }

  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(StreamDecoderTest, EmojiSplitAcrossByteTokensIsHeldBack) {
  const auto deltas =
      Stream(ByteIds("a\xF0\x9F\x98\x80"
                     "b"));  // a😀b
  EXPECT_EQ(deltas, (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\x98\x80", "b", ""}));
}

TEST_F(StreamDecoderTest, CjkSplitAcrossByteTokensIsHeldBack) {
  const auto deltas = Stream(ByteIds("\xE4\xB8\xAD\xE6\x96\x87"));  // 中文
  EXPECT_EQ(deltas, (std::vector<std::string>{"", "", "\xE4\xB8\xAD", "", "", "\xE6\x96\x87", ""}));
}

TEST_F(StreamDecoderTest, InvalidBytesBecomeReplacementAsInDecode) {
  const std::string fffd = "\xEF\xBF\xBD";
  // A byte that can never start a character is replaced at once.
  EXPECT_EQ(Stream(ByteIds("\xFF"
                           "a")),
            (std::vector<std::string>{fffd, "a", ""}));
  // A cut-off character is replaced once it is known to be cut off...
  EXPECT_EQ(Stream(ByteIds("\xE4\xB8"
                           "a")),
            (std::vector<std::string>{"", "", fffd + "a", ""}));
  // ...or at Flush when the stream ends inside it.
  EXPECT_EQ(Stream(ByteIds("x\xF0\x9F")), (std::vector<std::string>{"x", "", "", fffd}));
}

TEST_F(StreamDecoderTest, SkipsSpecialTokensWhenAsked) {
  const std::vector<int> ids = tok_->Encode("Hi<|im_end|>");
  ASSERT_TRUE(tok_->IsSpecial(ids.back()));
  std::string text;
  for (const auto& d : Stream(ids, /*skip_special=*/true)) text += d;
  EXPECT_EQ(text, "Hi");
  text.clear();
  for (const auto& d : Stream(ids)) text += d;
  EXPECT_EQ(text, "Hi<|im_end|>");
}

TEST_F(StreamDecoderTest, WholeCorpusStreamsToDecode) {
  std::ifstream in(testing::FixturesDir() + "/golden/tokenizer_corpus.jsonl");
  ASSERT_TRUE(in);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_string());
    Stream(tok_->Encode(j.get<std::string>()));
    ++lines;
  }
  EXPECT_GE(lines, 2000);
}

}  // namespace
}  // namespace vismoe
