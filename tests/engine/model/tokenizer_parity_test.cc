// Tokenizer parity against the `tokenizers` library: every line of the golden
// corpus must encode to exactly the ids tokenizers gave, and decode back.
#include <fstream>
#include <string>
#include <vector>

#include "engine/model/normalizer.h"
#include "engine/model/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false));
    EXPECT_FALSE(lines.back().is_discarded()) << path << " line " << lines.size();
  }
  return lines;
}

TEST(TokenizerParityTest, CorpusMatchesTokenizersIdForId) {
  auto tok = Tokenizer::Load(testing::TinyModelDir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto corpus = ReadJsonLines(testing::FixturesDir() + "/golden/tokenizer_corpus.jsonl");
  const auto golden = ReadJsonLines(testing::FixturesDir() + "/golden/tokenizer_ids.jsonl");
  ASSERT_GE(corpus.size(), 2000u);
  ASSERT_EQ(corpus.size(), golden.size());
  auto nfc = Normalizer::FromJson(nlohmann::json{{"type", "NFC"}});
  ASSERT_TRUE(nfc.ok());

  int mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    const std::vector<int> expected = golden[i].get<std::vector<int>>();
    const std::vector<int> ids = (*tok)->Encode(text);
    if (ids != expected) {
      ++mismatches;
      ADD_FAILURE() << "line " << i << " " << nlohmann::json(text).dump() << "\n got      "
                    << nlohmann::json(ids).dump() << "\n expected "
                    << nlohmann::json(expected).dump();
    }
    // The NFC normaliser is not undone by decoding: text round-trips as NFC.
    EXPECT_EQ((*tok)->Decode(ids), nfc->Apply(text)) << "line " << i;
  }
  EXPECT_EQ(mismatches, 0) << "of " << corpus.size() << " lines";
}

}  // namespace
}  // namespace vismoe
