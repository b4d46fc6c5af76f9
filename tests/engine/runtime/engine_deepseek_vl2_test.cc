// DeepSeek-VL2 served by the engine on the CPU backend (#33): a request's chat
// and decoded images go through the family's own path (tiling and tiles, the
// SigLIP tower and projector, the published conversation format, the
// tokenizer's end token) and answer the published model's greedy tokens, all
// resident and under an offload budget, alone and batched; what the family
// does not take is refused with a clear error; token compression keeps its
// layout rows.
#include <algorithm>
#include <future>
#include <string>
#include <vector>

#include "engine/api/engine.h"
#include "engine/model/vl2_conversation.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_cases.h"
#include "tests/testing/image_file.h"
#include "tests/testing/offload_budget.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

constexpr int kTokens = 16;

EngineOptions Options(const std::string& fixture) {
  EngineOptions o;
  o.model_path = testing::FixturesDir() + "/" + fixture;
  o.backend = "cpu";
  o.num_threads = 2;
  o.max_context_tokens = 256;
  return o;
}

// The golden case's conversation as a request: "<image>" in its published
// text is an image part, the images decoded as the server would.
GenerateRequest RequestFromCase(const nlohmann::json& c) {
  GenerateRequest r;
  for (const nlohmann::json& name : c.at("image_names")) {
    absl::StatusOr<RgbImage> image = testing::LoadImageFile(
        testing::FixturesDir() + "/golden/images/" + name.get<std::string>());
    EXPECT_TRUE(image.ok()) << image.status();
    if (image.ok()) r.images.push_back(*std::move(image));
  }
  int next_image = 0;
  for (const nlohmann::json& m : c.at("messages")) {
    ChatMessage msg =
        Vl2PublishedMessage(m.at("role").get<std::string>(), m.at("content").get<std::string>());
    if (msg.role == "assistant" && msg.content.empty()) break;  // the generation prompt
    for (ContentPart& p : msg.content) {
      if (p.kind == ContentPart::Kind::kImage) p.image_index = next_image++;
    }
    r.messages.push_back(std::move(msg));
  }
  r.sampling.max_new_tokens = kTokens;
  return r;
}

std::vector<int> Greedy(const nlohmann::json& c) {
  const std::vector<int> all = c.at("greedy_ids").get<std::vector<int>>();
  return std::vector<int>(all.begin(), all.begin() + kTokens);
}

