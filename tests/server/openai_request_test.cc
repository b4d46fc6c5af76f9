// ParseChatCompletionRequest (OpenAI body -> v1::GenerateRequest) and the
// response bodies of server/openai_response.h.
#include "server/openai_request.h"

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/openai_response.h"

namespace vismoe::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

absl::StatusOr<ChatCompletionRequest> Parse(const json& body) {
  return ParseChatCompletionRequest(body.dump());
}

json User(const json& content) { return {{"role", "user"}, {"content", content}}; }

TEST(OpenAiRequestTest, MapsEveryAcceptedField) {
  const std::string png = "\x89PNG\r\n\x1a\n-not-really";
  const json body = {
      {"model", "m"},
      {"messages",
       {{{"role", "developer"}, {"content", "Be brief."}},
        {{"role", "assistant"}, {"content", nullptr}},
        User(json::array(
            {{{"type", "text"}, {"text", "What is it?"}},
             {{"type", "image_url"},
              {"image_url",
               {{"url", "data:image/png;base64," + absl::Base64Escape(png)}, {"detail", "high"}}}},
             {{"type", "image_url"},
              {"image_url", "data:IMAGE/JPEG;base64," + absl::Base64Escape("j")}}}))}},
      {"max_tokens", 9},
      {"max_completion_tokens", 12},
      {"temperature", 0.7},
      {"top_p", 0.9},
      {"seed", -3},
      {"stop", {"\n", "END"}},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"n", 1},
      {"logprobs", false},
      {"frequency_penalty", 0},
      {"user", "someone"},
      {"some_future_field", {1, 2}},
      {"vismoe",
       {{"top_k", 20},
        {"request_id", "abc"},
        {"policy", {{"token_compressor", "affinity"}, {"keep_ratio", 0.25}}}}}};
  absl::StatusOr<ChatCompletionRequest> r = Parse(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  const v1::GenerateRequest& g = r->request;
  ASSERT_EQ(g.messages_size(), 3);
  EXPECT_EQ(g.messages(0).role(), "system");
  EXPECT_EQ(g.messages(0).parts(0).text(), "Be brief.");
  EXPECT_EQ(g.messages(1).role(), "assistant");
  EXPECT_EQ(g.messages(1).parts_size(), 0);
  ASSERT_EQ(g.messages(2).parts_size(), 3);
  EXPECT_EQ(g.messages(2).parts(0).text(), "What is it?");
  EXPECT_EQ(g.messages(2).parts(1).image().data(), png);
  EXPECT_EQ(g.messages(2).parts(2).image().data(), "j");
  EXPECT_EQ(g.sampling().max_new_tokens(), 12);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.7f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().seed(), static_cast<uint64_t>(-3));
  EXPECT_THAT(g.sampling().stop(), ::testing::ElementsAre("\n", "END"));
  EXPECT_EQ(g.sampling().top_k(), 20);
  EXPECT_EQ(g.request_id(), "abc");
  EXPECT_EQ(g.policy().token_compressor(), "affinity");
  EXPECT_FLOAT_EQ(g.policy().keep_ratio(), 0.25f);
}

TEST(OpenAiRequestTest, NullMeansAbsentAndDefaultsStayUnset) {
  absl::StatusOr<ChatCompletionRequest> r = Parse({{"messages", {User("hi")}},
                                                   {"max_tokens", nullptr},
                                                   {"temperature", nullptr},
                                                   {"stop", nullptr},
                                                   {"stream", nullptr},
                                                   {"model", nullptr}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "");
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->request.sampling().max_new_tokens(), 0);
  EXPECT_EQ(r->request.sampling().temperature(), 0);
  EXPECT_FALSE(r->request.sampling().has_top_p());
  EXPECT_EQ(r->request.sampling().stop_size(), 0);
  EXPECT_EQ(ParseChatCompletionRequest(R"({"messages":[{"role":"user","content":"x"}],"stop":"S"})")
                ->request.sampling()
                .stop(0),
            "S");
}

