// Raw request parsing (errors that name the problem) and log escaping.
#include "server/request_bytes.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(RequestBytesTest, ParsesAndSerializesRoundTrip) {
  v1::GenerateRequest r;
  r.set_request_id("id-1");
  r.add_messages()->set_role("user");
  v1::GenerateRequest back;
  ASSERT_TRUE(ParseRequestBytes(SerializeToByteBuffer(r), &back).ok());
  EXPECT_EQ(back.SerializeAsString(), r.SerializeAsString());
  v1::GetModelInfoRequest empty;
  EXPECT_TRUE(ParseRequestBytes(Bytes(""), &empty).ok());
}

TEST(RequestBytesTest, ErrorsNameTheProblem) {
  v1::GenerateRequest r;
  absl::Status garbage = ParseRequestBytes(Bytes("\xFF\xFF\xFF junk"), &r);
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(garbage.message()),
              HasSubstr("not a valid vismoe.v1.GenerateRequest: malformed or truncated"));
  // request_id (field 1) = "\xC3\x28": not UTF-8.
  absl::Status utf8 = ParseRequestBytes(Bytes(std::string("\x0A\x02\xC3\x28", 4)), &r);
  EXPECT_EQ(utf8.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(utf8.message()),
              HasSubstr("string field vismoe.v1.GenerateRequest.request_id is not valid UTF-8"));
  // The capture ends with the parse: the next failure is described afresh.
  garbage = ParseRequestBytes(Bytes("\xFF"), &r);
  EXPECT_THAT(std::string(garbage.message()), ::testing::Not(HasSubstr("UTF-8")));
}

TEST(RequestBytesTest, EscapeForLogNeutralisesControlCharacters) {
  EXPECT_EQ(EscapeForLog("plain text, é ok"), "plain text, é ok");
  EXPECT_EQ(EscapeForLog("a\nb\r\tc\\"), "a\\nb\\r\\tc\\\\");
  EXPECT_EQ(EscapeForLog(std::string("\x1b[31m\0\x07\x7F", 8)), "\\x1b[31m\\x00\\x07\\x7f");
}

}  // namespace
}  // namespace vismoe::server
