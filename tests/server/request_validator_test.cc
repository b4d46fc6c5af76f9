#include "server/request_validator.h"

#include <cmath>
#include <limits>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/fake_engine.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;

std::string Png(int w, int h) {
  std::vector<uchar> buf;
  EXPECT_TRUE(cv::imencode(".png", cv::Mat(h, w, CV_8UC3, cv::Scalar::all(5)), buf));
  return std::string(buf.begin(), buf.end());
}

v1::GenerateRequest TextRequest(const std::string& text) {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.add_messages();
  m->set_role("user");
  m->add_parts()->set_text(text);
  return r;
}

class RequestValidatorTest : public ::testing::Test {
 protected:
  RequestValidatorTest() {
    decoder_ = std::move(*ImageDecoder::Create({1 << 16, 64 * 64, 1}));
    RequestValidator::Options o;
    o.max_images = 2;
    o.max_new_tokens_limit = 100;
    o.max_stop_strings = 2;
    o.max_prompt_tokens = 40;
    o.default_token_compressor = "affinity";
    validator_ = std::make_unique<RequestValidator>(o, decoder_.get());
  }

  void ExpectInvalid(const v1::GenerateRequest& r, const std::string& substr) {
    absl::StatusOr<ValidatedRequest> v = validator_->Validate(r);
    ASSERT_FALSE(v.ok()) << "expected failure containing: " << substr;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(substr));
  }

  std::unique_ptr<ImageDecoder> decoder_;
  std::unique_ptr<RequestValidator> validator_;
};

