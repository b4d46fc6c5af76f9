// End-to-end over loopback gRPC: every text family beside Qwen3 (OLMoE,
// Mixtral, PhiMoE, DeepSeek-V2/V3, GPT-OSS) served by the real server on the CPU
// backend, under an offload budget: a golden chat sent as a GenerateRequest
// streams back transformers' greedy tokens, and GetModelInfo names the family.
#include <string>
#include <vector>

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

TEST(ServerFamiliesE2eTest, EachFamilyStreamsTransformersGreedyTokens) {
  constexpr int kTokens = 12;
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.fixture);
    const nlohmann::json cases = vismoe::testing::ReadJsonFile(
        vismoe::testing::FixturesDir() + "/golden/" + f.golden + "_cases.json");
    ASSERT_TRUE(cases.is_array() && !cases.empty());
    ServerOptions o =
        vismoe::testing::LoopbackOptions(vismoe::testing::FixturesDir() + "/" + f.fixture);
    o.backend = "cpu";
    o.max_context_tokens = 256;
    EngineOptions sizes;
    sizes.model_path = o.model;
    sizes.max_context_tokens = o.max_context_tokens;
    o.gpu_memory_budget = vismoe::testing::OffloadBudget(sizes, 1, 3);  // experts get copied
    o.pinned_layers = 1;
    auto server = VismoeServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    absl::Status loaded = (*server)->LoadModel();
    ASSERT_TRUE(loaded.ok()) << loaded;
    auto stub = vismoe::testing::MakeStub((*server)->port());
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

}  // namespace
}  // namespace vismoe::server