TEST(EngineDeepseekVl2Test, AnswersThePublishedModelsGreedyTokensResidentAndOffloaded) {
  int compared = 0;
  for (const char* key : {"deepseek_vl2", "deepseek_vl2_mla"}) {
    std::string fixture = std::string("tiny-") + key;
    std::replace(fixture.begin(), fixture.end(), '_', '-');
    SCOPED_TRACE(fixture);
    const nlohmann::json cases =
        testing::ReadJsonFile(testing::FixturesDir() + "/golden/" + key + "_cases.json");
    ASSERT_GE(cases.size(), 4u);
    EngineOptions o = Options(fixture);
    for (const bool offload : {false, true}) {
      SCOPED_TRACE(offload ? "offloaded" : "resident");
      o.gpu_memory_budget_bytes = offload ? testing::OffloadBudget(o, 1, 3) : 0;
      o.offload.pinned_layers = offload ? 1 : -1;
      o.offload.prefetch = offload ? "history" : "none";
      auto engine = Engine::Create(o);
      ASSERT_TRUE(engine.ok()) << engine.status();
      EXPECT_TRUE((*engine)->info().has_vision);
      for (const nlohmann::json& c : cases) {
        const std::string name = c.at("name").get<std::string>();
        SCOPED_TRACE(name);
        auto prepared = (*engine)->Prepare(RequestFromCase(c));
        ASSERT_TRUE(prepared.ok()) << prepared.status();
        EXPECT_EQ((*prepared)->prompt_tokens(), static_cast<int>(c.at("input_ids").size()));
        auto r = (*engine)->Generate(**prepared, {});
        ASSERT_TRUE(r.ok()) << r.status();
        int visual = 0;
        for (const nlohmann::json& n : c.at("num_image_tokens")) visual += n.get<int>();
        EXPECT_EQ(r->usage.visual_tokens_before, visual);
        if (offload) {
          EXPECT_GT(r->offload.bytes_h2d, 0u);
        }
        // multi_turn's picture is RGBA: read with alpha dropped, as published.
        EXPECT_EQ(r->token_ids, Greedy(c));
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 2 * (6 + 4));
}

// Requests run side by side in one batch answer what they answer alone.
TEST(EngineDeepseekVl2Test, BatchedRequestsAnswerAsAlone) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_vl2_mla_cases.json");
  auto engine = Engine::Create(Options("tiny-deepseek-vl2-mla"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::future<absl::StatusOr<GenerateResult>>> runs;
  for (const int i : {0, 1, 2, 3}) {
    runs.push_back(std::async(
        std::launch::async, [&, i] { return (*engine)->Generate(RequestFromCase(cases[i]), {}); }));
  }
  size_t k = 0;
  for (const int i : {0, 1, 2, 3}) {
    absl::StatusOr<GenerateResult> r = runs[k++].get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->token_ids, Greedy(cases[i])) << cases[i].at("name");
  }
}

// What the family does not take fails the request (or the start) alone, with
// an error naming it; the engine goes on serving.
TEST(EngineDeepseekVl2Test, RefusesWhatTheFamilyDoesNotTake) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_vl2_cases.json");
  auto engine = Engine::Create(Options("tiny-deepseek-vl2"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto expect = [&](const GenerateRequest& r, absl::StatusCode code, const std::string& text) {
    auto got = (*engine)->Generate(r, {});
    ASSERT_FALSE(got.ok()) << text;
    EXPECT_EQ(got.status().code(), code) << got.status();
    EXPECT_NE(std::string(got.status().message()).find(text), std::string::npos) << got.status();
  };
  GenerateRequest assistant_image = RequestFromCase(cases[4]);  // multi_turn
  assistant_image.messages[2].content.push_back({ContentPart::Kind::kImage, "", 0});
  expect(assistant_image, absl::StatusCode::kInvalidArgument, "images in user turns only");
  GenerateRequest no_prompt = RequestFromCase(cases[5]);
  no_prompt.add_generation_prompt = false;
  expect(no_prompt, absl::StatusCode::kInvalidArgument, "ends with an empty assistant turn");
  // "<image>" spelled in text is text; as a token (trusted text) it is a
  // placeholder without an image.
  GenerateRequest forged = RequestFromCase(cases[5]);
  forged.messages[0].content[0].text = "<image> what is this?";
  EXPECT_TRUE((*engine)->Generate(forged, {}).ok());
  forged.allow_special_tokens_in_text = true;
  expect(forged, absl::StatusCode::kInvalidArgument, "placeholders come only from image parts");
  GenerateRequest empty_image = RequestFromCase(cases[0]);
  empty_image.images[0].pixels.pop_back();
  expect(empty_image, absl::StatusCode::kInvalidArgument, "images[0]");
  // Still serving.
  auto r = (*engine)->Generate(RequestFromCase(cases[0]), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token_ids, Greedy(cases[0]));
}

// --synthetic_weights makes the tower's tensors too (the published layout,
// norms one, biases zero), so a VL2 shape runs without its checkpoint: the
// same prompt and visual tokens as the real weights, another answer.
TEST(EngineDeepseekVl2Test, SyntheticWeightsRunTheWholeImagePath) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_vl2_mla_cases.json");
  EngineOptions o = Options("tiny-deepseek-vl2-mla");
  o.synthetic_weights = true;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_GT((*engine)->info().num_layers, 0);
  auto r = (*engine)->Generate(RequestFromCase(cases[2]), {});  // two_images
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->usage.prompt_tokens, static_cast<int>(cases[2].at("input_ids").size()));
  EXPECT_EQ(r->usage.visual_tokens_before, 13 + 61);
  EXPECT_EQ(r->token_ids.size(), static_cast<size_t>(kTokens));
  EXPECT_NE(r->token_ids, Greedy(cases[2]));
}

// VisMMOE's token compression on VL2's visual tokens: the keep ratio is of
// the image rows; the newline and view-separator rows stay (the 2-D layout
// the language model reads). multi_tile's image is 49 rows: 9 of layout
// (two global newlines, the separator, six local ones) and 40 ranked.
TEST(EngineDeepseekVl2Test, CompressesImageRowsAndKeepsTheLayoutRows) {
  const nlohmann::json cases =
      testing::ReadJsonFile(testing::FixturesDir() + "/golden/deepseek_vl2_cases.json");
  ASSERT_EQ(cases[1].at("name"), "multi_tile");
  auto engine = Engine::Create(Options("tiny-deepseek-vl2"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (const char* kind : {"random", "saliency", "affinity"}) {
    SCOPED_TRACE(kind);
    GenerateRequest r = RequestFromCase(cases[1]);
    r.policy.token_compressor = kind;
    r.policy.keep_ratio = 0.5f;
    auto got = (*engine)->Generate(r, {});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->usage.visual_tokens_before, 49);
    EXPECT_EQ(got->usage.visual_tokens_after, 9 + 20);
    EXPECT_EQ(got->token_ids.size(), static_cast<size_t>(kTokens));
    // The whole prompt's positions stay: the compressed prompt is shorter,
    // the answer's first position is not.
    EXPECT_EQ(got->usage.prompt_tokens, static_cast<int>(cases[1].at("input_ids").size()));
  }
  // Keeping every row is the uncompressed answer.
  GenerateRequest all = RequestFromCase(cases[1]);
  all.policy.token_compressor = "saliency";
  all.policy.keep_ratio = 1.0f;
  auto got = (*engine)->Generate(all, {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->usage.visual_tokens_after, 49);
  EXPECT_EQ(got->token_ids, Greedy(cases[1]));
}

}  // namespace
}  // namespace vismoe
