// The OpenAI-compatible HTTP API over real loopback connections, with a
// FakeEngine injected: completions (plain and streamed), the error statuses
// and bodies, the API key, body limits, admission, disconnects, idle and
// half-sent connections, health and the model list.
#include "server/http_api.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/fake_engine.h"
#include "tests/server/fake_server.h"
#include "tests/server/server_test_util.h"

namespace vismoe::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using vismoe::testing::ExpectedText;
using vismoe::testing::FakeEngine;
using vismoe::testing::LoopbackOptions;
using vismoe::testing::StartFake;
using vismoe::testing::WaitUntil;

ServerOptions HttpOptions() {
  ServerOptions o = LoopbackOptions("/models/fake-vl");
  o.http_listen = "127.0.0.1:0";
  o.served_model_name = "fake-vl";
  return o;
}

std::unique_ptr<httplib::Client> Client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_read_timeout(30, 0);
  return c;
}

json TextBody(const std::string& text, int max_tokens, bool stream = false) {
  return {{"model", "fake-vl"},
          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", max_tokens},
          {"stream", stream}};
}

httplib::Result PostChat(httplib::Client& c, const std::string& body,
                         const httplib::Headers& headers = {}) {
  return c.Post("/v1/chat/completions", headers, body, "application/json");
}

// The "data:" payloads of an SSE stream, in order.
std::vector<std::string> SseData(const std::string& stream) {
  std::vector<std::string> out;
  for (absl::string_view event : absl::StrSplit(stream, "\n\n", absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&event, "data: ")) out.emplace_back(event);
  }
  return out;
}

// Checks the OpenAI error shape and returns its message.
std::string ErrorMessage(const httplib::Result& r, int status, const std::string& type) {
  EXPECT_TRUE(r) << "no response";
  if (!r) return "";
  EXPECT_EQ(r->status, status) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const json body = json::parse(r->body, nullptr, false);
  EXPECT_TRUE(body.contains("error")) << r->body;
  if (!body.contains("error")) return "";
  EXPECT_EQ(body["error"]["type"], type) << r->body;
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_TRUE(body["error"]["code"].is_string());
  return body["error"]["message"].get<std::string>();
}

TEST(HttpApiTest, CompletionEqualsTheGrpcAnswer) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(HttpOptions(), &engine);
  ASSERT_NE(server, nullptr);
  auto c = Client(server->http_port());
  httplib::Result r = PostChat(*c, TextBody("hello there", 5).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json body = json::parse(r->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_TRUE(absl::StartsWith(body["id"].get<std::string>(), "chatcmpl-req-"));
  EXPECT_EQ(body["model"], "fake-vl");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], ExpectedText(5));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["vismoe"]["finish_reason"], "FINISH_REASON_LENGTH");

  auto stub = vismoe::testing::MakeStub(server->port());
  vismoe::testing::StreamResult g =
      vismoe::testing::RunGenerate(*stub, vismoe::testing::TextRequest("hello there", 5));
  ASSERT_TRUE(g.status.ok());
  EXPECT_EQ(body["choices"][0]["message"]["content"], g.text);
  EXPECT_EQ(body["usage"]["prompt_tokens"], g.final.usage().prompt_tokens());
  EXPECT_EQ(body["usage"]["completion_tokens"], g.final.usage().completion_tokens());
  EXPECT_EQ(body["usage"]["total_tokens"],
            g.final.usage().prompt_tokens() + g.final.usage().completion_tokens());
  const std::string metrics = server->metrics()->Serialize();
  EXPECT_THAT(metrics, HasSubstr("vismoe_requests_total{api=\"http\",status=\"ok\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("vismoe_requests_total{api=\"grpc\",status=\"ok\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("vismoe_request_duration_seconds_count{api=\"http\"} 1"));
}

TEST(HttpApiTest, StreamsChunksThenUsageThenDone) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(HttpOptions(), &engine);
  ASSERT_NE(server, nullptr);
  auto c = Client(server->http_port());
  json req = TextBody("hello there", 40, /*stream=*/true);
  req["stream_options"] = {{"include_usage", true}};
  httplib::Result r = PostChat(*c, req.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("text/event-stream"));
  const std::vector<std::string> events = SseData(r->body);
  ASSERT_GE(events.size(), 4u) << r->body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_TRUE(chunk["usage"].is_null());
    const json& choice = chunk["choices"][0];
    if (i == 0) {
      EXPECT_EQ(choice["delta"]["role"], "assistant");
    }
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(choice["finish_reason"], "length");
    }
  }
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(text, ExpectedText(40));
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 40);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 2);
}

