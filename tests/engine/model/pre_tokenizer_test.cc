// PreTokenizer split behaviours, checked against what `tokenizers` 0.23
// pre_tokenize_str gives for the same specs (values recorded from Python).
#include "engine/model/pre_tokenizer.h"

#include <string>
#include <vector>

#include "engine/model/byte_level.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

using Pieces = std::vector<std::string>;

// Pieces as tokenizers shows them (byte-level characters).
Pieces Split(const nlohmann::json& spec, const std::string& text) {
  auto pre = PreTokenizer::FromJson(spec);
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return {};
  Pieces raw, shown;
  (*pre)->Split(text, &raw);
  for (const auto& p : raw) shown.push_back(byte_level::Encode(p));
  return shown;
}

nlohmann::json SplitThenByteLevel(nlohmann::json split) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {std::move(split),
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

nlohmann::json DashSplit(const std::string& behavior) {
  return SplitThenByteLevel({{"type", "Split"},
                             {"pattern", {{"String", "-"}}},
                             {"behavior", behavior},
                             {"invert", false}});
}

constexpr char kText[] = "a--b-c- 12x3-";

TEST(PreTokenizerTest, SplitBehaviorsMatchTokenizers) {
  EXPECT_EQ(Split(DashSplit("Isolated"), kText),
            (Pieces{"a", "-", "-", "b", "-", "c", "-", "Ġ12x3", "-"}));
  EXPECT_EQ(Split(DashSplit("Removed"), kText), (Pieces{"a", "b", "c", "Ġ12x3"}));
  EXPECT_EQ(Split(DashSplit("MergedWithPrevious"), kText),
            (Pieces{"a-", "-", "b-", "c-", "Ġ12x3-"}));
  EXPECT_EQ(Split(DashSplit("MergedWithNext"), kText),
            (Pieces{"a", "-", "-b", "-c", "-Ġ12x3", "-"}));
  EXPECT_EQ(Split(DashSplit("Contiguous"), kText),
            (Pieces{"a", "--", "b", "-", "c", "-", "Ġ12x3", "-"}));
}

TEST(PreTokenizerTest, InvertedRegexSplit) {
  const auto spec = SplitThenByteLevel({{"type", "Split"},
                                        {"pattern", {{"Regex", "\\d+"}}},
                                        {"behavior", "Removed"},
                                        {"invert", true}});
  EXPECT_EQ(Split(spec, kText), (Pieces{"12", "3"}));
}

TEST(PreTokenizerTest, ByteLevelWithGpt2RegexAndPrefixSpace) {
  const nlohmann::json spec = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(Split(spec, "Hello  world's 12 ok!\n"),
            (Pieces{"ĠHello", "Ġ", "Ġworld", "'s", "Ġ12", "Ġok", "!", "Ċ"}));
}

TEST(PreTokenizerTest, EmptyTextGivesNoPieces) {
  EXPECT_TRUE(Split(DashSplit("Isolated"), "").empty());
}

TEST(PreTokenizerTest, RejectsUnsupportedSpecs) {
  const auto error = [](const nlohmann::json& spec) {
    auto pre = PreTokenizer::FromJson(spec);
    return pre.ok() ? std::string("ok") : std::string(pre.status().message());
  };
  EXPECT_NE(error({{"type", "Whitespace"}}).find("pre_tokenizer.type \"Whitespace\""),
            std::string::npos);
  EXPECT_NE(error(nlohmann::json()).find("pre_tokenizer"), std::string::npos);
  // Without ByteLevel the output would not be byte-level BPE input.
  EXPECT_NE(error({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Isolated"}})
                .find("no ByteLevel"),
            std::string::npos);
  EXPECT_NE(error(DashSplit("Sideways")).find("behavior \"Sideways\""), std::string::npos);
  EXPECT_NE(error(SplitThenByteLevel({{"type", "Split"},
                                      {"pattern", {{"Regex", "(unclosed"}}},
                                      {"behavior", "Isolated"}}))
                .find("does not compile"),
            std::string::npos);
  EXPECT_NE(
      error({{"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "ByteLevel"}}, {{"type", "Split"}, {"pattern", {{"String", "-"}}}}}}})
          .find("after ByteLevel"),
      std::string::npos);
}

}  // namespace
}  // namespace vismoe
