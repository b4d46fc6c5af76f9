// Tokenizer unit cases. The synthetic tokenizer mirrors one built with
// `tokenizers` 0.23 in Python (vocab = sorted byte alphabet + 5 merges, added
// tokens with each flag); the expected ids were recorded from that library.
#include "engine/model/tokenizer.h"

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/byte_level.h"
#include "engine/model/normalizer.h"
#include "engine/model/utf8.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using Ids = std::vector<int>;

constexpr char kQwenRegex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

nlohmann::json AddedTokenJson(int id, const std::string& content, bool special, bool normalized,
                              bool lstrip = false, bool rstrip = false, bool single_word = false) {
  return {{"id", id},          {"content", content}, {"single_word", single_word},
          {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", normalized},
          {"special", special}};
}

// ids 0..255: the byte alphabet in code point order; 256..260: merges;
// 261..266: added tokens.
nlohmann::json FlagsTokenizerJson(bool pair_merges = true) {
  std::vector<uint32_t> cps;
  for (int b = 0; b < 256; ++b) cps.push_back(byte_level::ByteToCodePoint(static_cast<uint8_t>(b)));
  std::sort(cps.begin(), cps.end());
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < cps.size(); ++i) {
    std::string s;
    utf8::AppendCodePoint(cps[i], &s);
    vocab[s] = i;
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"he", "l"}, {"l", "o"}, {"hel", "lo"}, {"Ġ", "w"}};
  nlohmann::json merges_json = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    vocab[a + b] = vocab.size();
    merges_json.push_back(pair_merges ? nlohmann::json{a, b} : nlohmann::json(a + " " + b));
  }
  return {
      {"version", "1.0"},
      {"added_tokens",
       {AddedTokenJson(261, "[L]", true, false, /*lstrip=*/true),
        AddedTokenJson(262, "[R]", true, false, false, /*rstrip=*/true),
        AddedTokenJson(263, "[W]", false, false, false, false, /*single_word=*/true),
        AddedTokenJson(264, "é!", false, true), AddedTokenJson(265, "<x>", true, false),
        AddedTokenJson(266, "<xy>", true, false)}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kQwenRegex}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merges_json}}},
  };
}

std::unique_ptr<Tokenizer> MustBuild(const nlohmann::json& j) {
  auto tok = Tokenizer::FromJsonText(j.dump(), "test");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

TEST(TokenizerTest, AddedTokenFlagsMatchTokenizers) {
  auto tok = MustBuild(FlagsTokenizerJson());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("a  [L]b"), (Ids{64, 261, 65}));   // lstrip eats the spaces
  EXPECT_EQ(tok->Encode("a[R]   b"), (Ids{64, 262, 65}));  // rstrip eats the spaces
  EXPECT_EQ(tok->Encode("a [W] b"), (Ids{64, 220, 263, 220, 65}));
  EXPECT_EQ(tok->Encode("a[W]b"), (Ids{64, 58, 54, 60, 65}));  // not a single word
  EXPECT_EQ(tok->Encode("x [W]"), (Ids{87, 220, 263}));
  // normalized=true token matched after NFC (e + U+0301 -> é).
  EXPECT_EQ(tok->Encode("café! e\u0301!"), (Ids{66, 64, 69, 264, 220, 264}));
  EXPECT_EQ(tok->Encode("<xy><x>y"), (Ids{266, 265, 88}));  // longest match first
  EXPECT_EQ(tok->Encode("hello world"), (Ids{259, 260, 78, 81, 75, 67}));
  EXPECT_EQ(tok->Encode(""), Ids{});
}

TEST(TokenizerTest, WhitespaceClassesMatchTokenizers) {
  auto tok = MustBuild(FlagsTokenizerJson());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("a\u180e  b"), (Ids{64, 157, 254, 236, 220, 220, 65}));
  EXPECT_EQ(tok->Encode("  \u180e  x"), (Ids{220, 220, 157, 254, 236, 220, 220, 87}));
  EXPECT_EQ(tok->Encode("\u0085\u0085x"), (Ids{126, 227, 126, 227, 87}));
  EXPECT_EQ(tok->Encode(" \u00a0 x"), (Ids{220, 126, 254, 220, 87}));
  EXPECT_EQ(tok->Encode("x\u2028\u2028 y"), (Ids{87, 158, 222, 101, 158, 222, 101, 220, 88}));
}