// A reasoning model's reasoning (GPT-OSS's analysis channel) arrives apart from
// the answer: TokenDelta.reasoning over gRPC, reasoning_content over HTTP
// (the message's, and the chunks' deltas when streamed).
TEST(HttpApiTest, ReasoningComesApartFromTheAnswer) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(HttpOptions(), &engine);
  ASSERT_NE(server, nullptr);
  engine->reasoning_tokens = 3;
  const std::string reasoning = "w0 w1 w2 ";
  auto c = Client(server->http_port());
  httplib::Result r = PostChat(*c, TextBody("hello there", 5).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json message = json::parse(r->body)["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], reasoning);
  EXPECT_EQ(message["content"], "w3 w4 ");

  r = PostChat(*c, TextBody("hello there", 5, /*stream=*/true).dump());
  ASSERT_TRUE(r);
  std::string text, streamed_reasoning;
  for (const std::string& e : SseData(r->body)) {
    if (e == "[DONE]") break;
    const json delta = json::parse(e)["choices"][0]["delta"];
    if (delta.contains("content")) text += delta["content"].get<std::string>();
    if (delta.contains("reasoning_content")) {
      streamed_reasoning += delta["reasoning_content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, "w3 w4 ");
  EXPECT_EQ(streamed_reasoning, reasoning);

  auto stub = vismoe::testing::MakeStub(server->port());
  vismoe::testing::StreamResult g =
      vismoe::testing::RunGenerate(*stub, vismoe::testing::TextRequest("hello there", 5));
  ASSERT_TRUE(g.status.ok());
  EXPECT_EQ(g.reasoning, reasoning);
  EXPECT_EQ(g.text, "w3 w4 ");
  EXPECT_EQ(g.token_ids.size(), 5u);
  // A model without reasoning sends no reasoning_content.
  engine->reasoning_tokens = 0;
  r = PostChat(*c, TextBody("hello there", 5).dump());
  ASSERT_TRUE(r);
  EXPECT_FALSE(json::parse(r->body)["choices"][0]["message"].contains("reasoning_content"));
}

TEST(HttpApiTest, ImagePartsReachTheEngine) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(HttpOptions(), &engine);
  ASSERT_NE(server, nullptr);
  auto c = Client(server->http_port());
  const std::string png = vismoe::testing::EncodePng(vismoe::testing::TestPicture(32, 24, 1));
  json req = TextBody("", 3);
  req["messages"][0]["content"] =
      json::array({{{"type", "text"}, {"text", "what is it?"}},
                   {{"type", "image_url"},
                    {"image_url", {{"url", "data:image/png;base64," + absl::Base64Escape(png)}}}}});
  httplib::Result r = PostChat(*c, req.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // FakeEngine: 16 tokens per image + 1 per 4 text bytes.
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens"], 16 + 2);
}

TEST(HttpApiTest, BadRequestsGetTheirStatusAndTheServerKeepsServing) {
  FakeEngine* engine = nullptr;
  auto server = StartFake(HttpOptions(), &engine);
  ASSERT_NE(server, nullptr);
  auto c = Client(server->http_port());
  struct Case {
    std::string body;
    int status;
    std::string message;
  };
  json unknown_role = TextBody("x", 2);
  unknown_role["messages"][0]["role"] = "wizard";
  json tool_role = TextBody("x", 2);
  tool_role["messages"][0]["role"] = "tool";
  json text_uri = TextBody("", 2);
  text_uri["messages"][0]["content"] = json::array(
      {{{"type", "image_url"}, {"image_url", {{"url", "data:text/plain;base64,aGVsbG8="}}}}});
  json remote = TextBody("", 2);
  remote["messages"][0]["content"] = json::array(
      {{{"type", "image_url"}, {"image_url", {{"url", "https://example.com/cat.png"}}}}});
  json not_png = TextBody("", 2);
  not_png["messages"][0]["content"] = json::array(
      {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,aGVsbG8="}}}}});
  json n2 = TextBody("x", 2);
  n2["n"] = 2;
  json tools = TextBody("x", 2);
  tools["tools"] = json::array({{{"type", "function"}}});
  json wrong_model = TextBody("x", 2);
  wrong_model["model"] = "gpt-4o";
  json string_tokens = TextBody("x", 2);
  string_tokens["max_tokens"] = "12";
  json too_many_tokens = TextBody("x", 2);
  too_many_tokens["max_tokens"] = 1 << 30;
  json negative_temperature = TextBody("x", 2);
  negative_temperature["temperature"] = -1;
  json bad_policy = TextBody("x", 2);
  bad_policy["vismoe"] = {{"policy", {{"token_compressor", "magic"}}}};
  const std::vector<Case> cases = {
      {"{\"messages\": [", 400, "not valid JSON"},
      {"[1, 2]", 400, "expected a JSON object"},
      {R"({"messages": "hello"})", 400, "messages: expected an array"},
      {R"({"messages": []})", 400, "at least one message"},
      {unknown_role.dump(), 400, "unknown role 'wizard'"},
      {tool_role.dump(), 400, "does not call tools"},
      {text_uri.dump(), 400, "'text/plain' is not an image"},
      {remote.dump(), 400, "remote image URLs are not fetched"},
      {not_png.dump(), 400, "image"},
      {n2.dump(), 400, "only n = 1"},
      {tools.dump(), 400, "tools: not supported"},
      {wrong_model.dump(), 404, "model 'gpt-4o' not found"},
      {string_tokens.dump(), 400, "max_tokens: expected an integer, got string"},
      {too_many_tokens.dump(), 400, "max_new_tokens"},
      {negative_temperature.dump(), 400, "temperature"},
      {bad_policy.dump(), 400, "magic"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.body.substr(0, 200));
    httplib::Result r = PostChat(*c, k.body);
    EXPECT_THAT(ErrorMessage(r, k.status,
                             k.status == 404 ? "invalid_request_error" : "invalid_request_error"),
                HasSubstr(k.message));
  }
  httplib::Result ok = PostChat(*c, TextBody("still there?", 2).dump());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_THAT(ErrorMessage(c->Post("/v1/completions", "{}", "application/json"), 404,
                           "invalid_request_error"),
              HasSubstr("no route POST /v1/completions"));
  EXPECT_THAT(server->metrics()->Serialize(),
              HasSubstr("vismoe_requests_total{api=\"http\",status=\"invalid_argument\"} 15"));
}

// OpenAI's "up to the limit": no max_tokens means --max_new_tokens_limit, and
// a prompt that leaves less room in the context is not refused (generation
// stops at its end), while the same number asked for explicitly is.
TEST(HttpApiTest, AbsentMaxTokensMeansUpToTheLimit) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.max_new_tokens_limit = 4096;  // FakeEngine's context is 4096 tokens
  auto server = StartFake(o, &engine);
  ASSERT_NE(server, nullptr);
  engine->step_delay = absl::ZeroDuration();
  auto c = Client(server->http_port());
  json body = TextBody("hello", 1);
  body.erase("max_tokens");
  httplib::Result r = PostChat(*c, body.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body.substr(0, 300);
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 4096);
  EXPECT_THAT(
      ErrorMessage(PostChat(*c, TextBody("hello", 4096).dump()), 400, "invalid_request_error"),
      HasSubstr("exceeds the model context"));
}

TEST(HttpApiTest, ApiKeyIsRequiredWhereConfigured) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.api_key = "s3cret";
  auto server = StartFake(o, &engine);
  ASSERT_NE(server, nullptr);
  auto c = Client(server->http_port());
  const std::string body = TextBody("x", 2).dump();
  EXPECT_THAT(ErrorMessage(PostChat(*c, body), 401, "authentication_error"), HasSubstr("API key"));
  EXPECT_THAT(ErrorMessage(PostChat(*c, body, {{"Authorization", "Bearer nope"}}), 401,
                           "authentication_error"),
              HasSubstr("API key"));
  httplib::Result ok = PostChat(*c, body, {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(c->Get("/v1/models")->status, 401);
  httplib::Result models = c->Get("/v1/models", {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  const json list = json::parse(models->body);
  EXPECT_EQ(list["object"], "list");
  EXPECT_EQ(list["data"][0]["id"], "fake-vl");
  EXPECT_EQ(list["data"][0]["max_model_len"], 4096);
  EXPECT_EQ(c->Get("/health")->status, 200);  // probes need no key
}

TEST(HttpApiTest, OversizedBodiesAreRefusedWith413) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.max_message_bytes = 1 << 20;
  auto server = StartFake(o, &engine);
  ASSERT_NE(server, nullptr);
  auto c = Client(server->http_port());
  json big = TextBody(std::string(2 << 20, 'a'), 2);
  EXPECT_THAT(ErrorMessage(PostChat(*c, big.dump()), 413, "invalid_request_error"),
              HasSubstr("max_message_bytes"));
  // Without a Content-Length (chunked), the limit holds while reading.
  const std::string text = big.dump();
  httplib::Result chunked = c->Post(
      "/v1/chat/completions",
      [&text](size_t offset, httplib::DataSink& sink) {
        const size_t n = std::min<size_t>(64 << 10, text.size() - offset);
        sink.write(text.data() + offset, n);
        if (offset + n == text.size()) sink.done();
        return true;
      },
      "application/json");
  if (chunked) {  // the server may also close before the client sent it all
    EXPECT_EQ(chunked->status, 413) << chunked->body;
  }
  auto fresh = Client(server->http_port());
  httplib::Result ok = PostChat(*fresh, TextBody("small", 2).dump());
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpApiTest, FullQueueIs429AndLoadingIs503) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.workers = 1;
  o.max_step_tokens = 1;
  o.max_queue = 0;
  auto server = StartFake(o, &engine, /*load=*/false);
  ASSERT_NE(server, nullptr);
  auto c = Client(server->http_port());
  EXPECT_THAT(ErrorMessage(PostChat(*c, TextBody("x", 2).dump()), 503, "server_error"),
              HasSubstr("loading"));
  EXPECT_EQ(c->Get("/health")->status, 503);
  ASSERT_TRUE(server->LoadModel().ok());
  EXPECT_EQ(c->Get("/health")->status, 200);
  engine->Hold();
  std::thread first([&] {
    auto c1 = Client(server->http_port());
    httplib::Result r = PostChat(*c1, TextBody("first", 2).dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  });
  WaitUntil([&] { return engine->started() == 1; });
  httplib::Result busy = PostChat(*c, TextBody("second", 2).dump());
  EXPECT_THAT(ErrorMessage(busy, 429, "rate_limit_error"), HasSubstr("server busy"));
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  engine->Release();
  first.join();
}

TEST(HttpApiTest, RequestTimeoutIs504) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.http_request_timeout = absl::Milliseconds(300);
  o.max_new_tokens_limit = 1000000;
  auto server = StartFake(o, &engine);
  ASSERT_NE(server, nullptr);
  engine->step_delay = absl::Milliseconds(2);
  auto c = Client(server->http_port());
  EXPECT_THAT(ErrorMessage(PostChat(*c, TextBody("forever", 3000).dump()), 504, "server_error"),
              HasSubstr("http_request_timeout"));
  // Streamed: the error arrives as an event, then [DONE].
  httplib::Result r = PostChat(*c, TextBody("forever", 3000, true).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const std::vector<std::string> events = SseData(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_THAT(events[events.size() - 2], HasSubstr("http_request_timeout"));
  WaitUntil([&] { return server->scheduler()->running() == 0; });
}

TEST(HttpApiTest, ClientLeavingMidStreamCancelsItsRequest) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.max_new_tokens_limit = 1000000;
  auto server = StartFake(o, &engine);
  ASSERT_NE(server, nullptr);
  engine->step_delay = absl::Milliseconds(2);
  {
    auto c = Client(server->http_port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = TextBody("forever", 3000, true).dump();
    req.set_header("Content-Type", "application/json");
    int received = 0;
    req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
      received += static_cast<int>(n);
      return received < 2000;  // then hang up
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    c->send(req, res, error);
    EXPECT_GE(received, 2000);
  }
  WaitUntil([&] { return server->scheduler()->running() == 0 && engine->active() == 0; });
  WaitUntil([&] {
    return absl::StrContains(server->metrics()->Serialize(),
                             "vismoe_requests_total{api=\"http\",status=\"cancelled\"} 1");
  });
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

TEST(HttpApiTest, IdleAndHalfSentConnectionsDoNotBlockOthers) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.http_threads = 4;
  auto server = StartFake(o, &engine);
  ASSERT_NE(server, nullptr);
  std::vector<int> stalled;
  stalled.push_back(Connect(server->http_port()));  // says nothing
  stalled.push_back(Connect(server->http_port()));
  const int half = Connect(server->http_port());  // headers, then half a body
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 1000\r\n\r\n{\"messages\": [";
  ASSERT_EQ(send(half, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  stalled.push_back(half);
  const absl::Time start = absl::Now();
  auto c = Client(server->http_port());
  httplib::Result r = PostChat(*c, TextBody("hello", 3).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  // The server drops a silent connection after HttpApi::kKeepAliveTimeout;
  // the half-sent request is answered 400 after kIoTimeout, and its
  // connection dropped kKeepAliveTimeout later.
  for (const int fd : stalled) {
    timeval tv{20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    ssize_t n = 0;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "connection not closed by the server";
    close(fd);
  }
  EXPECT_LT(absl::Now() - start,
            HttpApi::kIoTimeout + HttpApi::kKeepAliveTimeout + absl::Seconds(3));
}

TEST(HttpApiTest, ShutdownDrainsStreamsAndStopsListening) {
  FakeEngine* engine = nullptr;
  ServerOptions o = HttpOptions();
  o.drain_timeout = absl::Seconds(10);
  auto server = StartFake(o, &engine);
  ASSERT_NE(server, nullptr);
  engine->step_delay = absl::Milliseconds(5);
  const int port = server->http_port();
  std::string body;
  std::thread streaming([&] {
    auto c = Client(port);
    httplib::Result r = PostChat(*c, TextBody("drain me", 100, true).dump());
    ASSERT_TRUE(r);
    body = r->body;
  });
  WaitUntil([&] { return engine->active() == 1; });
  server->Shutdown();
  streaming.join();
  // Drained: the whole answer, then [DONE].
  const std::vector<std::string> events = SseData(body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_THAT(body, HasSubstr("w99 "));
  auto c = Client(port);
  c->set_connection_timeout(1, 0);
  EXPECT_FALSE(c->Get("/health"));
}

TEST(HttpApiTest, BusyPortIsAStartError) {
  FakeEngine* engine = nullptr;
  auto first = StartFake(HttpOptions(), &engine);
  ASSERT_NE(first, nullptr);
  ServerOptions o = HttpOptions();
  o.http_listen = absl::StrCat("127.0.0.1:", first->http_port());
  absl::StatusOr<std::unique_ptr<VismoeServer>> second = VismoeServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen for HTTP"));
}

}  // namespace
}  // namespace vismoe::server
