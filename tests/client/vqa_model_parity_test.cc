// Label parity: each trained benchmark model (tests/fixtures/vqa-qwen3-vl-moe,
// and the single-run recipe's tests/fixtures/vqa-direct-qwen3-vl-moe) on the
// exact path gives, answer for answer and token for token, what transformers
// gave for the same eval questions (recorded by
// tests/fixtures/vqa/record_answers.py). Prompts are built the way vismoe-eval
// builds them (client/eval_set.h: image first, then the question and its
// instruction), greedy, 16 new tokens.
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "client/eval_set.h"
#include "engine/api/engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/image_file.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

constexpr int kQuestions = 60;    // the issue asks for at least 50
constexpr int kEndOfTurn = 1002;  // <|im_end|> of the model's tokenizer

GenerateRequest ToRequest(const client::EvalItem& item) {
  GenerateRequest r;
  ChatMessage m;
  m.role = "user";
  if (!item.image.bytes.empty()) {
    auto img = testing::LoadImageFile(item.image.source);
    EXPECT_TRUE(img.ok()) << img.status();
    if (img.ok()) r.images.push_back(*img);
    m.content.push_back({ContentPart::Kind::kImage, "", 0});
  }
  m.content.push_back({ContentPart::Kind::kText, client::BuildEvalPrompt(item), -1});
  r.messages = {m};
  r.sampling.max_new_tokens = 16;
  return r;
}

struct TrainedModel {
  const char* name;
  const char* model_dir;  // under tests/fixtures
  const char* answers;    // transformers' recorded answers, under tests/fixtures/vqa-eval
};

void PrintTo(const TrainedModel& m, std::ostream* os) { *os << m.model_dir; }

class VqaModelParityTest : public ::testing::TestWithParam<TrainedModel> {};

TEST_P(VqaModelParityTest, AnswersEqualTheRecordedTransformersAnswers) {
  const std::string eval_dir = testing::FixturesDir() + "/vqa-eval";
  auto items = client::LoadEvalSet(eval_dir + "/eval.jsonl");
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_GE(items->size(), static_cast<size_t>(kQuestions));
  std::ifstream in(eval_dir + "/" + GetParam().answers);
  ASSERT_TRUE(in.is_open()) << GetParam().answers;
  std::vector<nlohmann::json> recorded;
  for (std::string line; std::getline(in, line);) recorded.push_back(nlohmann::json::parse(line));
  ASSERT_GE(recorded.size(), static_cast<size_t>(kQuestions));

  EngineOptions o;
  o.model_path = testing::FixturesDir() + "/" + GetParam().model_dir;
  o.backend = "cpu";
  o.max_context_tokens = 512;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  int images = 0;
  for (int i = 0; i < kQuestions; ++i) {
    const client::EvalItem& item = (*items)[i];
    SCOPED_TRACE(::testing::Message() << "question " << i << ": " << item.question);
    ASSERT_EQ(recorded[i]["index"].get<int>(), i);
    images += item.image.bytes.empty() ? 0 : 1;
    auto r = (*engine)->Generate(ToRequest(item), {});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int> want = recorded[i]["token_ids"].get<std::vector<int>>();
    if (!want.empty() && want.back() == kEndOfTurn) want.pop_back();  // ours stops before EOS
    EXPECT_EQ(r->token_ids, want);
    EXPECT_EQ(absl::StripAsciiWhitespace(r->text),
              absl::StripAsciiWhitespace(recorded[i]["prediction"].get<std::string>()));
  }
  EXPECT_GE(images, kQuestions / 2);  // mostly image questions
}

INSTANTIATE_TEST_SUITE_P(TrainedModels, VqaModelParityTest,
                         ::testing::Values(TrainedModel{"Recorded", "vqa-qwen3-vl-moe",
                                                        "transformers_answers.jsonl"},
                                           TrainedModel{"Direct", "vqa-direct-qwen3-vl-moe",
                                                        "direct/transformers_answers.jsonl"}),
                         [](const ::testing::TestParamInfo<TrainedModel>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace vismoe