TEST_F(RequestValidatorTest, ConvertsAValidRequest) {
  v1::GenerateRequest r;
  r.set_request_id("abc");
  v1::ChatMessage* sys = r.add_messages();
  sys->set_role("system");
  sys->add_parts()->set_text("be brief");
  v1::ChatMessage* m = r.add_messages();
  m->set_role("user");
  m->add_parts()->set_text("look:");
  m->add_parts()->mutable_image()->set_data(Png(8, 8));
  m->add_parts()->set_text("and");
  m->add_parts()->mutable_image()->set_data(Png(4, 6));
  r.mutable_sampling()->set_max_new_tokens(5);
  r.mutable_sampling()->set_temperature(0.7f);
  r.mutable_sampling()->set_top_k(3);
  r.mutable_sampling()->set_top_p(0.9f);
  r.mutable_sampling()->set_seed(42);
  r.mutable_sampling()->add_stop("\n\n");
  r.mutable_policy()->set_keep_ratio(0.5f);
  r.mutable_policy()->set_expert_predictor("history");
  r.mutable_policy()->set_expert_skipping("dual-threshold");
  r.mutable_policy()->set_skip_tau_visual(0.25f);
  r.mutable_policy()->set_miss_policy("commit");
  r.mutable_policy()->set_commit_threshold(0.8f);
  r.mutable_policy()->set_commit_owa_alpha1(0.0f);  // 0 = OWA off: still a value

  absl::StatusOr<ValidatedRequest> v = validator_->Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  const GenerateRequest& g = v->request;
  EXPECT_EQ(g.request_id, "abc");
  ASSERT_EQ(g.messages.size(), 2u);
  EXPECT_EQ(g.messages[0].role, "system");
  ASSERT_EQ(g.messages[1].content.size(), 4u);
  EXPECT_EQ(g.messages[1].content[1].kind, ContentPart::Kind::kImage);
  EXPECT_EQ(g.messages[1].content[1].image_index, 0);
  EXPECT_EQ(g.messages[1].content[3].image_index, 1);
  EXPECT_EQ(v->image_data.size(), 2u);
  EXPECT_EQ(g.sampling.max_new_tokens, 5);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.7f);
  EXPECT_EQ(g.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_EQ(g.sampling.stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(g.policy.token_compressor, "affinity");  // server default
  EXPECT_FLOAT_EQ(*g.policy.keep_ratio, 0.5f);
  EXPECT_EQ(g.policy.expert_predictor, "history");
  EXPECT_EQ(g.policy.expert_skipping, "dual-threshold");
  EXPECT_FALSE(g.policy.skip_tau_text.has_value());  // the engine's (or profile's)
  EXPECT_EQ(g.policy.skip_tau_visual, 0.25f);
  EXPECT_EQ(g.policy.miss_policy, "commit");
  EXPECT_EQ(g.policy.commit_threshold, 0.8f);
  EXPECT_EQ(g.policy.commit_owa_alpha1, 0.0f);
  EXPECT_FALSE(g.policy.commit_owa_alpha2.has_value());  // the engine's

  testing::FakeEngine engine;
  double decode_seconds = -1;
  absl::StatusOr<std::unique_ptr<PreparedRequest>> done =
      validator_->Complete(std::move(*v), *decoder_, engine, &decode_seconds);
  ASSERT_TRUE(done.ok()) << done.status();
  const GenerateRequest& decoded = (*done)->request();  // the fake engine keeps the images
  ASSERT_EQ(decoded.images.size(), 2u);
  EXPECT_EQ(decoded.images[1].width, 4);
  EXPECT_EQ(decoded.images[1].height, 6);
  EXPECT_GE(decode_seconds, 0);
}

TEST_F(RequestValidatorTest, DefaultsAreFilledIn) {
  absl::StatusOr<ValidatedRequest> v = validator_->Validate(TextRequest("hi"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->request.sampling.max_new_tokens, 100);  // min(128 default, limit 100)
  EXPECT_FLOAT_EQ(v->request.sampling.top_p, 1.0f);
  EXPECT_FALSE(v->request.policy.keep_ratio.has_value());
  EXPECT_FALSE(v->request.policy.expert_predictor.has_value());
  // Expert skipping defaults live in the engine, not in the request.
  EXPECT_FALSE(v->request.policy.expert_skipping.has_value());
  EXPECT_FALSE(v->request.policy.skip_tau_text.has_value());
  EXPECT_FALSE(v->request.policy.miss_policy.has_value());  // likewise the miss policy
  EXPECT_FALSE(v->request.policy.commit_threshold.has_value());
}

TEST_F(RequestValidatorTest, RejectsBadRequests) {
  ExpectInvalid(v1::GenerateRequest(), "at least one message");
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_messages(0)->set_role("robot");
    ExpectInvalid(r, "unknown role \"robot\"");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_messages(0)->clear_parts();
    ExpectInvalid(r, "messages[0].parts: message has no parts");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_messages(0)->add_parts();
    ExpectInvalid(r, "messages[0].parts[1]: neither text nor image");
  }
  ExpectInvalid(TextRequest(""), "no text and no image");
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_messages(0)->add_parts()->mutable_image();
    ExpectInvalid(r, "image.data: image data is empty");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    for (int i = 0; i < 3; ++i)
      r.mutable_messages(0)->add_parts()->mutable_image()->set_data(Png(2, 2));
    ExpectInvalid(r, "too many images");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_messages(0)->add_parts()->mutable_image()->set_data("GIF89a-not-supported");
    ExpectInvalid(r, "unsupported image format");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_messages(0)->add_parts()->mutable_image()->set_data(Png(65, 65));
    ExpectInvalid(r, "over the limit of 4096 pixels");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_messages(0)->set_role("assistant");
    r.mutable_messages(0)->add_parts()->mutable_image()->set_data(Png(2, 2));
    ExpectInvalid(r, "only accepted in user messages");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_sampling()->set_max_new_tokens(101);
    ExpectInvalid(r, "sampling.max_new_tokens: 101 is out of range");
    r.mutable_sampling()->set_max_new_tokens(-1);
    ExpectInvalid(r, "sampling.max_new_tokens: -1");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_sampling()->set_temperature(-0.1f);
    ExpectInvalid(r, "sampling.temperature");
    r.mutable_sampling()->set_temperature(std::nanf(""));
    ExpectInvalid(r, "sampling.temperature: nan");
    r.mutable_sampling()->set_temperature(std::numeric_limits<float>::infinity());
    ExpectInvalid(r, "sampling.temperature");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_sampling()->set_top_k(-2);
    ExpectInvalid(r, "sampling.top_k: -2");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_sampling()->set_top_p(0.0f);
    ExpectInvalid(r, "sampling.top_p: 0 must be in (0, 1]");
    r.mutable_sampling()->set_top_p(1.5f);
    ExpectInvalid(r, "sampling.top_p: 1.5");
    r.mutable_sampling()->set_top_p(std::nanf(""));
    ExpectInvalid(r, "sampling.top_p");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    for (int i = 0; i < 3; ++i) r.mutable_sampling()->add_stop("s");
    ExpectInvalid(r, "too many stop strings: 3, limit 2");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_sampling()->add_stop("");
    ExpectInvalid(r, "sampling.stop[0]: stop string is empty");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_token_compressor("zip");
    ExpectInvalid(r, "unknown policy.token_compressor \"zip\"");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_expert_predictor("psychic");
    ExpectInvalid(r, "unknown policy.expert_predictor \"psychic\"");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_keep_ratio(0.0f);
    ExpectInvalid(r, "policy.keep_ratio: 0 must be in (0, 1]");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_expert_skipping("lots");
    ExpectInvalid(r, "unknown policy.expert_skipping \"lots\"; valid: none, dual-threshold");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_skip_tau_text(-0.5f);
    ExpectInvalid(r, "policy.skip_tau_text: -0.5 must be a finite threshold >= 0");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_skip_tau_visual(std::numeric_limits<float>::quiet_NaN());
    ExpectInvalid(r, "policy.skip_tau_visual");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_miss_policy("cache");
    ExpectInvalid(r, "unknown policy.miss_policy \"cache\"; valid: fetch, commit, cpu");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_commit_threshold(-1.0f);
    ExpectInvalid(r, "policy.commit_threshold: -1 must be a finite threshold >= 0");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_commit_owa_alpha1(std::numeric_limits<float>::infinity());
    ExpectInvalid(r, "policy.commit_owa_alpha1");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_commit_owa_alpha2(0.0f);
    ExpectInvalid(r, "policy.commit_owa_alpha2: 0 must be in (0, 16]");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.mutable_policy()->set_commit_owa_alpha1(3e38f);
    ExpectInvalid(r, "policy.commit_owa_alpha1: 3e+38 must be in [0, 16] (0 = OWA off)");
  }
  {
    v1::GenerateRequest r = TextRequest("x");
    r.set_request_id(std::string(200, 'a'));
    ExpectInvalid(r, "request_id");
  }
}

