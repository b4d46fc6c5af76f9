// The OpenAI-compatible API as its users meet it: the official `openai`
// Python package (pinned in tests/server/openai_python/requirements.txt,
// installed by tests/setup_python.sh) and raw HTTP drive a server running the
// trained VQA model, non-streamed and streamed, with images; every answer and
// usage count equals the gRPC answer to the same request. Skips, saying why,
// where that Python environment is missing.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/testing/paths.h"

namespace vismoe::server {
namespace {

using nlohmann::json;

constexpr int kQuestions = 8;
constexpr int kMaxTokens = 16;

std::string SourceDir() { return vismoe::testing::FixturesDir() + "/../.."; }

// VISMOE_OPENAI_PYTHON, else the environment tests/setup_python.sh makes.
std::string OpenAiPython() {
  const char* env = std::getenv("VISMOE_OPENAI_PYTHON");
  if (env != nullptr && *env != '\0') return env;
  return SourceDir() + "/build/python-openai/bin/python";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(OpenAiPythonE2eTest, OfficialClientAnswersEqualGrpcAnswers) {
  const std::string python = OpenAiPython();
  if (!std::filesystem::exists(python)) {
    GTEST_SKIP() << "no Python with the openai package at " << python
                 << ": run tests/setup_python.sh (or set VISMOE_OPENAI_PYTHON)";
  }
  const std::string eval_dir = vismoe::testing::FixturesDir() + "/vqa-eval";
  std::ifstream eval(eval_dir + "/eval.jsonl");
  ASSERT_TRUE(eval.is_open());
  json requests = json::array();
  for (std::string line; std::getline(eval, line) && requests.size() < kQuestions;) {
    const json item = json::parse(line);
    if (!item.contains("image")) continue;
    requests.push_back({{"image", eval_dir + "/" + item["image"].get<std::string>()},
                        {"prompt", item["question"].get<std::string>() +
                                       "\nAnswer the question using a single word or phrase."},
                        {"max_tokens", kMaxTokens}});
  }
  ASSERT_EQ(requests.size(), static_cast<size_t>(kQuestions));

  ServerOptions o =
      vismoe::testing::LoopbackOptions(vismoe::testing::FixturesDir() + "/vqa-qwen3-vl-moe");
  o.http_listen = "127.0.0.1:0";
  o.backend = "cpu";
  o.max_context_tokens = 512;
  absl::StatusOr<std::unique_ptr<VismoeServer>> server = VismoeServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->LoadModel().ok());

  // The gRPC answers.
  auto stub = vismoe::testing::MakeStub((*server)->port());
  std::vector<vismoe::testing::StreamResult> grpc_answers;
  for (const json& r : requests) {
    v1::GenerateRequest g;
    v1::ChatMessage* m = g.add_messages();
    m->set_role("user");
    m->add_parts()->mutable_image()->set_data(ReadFile(r["image"].get<std::string>()));
    m->add_parts()->set_text(r["prompt"].get<std::string>());
    g.mutable_sampling()->set_max_new_tokens(kMaxTokens);
    grpc_answers.push_back(vismoe::testing::RunGenerate(*stub, g));
    ASSERT_TRUE(grpc_answers.back().status.ok()) << grpc_answers.back().status.error_message();
  }

  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/openai_requests.json", out = dir + "/openai_answers.json";
  std::ofstream(in) << requests.dump();
  const std::string command =
      absl::StrCat(python, " ", SourceDir(), "/tests/server/openai_python/chat_client.py",
                   " --base_url http://127.0.0.1:", (*server)->http_port(), "/v1",
                   " --model vqa-qwen3-vl-moe --requests ", in, " --out ", out);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const json result = json::parse(ReadFile(out));
  std::printf("openai %s\n", result["openai_version"].get<std::string>().c_str());
  int nonempty = 0;
  for (int i = 0; i < kQuestions; ++i) {
    const vismoe::testing::StreamResult& g = grpc_answers[i];
    nonempty += g.text.empty() ? 0 : 1;
    for (const char* mode : {"plain", "stream", "raw"}) {
      SCOPED_TRACE(::testing::Message() << "question " << i << ", " << mode);
      const json& a = result["answers"][i][mode];
      EXPECT_EQ(a["text"], g.text);
      EXPECT_EQ(a["prompt_tokens"], g.final.usage().prompt_tokens());
      EXPECT_EQ(a["completion_tokens"], g.final.usage().completion_tokens());
      EXPECT_EQ(a["finish_reason"],
                g.final.finish_reason() == v1::FINISH_REASON_LENGTH ? "length" : "stop");
    }
  }
  EXPECT_GE(nonempty, kQuestions / 2);
  EXPECT_THAT(result["bad_request"].get<std::string>(), ::testing::HasSubstr("only n = 1"));
  EXPECT_THAT(result["not_found"].get<std::string>(), ::testing::HasSubstr("not found"));
  EXPECT_EQ(result["models"], json::array({"vqa-qwen3-vl-moe"}));
  const std::string metrics = (*server)->metrics()->Serialize();
  EXPECT_THAT(metrics, ::testing::HasSubstr(absl::StrCat(
                           "vismoe_requests_total{api=\"http\",status=\"ok\"} ", 3 * kQuestions)));
  (*server)->Shutdown();
}

}  // namespace
}  // namespace vismoe::server