TEST(OpenAiRequestTest, RefusalsNameTheField) {
  const json ok = {{"messages", {User("hi")}}};
  struct Case {
    json patch;  // merged into `ok`
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"messages", "hi"}}, "messages: expected an array, got string"},
      {{{"messages", json::array({7})}}, "messages[0]: expected an object, got number"},
      {{{"messages", {{{"content", "x"}}}}}, "messages[0].role: missing"},
      {{{"messages", {{{"role", "user"}}}}}, "messages[0].content: missing"},
      {{{"messages", {{{"role", "function"}, {"content", "x"}}}}}, "does not call tools"},
      {{{"messages", {{{"role", "assistant"}, {"content", "x"}, {"tool_calls", {1}}}}}},
       "messages[0].tool_calls: not supported"},
      {{{"messages", {User(json::array({{{"type", "input_audio"}}}))}}},
       "messages[0].content[0].type: content part type 'input_audio' is not supported"},
      {{{"messages", {User(json::array({{{"type", "text"}, {"text", 5}}}))}}},
       "messages[0].content[0].text: expected a string, got number"},
      {{{"messages",
         {User(json::array(
             {{{"type", "image_url"}, {"image_url", {{"url", "file:///etc/passwd"}}}}}))}}},
       "expected a data: URI"},
      {{{"messages",
         {User(json::array(
             {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png,raw"}}}}}))}}},
       "must be base64-encoded"},
      {{{"messages",
         {User(json::array(
             {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,%%%"}}}}}))}}},
       "not valid base64"},
      {{{"messages",
         {User(json::array(
             {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64"}}}}}))}}},
       "no comma"},
      {{{"max_tokens", 0}}, "max_tokens: must be >= 1, got 0"},
      {{{"max_tokens", 2.5}}, "max_tokens: expected an integer, got number"},
      {{{"temperature", "hot"}}, "temperature: expected a number, got string"},
      {{{"seed", 1.5}}, "seed: expected an integer"},
      {{{"stop", {1}}}, "stop[0]: expected a string"},
      {{{"stream", 1}}, "stream: expected true or false"},
      {{{"stream_options", {{"include_usage", "yes"}}}}, "stream_options.include_usage"},
      {{{"n", 3}}, "only n = 1 is supported, got 3"},
      {{{"logprobs", true}}, "logprobs: not supported"},
      {{{"presence_penalty", 0.5}}, "presence_penalty: not supported"},
      {{{"logit_bias", {{"5", 1}}}}, "logit_bias: not supported"},
      {{{"response_format", {{"type", "json_object"}}}}, "response_format: not supported"},
      {{{"tool_choice", "auto"}}, "tool_choice: not supported"},
      {{{"vismoe", {{"colour", 1}}}}, "vismoe: unknown field 'colour'"},
      {{{"vismoe", {{"top_k", -1}}}}, "vismoe.top_k: must be in"},
      {{{"vismoe", {{"policy", {{"keep_ratio", "half"}}}}}}, "vismoe.policy"},
      {{{"vismoe", {{"policy", {{"no_such_knob", 1}}}}}}, "vismoe.policy"},
  };
  for (const Case& c : cases) {
    json body = ok;
    body.update(c.patch);
    SCOPED_TRACE(body.dump());
    absl::StatusOr<ChatCompletionRequest> r = Parse(body);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.message));
  }
  EXPECT_THAT(ParseChatCompletionRequest("{\"messages\": [").status().message(),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseChatCompletionRequest("").status().message(), HasSubstr("not valid JSON"));
  // A long client value is cut short in the message.
  json long_role = ok;
  long_role["messages"][0]["role"] = std::string(10000, 'r');
  EXPECT_LT(Parse(long_role).status().message().size(), 300u);
}

TEST(OpenAiResponseTest, BodiesHaveOpenAisShape) {
  v1::FinalResult final;
  final.set_finish_reason(v1::FINISH_REASON_EOS);
  final.mutable_usage()->set_prompt_tokens(10);
  final.mutable_usage()->set_completion_tokens(3);
  final.mutable_offload()->set_bytes_h2d(42);
  const CompletionHeader h{"chatcmpl-x", 1700000000, "m"};
  const json c = json::parse(ChatCompletionJson(h, "hi \xff", final));  // bad UTF-8 replaced
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"]["total_tokens"], 13);
  EXPECT_EQ(c["vismoe"]["offload"]["bytes_h2d"], "42");  // proto JSON: 64-bit as string
  EXPECT_EQ(c["created"], 1700000000);

  final.set_finish_reason(v1::FINISH_REASON_LENGTH);
  const std::string last = ChunkEvent(h, "", false, &final, true);
  ASSERT_EQ(last.substr(0, 6), "data: ");
  const json chunk = json::parse(last.substr(6));
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(chunk["usage"].is_null());
  const json usage = json::parse(UsageEvent(h, final).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);

  const json err = json::parse(ErrorJson(absl::ResourceExhaustedError("busy"), 429));
  EXPECT_EQ(err["error"]["message"], "busy");
  EXPECT_EQ(err["error"]["type"], "rate_limit_error");
  EXPECT_EQ(err["error"]["code"], "resource_exhausted");
  EXPECT_THAT(ErrorEvent(absl::DeadlineExceededError("late")),
              ::testing::EndsWith("\n\ndata: [DONE]\n\n"));
}

}  // namespace
}  // namespace vismoe::server
