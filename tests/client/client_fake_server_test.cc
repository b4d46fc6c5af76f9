// The client library against an in-process fake InferenceService over real
// loopback gRPC: streaming, request building, API key metadata, error
// mapping, the load runner, the eval runner and the health check (next to
// gRPC's built-in health service, which also proves the generated
// grpc.health.v1 classes do not clash with libgrpc++).
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/match.h"
#include "client/channel.h"
#include "client/cli_output.h"
#include "client/eval_runner.h"
#include "client/generate_call.h"
#include "client/health_check.h"
#include "client/load_runner.h"
#include "client/request_builder.h"
#include "client/rpc_error.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "vismoe/v1/inference.grpc.pb.h"

namespace vismoe::client {
namespace {

using ::testing::HasSubstr;

std::string UserText(const vismoe::v1::GenerateRequest& request) {
  std::string text;
  for (const auto& m : request.messages()) {
    if (m.role() != "user") continue;
    for (const auto& p : m.parts()) text += p.text();
  }
  return text;
}

// Answers "Hel" + "lo" (or "A"/"yes" for eval questions); "think" -> reasoning
// "Hmm. " first (as a harmony model's); "fail" -> INVALID_ARGUMENT, "nofinal" ->
// a stream without a final message. Thread-safe.
class FakeInferenceService final : public vismoe::v1::InferenceService::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const vismoe::v1::GenerateRequest* request,
                        grpc::ServerWriter<vismoe::v1::GenerateResponse>* writer) override {
    const std::string text = UserText(*request);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_request_ = *request;
      auto auth = context->client_metadata().find("authorization");
      last_auth_ = auth == context->client_metadata().end()
                       ? ""
                       : std::string(auth->second.data(), auth->second.size());
    }
    calls_.fetch_add(1);
    if (absl::StrContains(text, "fail")) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "messages[0]: fail requested");
    }
    std::vector<std::pair<std::string, int>> pieces = {{"Hel", 1}, {"lo", 2}};
    if (absl::StrContains(text, "Colour")) pieces = {{"A", 3}};
    if (absl::StrContains(text, "Is it")) pieces = {{"Yes", 4}};
    if (absl::StrContains(text, "think")) {
      vismoe::v1::GenerateResponse r;
      r.mutable_delta()->set_reasoning("Hmm. ");
      r.mutable_delta()->add_token_ids(9);
      writer->Write(r);
    }
    for (const auto& [piece, id] : pieces) {
      vismoe::v1::GenerateResponse r;
      r.mutable_delta()->set_text(piece);
      r.mutable_delta()->add_token_ids(id);
      writer->Write(r);
    }
    if (absl::StrContains(text, "nofinal")) return grpc::Status::OK;
    vismoe::v1::GenerateResponse r;
    vismoe::v1::FinalResult* f = r.mutable_final();
    f->set_finish_reason(vismoe::v1::FINISH_REASON_LENGTH);
    f->set_request_id(request->request_id());
    f->mutable_usage()->set_prompt_tokens(5);
    f->mutable_usage()->set_completion_tokens(static_cast<int>(pieces.size()));
    f->mutable_offload()->set_cache_queries(10);
    f->mutable_offload()->set_cache_hits(8);
    f->mutable_offload()->set_prefetch_needed(4);
    f->mutable_offload()->set_prefetch_recalled(2);
    writer->Write(r);
    return grpc::Status::OK;
  }

  grpc::Status GetModelInfo(grpc::ServerContext*, const vismoe::v1::GetModelInfoRequest*,
                            vismoe::v1::ModelInfo* info) override {
    info->set_model_type("fake");
    return grpc::Status::OK;
  }

  vismoe::v1::GenerateRequest last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  std::string last_auth() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_auth_;
  }
  int calls() const { return calls_.load(); }

 private:
  std::mutex mu_;
  vismoe::v1::GenerateRequest last_request_;
  std::string last_auth_;
  std::atomic<int> calls_{0};
};

class FakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    conn_.server = "127.0.0.1:" + std::to_string(port);
    conn_.api_key = "sekrit";
    auto channel = CreateClientChannel(conn_);
    ASSERT_TRUE(channel.ok());
    channel_ = *channel;
    stub_ = vismoe::v1::InferenceService::NewStub(channel_);
  }
  void TearDown() override { server_->Shutdown(); }

  FakeInferenceService service_;
  std::unique_ptr<grpc::Server> server_;
  ConnectionOptions conn_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<vismoe::v1::InferenceService::Stub> stub_;
};

