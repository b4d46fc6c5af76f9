// The gRPC layer over real loopback connections, with a FakeEngine injected
// so streaming, admission, cancellation, auth, health and shutdown are tested
// deterministically and fast.
#include "server/inference_service.h"

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/fake_engine.h"
#include "tests/server/fake_server.h"
#include "tests/server/server_test_util.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;
using vismoe::testing::ExpectedText;
using vismoe::testing::FakeEngine;
using vismoe::testing::HealthStatus;
using vismoe::testing::LoopbackOptions;
using vismoe::testing::MakeStub;
using vismoe::testing::RunGenerate;
using vismoe::testing::StartFake;
using vismoe::testing::StreamResult;
using vismoe::testing::TextRequest;
using vismoe::testing::WaitUntil;

TEST(InferenceServiceTest, StreamsDeltasThenOneFinalResult) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(LoopbackOptions("/fake"), &engine);
  auto stub = MakeStub(server->port());
  StreamResult r = RunGenerate(*stub, TextRequest("hello there", 6));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, ExpectedText(6));
  EXPECT_EQ(r.token_ids, (std::vector<int>{100, 101, 102, 103, 104, 105}));
  ASSERT_TRUE(r.has_final);
  EXPECT_EQ(r.messages_after_final, 0);
  EXPECT_EQ(r.final.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.final.usage().completion_tokens(), 6);
  EXPECT_EQ(r.final.usage().prompt_tokens(), 2);
  EXPECT_FALSE(r.final.request_id().empty());
  EXPECT_DOUBLE_EQ(r.final.offload().hit_ratio(), 0.5);
  EXPECT_GE(r.final.timings().total_seconds(), r.final.timings().queue_seconds());
  EXPECT_THAT(server->metrics()->Serialize(),
              HasSubstr("vismoe_requests_total{api=\"grpc\",status=\"ok\"} 1"));
  // The admission check and the generation share one prepared request.
  EXPECT_EQ(engine->prepares(), 1);
}

TEST(InferenceServiceTest, ManyTokensSurviveCoalescing) {
  FakeEngine* engine = nullptr;
  ServerOptions o = LoopbackOptions("/fake");
  o.max_new_tokens_limit = 5000;
  auto server = StartFake(o, &engine);
  engine->step_delay = absl::ZeroDuration();
  auto stub = MakeStub(server->port());
  v1::GenerateRequest req = TextRequest("x", 3000);
  req.set_request_id("mine");
  StreamResult r = RunGenerate(*stub, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, ExpectedText(3000));
  EXPECT_EQ(r.token_ids.size(), 3000u);
  EXPECT_LE(r.num_deltas, 3000);
  EXPECT_EQ(r.final.request_id(), "mine");
}

TEST(InferenceServiceTest, HealthAndUnavailableWhileLoading) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(LoopbackOptions("/fake"), &engine, /*load=*/false);
  EXPECT_EQ(HealthStatus(server->port(), ""), 2);
  EXPECT_EQ(HealthStatus(server->port(), VismoeServer::kServiceName), 2);
  auto stub = MakeStub(server->port());
  StreamResult r = RunGenerate(*stub, TextRequest("hi", 2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("model is loading"));
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    EXPECT_EQ(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  ASSERT_TRUE(server->LoadModel().ok());
  EXPECT_EQ(HealthStatus(server->port(), ""), 1);
  EXPECT_EQ(HealthStatus(server->port(), VismoeServer::kServiceName), 1);
  EXPECT_EQ(server->LoadModel().code(), absl::StatusCode::kFailedPrecondition);
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.model_type(), "fake");
  EXPECT_EQ(info.num_experts(), 4);
  EXPECT_TRUE(info.has_vision());
  EXPECT_EQ(info.limits().max_images(), 8);
  EXPECT_EQ(info.limits().max_new_tokens(), 4096);
}

TEST(InferenceServiceTest, ReflectionListsTheService) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(LoopbackOptions("/fake"), &engine);
  const std::string raw = vismoe::testing::ReflectionListServicesRaw(server->port());
  EXPECT_THAT(raw, HasSubstr("vismoe.v1.InferenceService"));
  EXPECT_THAT(raw, HasSubstr("grpc.health.v1.Health"));
}

TEST(InferenceServiceTest, ApiKeyIsEnforced) {
  FakeEngine* engine = nullptr;
  ServerOptions o = LoopbackOptions("/fake");
  o.api_key = "k3y";
  auto server = StartFake(o, &engine);
  auto stub = MakeStub(server->port());
  const v1::GenerateRequest req = TextRequest("hi", 2);
  StreamResult r = RunGenerate(*stub, req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("API key"));
  r = RunGenerate(*stub, req, std::chrono::seconds(10), {{"authorization", "Bearer wrong"}});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  r = RunGenerate(*stub, req, std::chrono::seconds(10), {{"x-api-key", "k3"}});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  r = RunGenerate(*stub, req, std::chrono::seconds(10), {{"authorization", "Bearer k3y"}});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  r = RunGenerate(*stub, req, std::chrono::seconds(10), {{"x-api-key", "k3y"}});
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  EXPECT_EQ(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(engine->started(), 2);
}

TEST(InferenceServiceTest, ConcurrentStreamsCompleteOrAreRejected) {
  FakeEngine* engine = nullptr;
  ServerOptions o = LoopbackOptions("/fake");
  o.max_queue = 4;
  o.workers = 2;
  auto server = StartFake(o, &engine);
  engine->step_delay = absl::Milliseconds(2);
  auto stub = MakeStub(server->port());
  constexpr int kStreams = 32;
  std::vector<StreamResult> results(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] { results[i] = RunGenerate(*stub, TextRequest("go", 5)); });
  }
  for (std::thread& t : threads) t.join();
  int ok = 0, exhausted = 0;
  for (const StreamResult& r : results) {
    if (r.status.ok()) {
      ++ok;
      EXPECT_TRUE(r.has_final);
      EXPECT_EQ(r.text, ExpectedText(5));
    } else {
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << r.status.error_message();
      EXPECT_THAT(r.status.error_message(), HasSubstr("queue full"));
      ++exhausted;
    }
  }
  EXPECT_EQ(ok + exhausted, kStreams);
  EXPECT_GE(ok, 1);
  WaitUntil([&] { return server->scheduler()->running() == 0; });
}