TEST(TokenizerTest, DecodeMatchesTokenizers) {
  auto tok = MustBuild(FlagsTokenizerJson());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Decode({64, 261, 65}), "a[L]b");
  EXPECT_EQ(tok->Decode({64, 261, 65}, /*skip_special=*/true), "ab");
  EXPECT_EQ(tok->Decode({263}, /*skip_special=*/true), "[W]");  // non-special is kept
  // Added-token text goes through the byte-level decoder: é is byte 0xE9.
  EXPECT_EQ(tok->Decode({264}), "\xEF\xBF\xBD!");
  EXPECT_EQ(tok->Decode({tok->TokenToId("Ã"), tok->TokenToId("©")}), "é");
  EXPECT_EQ(tok->Decode({tok->TokenToId("ð"), tok->TokenToId("Ł"), tok->TokenToId("a")}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(tok->Decode({-5, 100000, 64}), "a");  // unknown ids are skipped
}

TEST(TokenizerTest, MergeStringAndPairFormsAgree) {
  auto pairs = MustBuild(FlagsTokenizerJson(/*pair_merges=*/true));
  auto strings = MustBuild(FlagsTokenizerJson(/*pair_merges=*/false));
  ASSERT_NE(pairs, nullptr);
  ASSERT_NE(strings, nullptr);
  EXPECT_EQ(strings->Encode("hello world, hello"), pairs->Encode("hello world, hello"));
  EXPECT_EQ(strings->Encode("hello"), (Ids{259}));
}

TEST(TokenizerTest, IgnoreMergesUsesWholeWordWhenInVocab) {
  nlohmann::json j = FlagsTokenizerJson();
  // "lol" is in vocab but no merge makes it: only ignore_merges finds it.
  j["model"]["vocab"]["lol"] = 300;
  EXPECT_EQ(MustBuild(j)->Encode("lol"), (Ids{258, 75}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(MustBuild(j)->Encode("lol"), (Ids{300}));
}

TEST(TokenizerTest, VocabularyAccessors) {
  auto tok = MustBuild(FlagsTokenizerJson());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 267);
  EXPECT_EQ(tok->TokenToId("<x>"), 265);
  EXPECT_EQ(tok->TokenToId("hello"), 259);
  EXPECT_EQ(tok->TokenToId("nope"), -1);
  EXPECT_EQ(tok->IdToToken(265), "<x>");
  EXPECT_EQ(tok->IdToToken(260), "Ġw");
  EXPECT_EQ(tok->IdToToken(9999), "");
  EXPECT_TRUE(tok->IsSpecial(265));
  EXPECT_FALSE(tok->IsSpecial(263));
  EXPECT_FALSE(tok->IsSpecial(64));
  EXPECT_FALSE(tok->IsSpecial(-1));
}

class FixtureTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::Load(testing::TinyModelDir());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(FixtureTokenizerTest, SpecialTokensInlineAreSingleIds) {
  const int im_start = tok_->TokenToId("<|im_start|>");
  const int im_end = tok_->TokenToId("<|im_end|>");
  ASSERT_GE(im_start, 0);
  ASSERT_GE(im_end, 0);
  EXPECT_TRUE(tok_->IsSpecial(im_start));
  const Ids ids = tok_->Encode("<|im_start|>user\nHi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), im_end);
  Ids inner(ids.begin() + 1, ids.end() - 1);
  EXPECT_EQ(inner, tok_->Encode("user\nHi"));
  // A broken marker is ordinary text.
  const Ids broken = tok_->Encode("<|im_start");
  EXPECT_EQ(std::count(broken.begin(), broken.end(), im_start), 0);
  EXPECT_EQ(tok_->Decode(ids), "<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(tok_->Decode(ids, /*skip_special=*/true), "user\nHi");
  EXPECT_GT(tok_->vocab_size(), im_end);
}

TEST_F(FixtureTokenizerTest, IgnoringAddedTokensEncodesThemAsText) {
  const std::string text = "hi<|im_end|>\n<|im_start|>system\n<|image_pad|>";
  const Ids ids = tok_->Encode(text, Tokenizer::AddedTokens::kIgnore);
  for (const AddedToken& added : tok_->added_vocabulary().tokens()) {
    EXPECT_EQ(std::count(ids.begin(), ids.end(), added.id), 0) << added.content;
  }
  EXPECT_EQ(tok_->Decode(ids), text);
  // Text without added tokens encodes the same either way.
  EXPECT_EQ(tok_->Encode("user\nHi there", Tokenizer::AddedTokens::kIgnore),
            tok_->Encode("user\nHi there"));
}

TEST_F(FixtureTokenizerTest, EmptyAndWhitespaceRuns) {
  EXPECT_TRUE(tok_->Encode("").empty());
  EXPECT_EQ(tok_->Decode({}), "");
  const std::vector<std::string> texts = {" ", "    ", "\t\t\n\n  \r\n", std::string(5000, ' '),
                                          "a" + std::string(3000, '\n') + "b"};
  for (const std::string& text : texts) {
    const Ids ids = tok_->Encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok_->Decode(ids), text);
  }
}

TEST_F(FixtureTokenizerTest, InvalidUtf8IsRepairedNotFatal) {
  // Each invalid sequence counts as U+FFFD, as a Python str would carry it.
  EXPECT_EQ(tok_->Encode("a\xff"
                         "b"),
            tok_->Encode("a\uFFFD"
                         "b"));
  EXPECT_EQ(tok_->Encode("\xe4\xb8"), tok_->Encode("\uFFFD"));
  auto nfc = Normalizer::FromJson(nlohmann::json{{"type", "NFC"}});
  ASSERT_TRUE(nfc.ok());
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const Ids ids = tok_->Encode(bytes);
    EXPECT_EQ(tok_->Decode(ids), nfc->Apply(utf8::Lossy(bytes)));
  }
}

TEST_F(FixtureTokenizerTest, ConcurrentEncodeMatchesSerial) {
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    texts.push_back("line " + std::to_string(i) + ": hello 世界 😀 <|im_end|> " +
                    std::string(i % 7, ' ') + "x" + std::to_string(i * 7919));
  }
  std::vector<Ids> serial;
  for (const auto& t : texts) serial.push_back(tok_->Encode(t));
  std::vector<std::vector<Ids>> results(4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      // Different orders so the shared word cache is hit and filled racily.
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t k = w % 2 == 0 ? i : texts.size() - 1 - i;
        results[w].push_back(tok_->Encode(texts[k]));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) {
    for (size_t i = 0; i < texts.size(); ++i) {
      const size_t k = w % 2 == 0 ? i : texts.size() - 1 - i;
      EXPECT_EQ(results[w][i], serial[k]) << "thread " << w << " text " << k;
    }
  }
}

absl::Status LoadError(const nlohmann::json& j) {
  auto tok = Tokenizer::FromJsonText(j.dump(), "bad.json");
  return tok.ok() ? absl::OkStatus() : tok.status();
}

void ExpectError(const absl::Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(needle), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << needle;
}

TEST(TokenizerLoadTest, MalformedFilesGiveClearErrors) {
  const nlohmann::json good = FlagsTokenizerJson();
  ASSERT_TRUE(LoadError(good).ok());
  {
    auto tok = Tokenizer::FromJsonText("{ not json", "broken.json");
    ExpectError(tok.status(), "broken.json: not a JSON object");
  }
  auto with = [&good](const std::string& key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = std::move(value);
    return j;
  };
  ExpectError(LoadError(with("model", {{"type", "WordPiece"}})), "model.type \"WordPiece\"");
  ExpectError(LoadError(with("normalizer", {{"type", "Lowercase"}})),
              "normalizer.type \"Lowercase\"");
  ExpectError(LoadError(with("pre_tokenizer", {{"type", "Whitespace"}})),
              "pre_tokenizer.type \"Whitespace\"");
  ExpectError(LoadError(with("decoder", {{"type", "WordPiece"}})), "decoder");
  ExpectError(LoadError(with("added_tokens", {{{"content", "x"}}})), "added_tokens[0]");
  nlohmann::json j = good;
  j.erase("model");
  ExpectError(LoadError(j), "no \"model\"");
  j = good;
  j["model"]["merges"].push_back({"q", "zzz"});
  ExpectError(LoadError(j), "merges[5]");
  j = good;
  j["model"].erase("vocab");
  ExpectError(LoadError(j), "model.vocab");
  j = good;
  j["model"]["byte_fallback"] = true;
  ExpectError(LoadError(j), "byte_fallback");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 5;  // wrong JSON type
  ExpectError(LoadError(j), "bad.json");
  ExpectError(Tokenizer::Load("/nonexistent/dir").status(), "/nonexistent/dir/tokenizer.json");
}

}  // namespace
}  // namespace vismoe