TEST_F(FakeServerTest, StreamsDeltasAndFinal) {
  ASSERT_TRUE(WaitForConnection(channel_.get(), conn_.server, absl::Seconds(10)).ok());
  PromptSpec spec;
  spec.prompt = "hello";
  spec.system = "sys";
  spec.images.push_back({"x", std::string("\x89PNG\r\n\x1a\n...", 11), "image/png"});
  vismoe::v1::SamplingParams sampling;
  sampling.set_max_new_tokens(7);
  std::string streamed;
  GenerateOutcome out = RunGenerate(
      stub_.get(), conn_, BuildGenerateRequest(spec, sampling, {}, "rid-1"), absl::Seconds(10),
      [&](const vismoe::v1::TokenDelta& d) { streamed += d.text(); });
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.text, "Hello");
  EXPECT_EQ(streamed, "Hello");
  EXPECT_THAT(out.token_ids, ::testing::ElementsAre(1, 2));
  ASSERT_TRUE(out.has_final);
  EXPECT_EQ(out.final_result.request_id(), "rid-1");
  EXPECT_GE(out.ttft_seconds, 0);
  EXPECT_LE(out.ttft_seconds, out.total_seconds);
  EXPECT_GE(out.tpot_seconds, 0);

  // What the server received: system message, then images before the text.
  const vismoe::v1::GenerateRequest seen = service_.last_request();
  ASSERT_EQ(seen.messages_size(), 2);
  EXPECT_EQ(seen.messages(0).role(), "system");
  ASSERT_EQ(seen.messages(1).parts_size(), 2);
  EXPECT_EQ(seen.messages(1).parts(0).image().media_type(), "image/png");
  EXPECT_EQ(seen.messages(1).parts(1).text(), "hello");
  EXPECT_EQ(seen.sampling().max_new_tokens(), 7);
  EXPECT_EQ(service_.last_auth(), "Bearer sekrit");

  const nlohmann::json j = OutcomeToJson(out);
  EXPECT_EQ(j["text"], "Hello");
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["offload"]["cache_hits"], 8);
  EXPECT_THAT(FormatStats(out), HasSubstr("cache hits 8/10 (80.0%)"));
}

// A reasoning model's reasoning stays apart from the text, in the outcome and
// in --json's "reasoning".
TEST_F(FakeServerTest, ReasoningIsKeptApartFromTheText) {
  ASSERT_TRUE(WaitForConnection(channel_.get(), conn_.server, absl::Seconds(10)).ok());
  PromptSpec spec;
  spec.prompt = "think first";
  GenerateOutcome out = RunGenerate(stub_.get(), conn_, BuildGenerateRequest(spec, {}, {}, ""),
                                    absl::Seconds(10), {});
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.text, "Hello");
  EXPECT_EQ(out.reasoning, "Hmm. ");
  EXPECT_THAT(out.token_ids, ::testing::ElementsAre(9, 1, 2));
  const nlohmann::json j = OutcomeToJson(out);
  EXPECT_EQ(j["reasoning"], "Hmm. ");
  EXPECT_EQ(j["text"], "Hello");
}

TEST_F(FakeServerTest, ServerErrorsAndProtocolViolations) {
  PromptSpec spec;
  spec.prompt = "please fail";
  GenerateOutcome out = RunGenerate(stub_.get(), conn_, BuildGenerateRequest(spec, {}, {}, ""),
                                    absl::Seconds(10), {});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(DescribeRpcError(out.status, conn_.server), HasSubstr("fail requested"));

  spec.prompt = "nofinal";
  out = RunGenerate(stub_.get(), conn_, BuildGenerateRequest(spec, {}, {}, ""), absl::Seconds(10),
                    {});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(out.status.error_message(), HasSubstr("without a final message"));
}

