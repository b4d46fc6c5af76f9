// End-to-end over loopback gRPC: every text family beside Qwen3 (OLMoE,
// Mixtral, PhiMoE, DeepSeek-V2/V3, GPT-OSS) served by the real server on the CPU
// backend, under an offload budget: a golden chat sent as a GenerateRequest
// streams back transformers' greedy tokens, and GetModelInfo names the family.
// DeepSeek-VL2 likewise with its golden images sent as PNG files, over gRPC
// and over the OpenAI-compatible HTTP API.
#include <httplib.h>

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "engine/model/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/testing/golden_cases.h"
#include "tests/testing/offload_budget.h"
#include "tests/testing/paths.h"

namespace vismoe::server {
namespace {

struct Family {
  const char* fixture;
  const char* golden;
  const char* model_type;
};
constexpr Family kFamilies[] = {
    {"tiny-olmoe-clip", "olmoe_clip", "olmoe"},
    {"tiny-mixtral-swa", "mixtral_swa", "mixtral"},
    {"tiny-phimoe", "phimoe", "phimoe"},
    {"tiny-deepseek-v2-lite", "deepseek_v2_lite", "deepseek_v2"},
    {"tiny-deepseek-v2", "deepseek_v2", "deepseek_v2"},
    {"tiny-deepseek-v3", "deepseek_v3", "deepseek_v3"},
    {"tiny-gpt-oss-swa", "gpt_oss_swa", "gpt_oss"},
    {"tiny-gpt-oss-mxfp4", "gpt_oss_mxfp4", "gpt_oss"},
};

v1::GenerateRequest ProtoFromCase(const nlohmann::json& c, int max_new_tokens) {
  v1::GenerateRequest r;
  for (const nlohmann::json& m : c["messages"]) {
    v1::ChatMessage* msg = r.add_messages();
    msg->set_role(m["role"].get<std::string>());
    msg->add_parts()->set_text(m["content"].get<std::string>());
  }
  r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  return r;
}

// A loaded server of the fixture on the CPU backend; with `offload`, a budget
// of one pinned MoE layer and three slabs, so experts get copied.
std::unique_ptr<VismoeServer> StartFamily(const std::string& fixture, bool offload,
                                          const std::string& http_listen = "") {
  ServerOptions o =
      vismoe::testing::LoopbackOptions(vismoe::testing::FixturesDir() + "/" + fixture);
  o.backend = "cpu";
  o.max_context_tokens = 256;
  o.http_listen = http_listen;
  if (offload) {
    EngineOptions sizes;
    sizes.model_path = o.model;
    sizes.max_context_tokens = o.max_context_tokens;
    o.gpu_memory_budget = vismoe::testing::OffloadBudget(sizes, 1, 3);
    o.pinned_layers = 1;
  }
  auto server = VismoeServer::Start(o);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  absl::Status loaded = (*server)->LoadModel();
  EXPECT_TRUE(loaded.ok()) << loaded;
  return loaded.ok() ? *std::move(server) : nullptr;
}

TEST(ServerFamiliesE2eTest, EachFamilyStreamsTransformersGreedyTokens) {
  constexpr int kTokens = 12;
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.fixture);
    const nlohmann::json cases = vismoe::testing::ReadJsonFile(
        vismoe::testing::FixturesDir() + "/golden/" + f.golden + "_cases.json");
    ASSERT_TRUE(cases.is_array() && !cases.empty());
    std::unique_ptr<VismoeServer> server = StartFamily(f.fixture, /*offload=*/true);
    ASSERT_NE(server, nullptr);
    auto stub = vismoe::testing::MakeStub(server->port());
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.model_type(), f.model_type);
    const vismoe::testing::StreamResult got =
        vismoe::testing::RunGenerate(*stub, ProtoFromCase(cases[0], kTokens));
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    const std::vector<int> greedy = cases[0]["greedy_ids"].get<std::vector<int>>();
    EXPECT_EQ(got.token_ids, std::vector<int>(greedy.begin(), greedy.begin() + kTokens));
    EXPECT_GT(got.final.offload().bytes_h2d(), 0u);
  }
}