TEST(InferenceServiceTest, ClientCancellationReleasesTheWorker) {
  FakeEngine* engine = nullptr;
  ServerOptions o = LoopbackOptions("/fake");
  o.max_new_tokens_limit = 1000000;
  auto server = StartFake(o, &engine);
  engine->step_delay = absl::Milliseconds(2);
  auto stub = MakeStub(server->port());
  {
    grpc::ClientContext ctx;
    auto reader = stub->Generate(&ctx, TextRequest("forever", 4000));
    v1::GenerateResponse msg;
    ASSERT_TRUE(reader->Read(&msg));
    ctx.TryCancel();
    while (reader->Read(&msg)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  WaitUntil([&] { return server->scheduler()->running() == 0 && engine->active() == 0; });
  WaitUntil([&] {
    return absl::StrContains(server->metrics()->Serialize(),
                             "vismoe_requests_total{api=\"grpc\",status=\"cancelled\"} 1");
  });
  EXPECT_THAT(server->metrics()->Serialize(), HasSubstr("vismoe_running_requests 0"));
  EXPECT_TRUE(RunGenerate(*stub, TextRequest("again", 2)).status.ok());
}

TEST(InferenceServiceTest, DeadlineReleasesTheWorker) {
  FakeEngine* engine = nullptr;
  ServerOptions o = LoopbackOptions("/fake");
  o.max_new_tokens_limit = 1000000;
  auto server = StartFake(o, &engine);
  engine->step_delay = absl::Milliseconds(2);
  auto stub = MakeStub(server->port());
  StreamResult r = RunGenerate(*stub, TextRequest("forever", 4000), std::chrono::milliseconds(200));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  WaitUntil([&] { return server->scheduler()->running() == 0 && engine->active() == 0; });
  WaitUntil([&] {
    return absl::StrContains(server->metrics()->Serialize(),
                             "vismoe_requests_total{api=\"grpc\",status=\"deadline_exceeded\"} 1");
  });
}

TEST(InferenceServiceTest, ShutdownDrainsInFlightRequests) {
  FakeEngine* engine = nullptr;
  ServerOptions o = LoopbackOptions("/fake");
  o.drain_timeout = absl::Seconds(20);
  auto server = StartFake(o, &engine);
  engine->step_delay = absl::Milliseconds(10);
  auto stub = MakeStub(server->port());
  StreamResult inflight;
  std::thread client([&] { inflight = RunGenerate(*stub, TextRequest("finish me", 60)); });
  WaitUntil([&] { return engine->active() == 1; });
  std::thread stopper([&] { server->Shutdown(); });
  WaitUntil([&] { return HealthStatus(server->port(), "") == 2; });
  StreamResult late = RunGenerate(*stub, TextRequest("too late", 2));
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(late.status.error_message(), HasSubstr("server shutting down"));
  client.join();
  stopper.join();
  ASSERT_TRUE(inflight.status.ok()) << inflight.status.error_message();
  EXPECT_EQ(inflight.text, ExpectedText(60));
}

TEST(InferenceServiceTest, DrainTimeoutCancelsWithUnavailable) {
  FakeEngine* engine = nullptr;
  ServerOptions o = LoopbackOptions("/fake");
  o.drain_timeout = absl::Milliseconds(100);
  o.max_new_tokens_limit = 1000000;
  auto server = StartFake(o, &engine);
  engine->step_delay = absl::Milliseconds(2);
  auto stub = MakeStub(server->port());
  StreamResult inflight;
  std::thread client([&] { inflight = RunGenerate(*stub, TextRequest("forever", 4000)); });
  WaitUntil([&] { return engine->active() == 1; });
  server->Shutdown();
  client.join();
  EXPECT_EQ(inflight.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(inflight.status.error_message(), HasSubstr("server shutting down"));
  EXPECT_FALSE(inflight.has_final);
  EXPECT_GT(inflight.num_deltas, 0);
}

TEST(InferenceServiceTest, EngineLoadFailureIsReported) {
  ServerOptions o = LoopbackOptions("/fake");
  auto factory = [](const EngineOptions&) -> absl::StatusOr<std::unique_ptr<Engine>> {
    return absl::NotFoundError("config.json missing");
  };
  absl::StatusOr<std::unique_ptr<VismoeServer>> server = VismoeServer::Start(o, factory);
  ASSERT_TRUE(server.ok());
  absl::Status s = (*server)->LoadModel();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("config.json missing"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("/fake"));
  EXPECT_EQ(HealthStatus((*server)->port(), ""), 2);
}

TEST(InferenceServiceTest, BusyPortIsAnError) {
  FakeEngine* engine = nullptr;
  auto first = StartFake(LoopbackOptions("/fake"), &engine, /*load=*/false);
  ServerOptions o = LoopbackOptions("/fake");
  o.listen = absl::StrCat("127.0.0.1:", first->port());
  absl::StatusOr<std::unique_ptr<VismoeServer>> second = VismoeServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen"));
}

}  // namespace
}  // namespace vismoe::server