TEST_F(FakeServerTest, UnreachableServerIsUnavailable) {
  ConnectionOptions dead = conn_;
  dead.server = "127.0.0.1:1";
  auto channel = CreateClientChannel(dead);
  ASSERT_TRUE(channel.ok());
  absl::Status s = WaitForConnection(channel->get(), dead.server, absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_THAT(s.message(), HasSubstr("cannot reach server at 127.0.0.1:1"));
  auto stub = vismoe::v1::InferenceService::NewStub(*channel);
  PromptSpec spec;
  spec.prompt = "x";
  GenerateOutcome out =
      RunGenerate(stub.get(), dead, BuildGenerateRequest(spec, {}, {}, ""), absl::Seconds(5), {});
  EXPECT_EQ(ExitCodeForRpc(out.status), kExitConnectionError);
}

TEST_F(FakeServerTest, HealthCheckUsesBuiltInService) {
  HealthResult h = CheckHealth(channel_, conn_, "", absl::Seconds(10));
  ASSERT_TRUE(h.status.ok()) << h.status.error_message();
  EXPECT_EQ(h.serving_status, "SERVING");
  EXPECT_TRUE(h.serving());
  server_->GetHealthCheckService()->SetServingStatus(false);
  h = CheckHealth(channel_, conn_, "", absl::Seconds(10));
  EXPECT_EQ(h.serving_status, "NOT_SERVING");
  EXPECT_FALSE(h.serving());
  h = CheckHealth(channel_, conn_, "no.such.Service", absl::Seconds(10));
  EXPECT_EQ(h.status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(FakeServerTest, ClosedLoopSendsExactlyTheRequestedCount) {
  std::vector<PromptSpec> specs(3);
  specs[0].prompt = "a";
  specs[1].prompt = "b fail";
  specs[2].prompt = "c";
  LoadOptions options;
  options.concurrency = 3;
  options.max_requests = 10;
  options.request_timeout = absl::Seconds(10);
  LoadRun run = RunLoad(stub_.get(), conn_, specs, options, nullptr, nullptr);
  ASSERT_EQ(run.records.size(), 10u);
  EXPECT_EQ(service_.calls(), 10);
  const LoadReport report = BuildLoadReport(run.records, run.wall_seconds);
  EXPECT_EQ(report.sent, 10);
  EXPECT_EQ(report.failed, 3);  // indices 1, 4, 7
  EXPECT_EQ(report.errors_by_code.at("INVALID_ARGUMENT"), 3);
  EXPECT_EQ(report.completed, 7);
  EXPECT_EQ(report.completion_tokens, 14);
  EXPECT_DOUBLE_EQ(*report.cache_hit_ratio, 0.8);
  EXPECT_DOUBLE_EQ(*report.hot_recall, 0.5);
  EXPECT_LE(report.e2e.p50, report.e2e.p90);
  EXPECT_LE(report.e2e.p90, report.e2e.p99);
}

TEST_F(FakeServerTest, OpenLoopHonoursRequestsAndStop) {
  std::vector<PromptSpec> specs(1);
  specs[0].prompt = "x";
  LoadOptions options;
  options.concurrency = 2;
  options.rate = 200;
  options.max_requests = 12;
  options.request_timeout = absl::Seconds(10);
  std::FILE* sink = std::tmpfile();
  LoadRun run = RunLoad(stub_.get(), conn_, specs, options, sink, nullptr);
  std::fclose(sink);
  EXPECT_EQ(run.records.size(), 12u);

  // Duration-bounded and stopped early: ends promptly, sends nothing after stop.
  std::atomic<bool> stop{true};
  options.max_requests = 0;
  options.duration = absl::Seconds(30);
  options.rate = 1;
  run = RunLoad(stub_.get(), conn_, specs, options, nullptr, &stop);
  EXPECT_TRUE(run.records.empty());
  EXPECT_LT(run.wall_seconds, 5);
}

TEST_F(FakeServerTest, EvalRunnerScoresAnswers) {
  std::vector<EvalItem> items(3);
  items[0].question = "Colour?";
  items[0].choices = {"red", "blue"};
  items[0].answer = "A";
  items[0].category = "color";
  items[1].question = "Is it a dog?";
  items[1].answer = "no";
  items[1].category = "pope";
  items[2].question = "fail";
  items[2].answer = "x";
  items[2].category = "pope";
  EvalOptions options;
  options.concurrency = 2;
  std::vector<EvalOutcome> outcomes = RunEval(stub_.get(), conn_, items, options, nullptr, nullptr);
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_TRUE(outcomes[0].match.correct);
  EXPECT_EQ(outcomes[0].prediction, "A");
  EXPECT_FALSE(outcomes[1].match.correct);
  EXPECT_EQ(outcomes[1].match.extracted, "yes");
  EXPECT_FALSE(outcomes[2].rpc_ok);
  EXPECT_THAT(outcomes[2].error, HasSubstr("INVALID_ARGUMENT"));
  const EvalReport report = BuildEvalReport(outcomes);
  EXPECT_DOUBLE_EQ(report.categories.at("color").accuracy, 1.0);
  EXPECT_DOUBLE_EQ(report.categories.at("pope").accuracy, 0.0);
  EXPECT_EQ(report.overall.errors, 1);
  EXPECT_EQ(service_.last_request().sampling().max_new_tokens(), 16);
}

}  // namespace
}  // namespace vismoe::client