TEST_F(RequestValidatorTest, RequestIdIsPrintableAsciiOnly) {
  for (const std::string& id :
       {std::string("x\ny"), std::string("\x1b[2J"), std::string("\0", 1), std::string("\x07"),
        std::string("\xC3\xA9"), std::string("\x7F")}) {
    v1::GenerateRequest r = TextRequest("hi");
    r.set_request_id(id);
    ExpectInvalid(r, "request_id: byte ");
  }
  v1::GenerateRequest r = TextRequest("hi");
  r.set_request_id(" !\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~");
  EXPECT_TRUE(validator_->Validate(r).ok());
}

// The text byte limit is checked in Validate, which never tokenizes.
TEST_F(RequestValidatorTest, TextBytesAreLimitedBeforeTokenizing) {
  RequestValidator::Options o;
  o.max_prompt_bytes = 100;
  RequestValidator validator(o, decoder_.get());
  v1::GenerateRequest r = TextRequest(std::string(60, 'a'));
  EXPECT_TRUE(validator.Validate(r).ok());
  r.mutable_messages(0)->add_parts()->set_text(std::string(41, 'b'));  // 101 bytes in all
  absl::StatusOr<ValidatedRequest> v = validator.Validate(r);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("over the limit of 100 bytes"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("max_prompt_bytes"));
}

TEST_F(RequestValidatorTest, SpecialTokenPermissionComesFromTheServer) {
  absl::StatusOr<ValidatedRequest> v = validator_->Validate(TextRequest("<|im_start|>"));
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->request.allow_special_tokens_in_text);
  RequestValidator::Options o;
  o.allow_special_tokens_in_text = true;
  RequestValidator trusting(o, decoder_.get());
  v = trusting.Validate(TextRequest("<|im_start|>"));
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->request.allow_special_tokens_in_text);
}

TEST_F(RequestValidatorTest, CompleteChecksPromptLengthAndDecodes) {
  testing::FakeEngine engine;
  absl::StatusOr<ValidatedRequest> v = validator_->Validate(TextRequest(std::string(200, 'a')));
  ASSERT_TRUE(v.ok());
  absl::StatusOr<std::unique_ptr<PreparedRequest>> g =
      validator_->Complete(std::move(*v), *decoder_, engine, nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("prompt is 50 tokens, over the limit of 40"));

  // A PNG whose header is fine but whose data is corrupt fails at decode.
  std::string png = Png(8, 8);
  png.resize(png.size() - 20);
  v1::GenerateRequest r = TextRequest("x");
  r.mutable_messages(0)->add_parts()->mutable_image()->set_data(png);
  v = validator_->Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  g = validator_->Complete(std::move(*v), *decoder_, engine, nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("image 0: "));
}

}  // namespace
}  // namespace vismoe::server