TEST(ServerFamiliesE2eTest, DeepseekVl2AnswersImageRequestsWithThePublishedTokens) {
  constexpr int kTokens = 12;
  const std::string fixtures = vismoe::testing::FixturesDir();
  const nlohmann::json cases =
      vismoe::testing::ReadJsonFile(fixtures + "/golden/deepseek_vl2_mla_cases.json");
  std::unique_ptr<VismoeServer> server = StartFamily("tiny-deepseek-vl2-mla", /*offload=*/true);
  ASSERT_NE(server, nullptr);
  auto stub = vismoe::testing::MakeStub(server->port());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.model_type(), "deepseek_vl_v2");
  EXPECT_TRUE(info.has_vision());
  for (const char* name : {"multi_tile", "two_images"}) {
    SCOPED_TRACE(name);
    const nlohmann::json* c = nullptr;
    for (const nlohmann::json& k : cases) {
      if (k["name"] == name) c = &k;
    }
    ASSERT_NE(c, nullptr);
    // The user turn: its images as PNG parts where "<image>" stands.
    v1::GenerateRequest r;
    v1::ChatMessage* msg = r.add_messages();
    msg->set_role("user");
    const std::vector<std::string> pieces =
        absl::StrSplit((*c)["messages"][0]["content"].get<std::string>(), "<image>");
    for (size_t p = 0; p < pieces.size(); ++p) {
      if (!pieces[p].empty()) msg->add_parts()->set_text(pieces[p]);
      if (p + 1 == pieces.size()) break;
      const std::string file = (*c)["image_names"][p].get<std::string>();
      msg->add_parts()->mutable_image()->set_data(
          vismoe::testing::ReadTextFile(fixtures + "/golden/images/" + file));
    }
    r.mutable_sampling()->set_max_new_tokens(kTokens);
    const vismoe::testing::StreamResult got = vismoe::testing::RunGenerate(*stub, r);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    const std::vector<int> greedy = (*c)["greedy_ids"].get<std::vector<int>>();
    EXPECT_EQ(got.token_ids, std::vector<int>(greedy.begin(), greedy.begin() + kTokens));
    int visual = 0;
    for (const nlohmann::json& n : (*c)["num_image_tokens"]) visual += n.get<int>();
    EXPECT_EQ(got.final.usage().visual_tokens_before(), visual);
    EXPECT_GT(got.final.offload().bytes_h2d(), 0u);
  }
}

// The OpenAI-compatible HTTP API in front of DeepSeek-VL2: the picture as a
// data URI and the question as parts answer the published greedy tokens'
// text (golden multi_tile).
TEST(ServerFamiliesE2eTest, DeepseekVl2OverTheHttpApi) {
  constexpr int kTokens = 12;
  const std::string fixtures = vismoe::testing::FixturesDir();
  const nlohmann::json cases =
      vismoe::testing::ReadJsonFile(fixtures + "/golden/deepseek_vl2_cases.json");
  ASSERT_EQ(cases[1]["name"], "multi_tile");
  std::unique_ptr<VismoeServer> server =
      StartFamily("tiny-deepseek-vl2", /*offload=*/false, "127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  const std::string png =
      vismoe::testing::ReadTextFile(fixtures + "/golden/images/odd_301x217.png");
  const nlohmann::json body = {
      {"model", "tiny-deepseek-vl2"},
      {"max_tokens", kTokens},
      {"temperature", 0},
      {"messages",
       {{{"role", "user"},
         {"content",
          {{{"type", "image_url"},
            {"image_url", {{"url", "data:image/png;base64," + absl::Base64Escape(png)}}}},
           {{"type", "text"}, {"text", "\nWhat is in the picture?"}}}}}}}};
  httplib::Client c("127.0.0.1", server->http_port());
  c.set_read_timeout(60, 0);
  httplib::Result r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const nlohmann::json answer = nlohmann::json::parse(r->body);
  auto tokenizer = Tokenizer::Load(fixtures + "/tiny-deepseek-vl2");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int> greedy = cases[1]["greedy_ids"].get<std::vector<int>>();
  EXPECT_EQ(answer["choices"][0]["message"]["content"],
            (*tokenizer)
                ->Decode(std::vector<int>(greedy.begin(), greedy.begin() + kTokens),
                         /*skip_special=*/true));
  EXPECT_EQ(answer["usage"]["completion_tokens"], kTokens);
  EXPECT_EQ(answer["vismoe"]["usage"]["visual_tokens_before"], 49);
}

}  // namespace
}  // namespace vismoe::server
