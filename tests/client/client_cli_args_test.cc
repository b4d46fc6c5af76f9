#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "client/cli_args.h"
#include "client/rpc_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int32_t, client_args_test_int, 0, "test flag");
ABSL_FLAG(bool, client_args_test_bool, false, "test flag");

namespace vismoe::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// argv storage that outlives the char* views.
struct Argv {
  explicit Argv(std::vector<std::string> a) : storage(std::move(a)) {
    for (std::string& s : storage) ptrs.push_back(s.data());
  }
  std::vector<std::string> Remaining() const {
    return std::vector<std::string>(ptrs.begin(), ptrs.end());
  }
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
};

TEST(CliArgsTest, ExtractRepeatedFlagKeepsOrderAndOtherArgs) {
  Argv argv({"prog", "--image=a.png", "--prompt=x", "--image", "b,c.png", "-image=d.png", "info",
             "--", "--image=e.png"});
  std::vector<std::string> values;
  ASSERT_TRUE(ExtractRepeatedFlag("image", &argv.ptrs, &values).ok());
  EXPECT_THAT(values, ElementsAre("a.png", "b,c.png", "d.png"));
  EXPECT_THAT(argv.Remaining(), ElementsAre("prog", "--prompt=x", "info", "--", "--image=e.png"));
}

TEST(CliArgsTest, ExtractRepeatedFlagNeedsAValue) {
  Argv argv({"prog", "--stop"});
  std::vector<std::string> values;
  EXPECT_THAT(ExtractRepeatedFlag("stop", &argv.ptrs, &values).message(), HasSubstr("--stop"));
}

TEST(CliArgsTest, ValidateFlags) {
  EXPECT_TRUE(ValidateFlags(Argv({"prog", "--client_args_test_int=3", "--client_args_test_bool",
                                  "--noclient_args_test_bool", "positional"})
                                .ptrs)
                  .ok());
  EXPECT_TRUE(ValidateFlags(Argv({"prog", "--client_args_test_int", "4"}).ptrs).ok());
  EXPECT_THAT(ValidateFlags(Argv({"prog", "--no_such_flag=1"}).ptrs).message(),
              HasSubstr("unknown flag --no_such_flag"));
  EXPECT_THAT(ValidateFlags(Argv({"prog", "--client_args_test_int=abc"}).ptrs).message(),
              HasSubstr("bad value for --client_args_test_int=abc"));
  EXPECT_THAT(ValidateFlags(Argv({"prog", "--client_args_test_int"}).ptrs).message(),
              HasSubstr("needs a value"));
  EXPECT_TRUE(ValidateFlags(Argv({"prog", "--", "--no_such_flag"}).ptrs).ok());
}

TEST(RpcErrorTest, MessagesAndExitCodes) {
  const grpc::Status unavailable(grpc::StatusCode::UNAVAILABLE, "connection refused");
  EXPECT_EQ(DescribeRpcError(unavailable, "h:1"), "cannot reach server at h:1: connection refused");
  EXPECT_EQ(ExitCodeForRpc(unavailable), kExitConnectionError);
  const grpc::Status invalid(grpc::StatusCode::INVALID_ARGUMENT, "images[0]: bad");
  EXPECT_THAT(DescribeRpcError(invalid, "h:1"), HasSubstr("rejected the request: images[0]: bad"));
  EXPECT_EQ(ExitCodeForRpc(invalid), kExitServerError);
  EXPECT_EQ(ExitCodeForRpc(grpc::Status::OK), kExitOk);
  EXPECT_THAT(DescribeRpcError(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no key"), "h"),
              HasSubstr("--api_key"));
  // Every code has a name and a message mentioning it or its meaning.
  for (int code = 1; code <= 16; ++code) {
    const std::string name = StatusCodeName(code);
    EXPECT_THAT(name, ::testing::Not(HasSubstr("CODE_"))) << code;
    const std::string msg =
        DescribeRpcError(grpc::Status(static_cast<grpc::StatusCode>(code), "detail"), "h:1");
    EXPECT_THAT(msg, HasSubstr("h:1")) << name;
    EXPECT_THAT(msg, HasSubstr("detail")) << name;
  }
  EXPECT_EQ(StatusCodeName(99), "CODE_99");
}

// RESOURCE_EXHAUSTED means two things: a full queue (retry) or a message over
// the server's max_message_bytes (gRPC's own check; retrying cannot help).
TEST(RpcErrorTest, ResourceExhaustedTellsQueueFullFromTooLarge) {
  const std::string too_large =
      DescribeRpcError(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                    "Received message larger than max (2097182 vs. 1048576)"),
                       "h:1");
  EXPECT_THAT(too_large, HasSubstr("max_message_bytes"));
  EXPECT_THAT(too_large, HasSubstr("retrying will not help"));
  EXPECT_THAT(too_large, ::testing::Not(HasSubstr("retry later")));
  const std::string full = DescribeRpcError(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "admission queue is full"), "h:1");
  EXPECT_THAT(full, HasSubstr("retry later"));
  EXPECT_THAT(full, ::testing::Not(HasSubstr("max_message_bytes")));
}

}  // namespace
}  // namespace vismoe::client
