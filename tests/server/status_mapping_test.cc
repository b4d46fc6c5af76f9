#include "server/status_mapping.h"

#include "gtest/gtest.h"

namespace vismoe::server {
namespace {

TEST(StatusMappingTest, KeepsCodeAndMessage) {
  const std::pair<absl::Status, grpc::StatusCode> cases[] = {
      {absl::InvalidArgumentError("bad top_p"), grpc::StatusCode::INVALID_ARGUMENT},
      {absl::ResourceExhaustedError("queue full"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::UnavailableError("server shutting down"), grpc::StatusCode::UNAVAILABLE},
      {absl::CancelledError("c"), grpc::StatusCode::CANCELLED},
      {absl::DeadlineExceededError("d"), grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::UnauthenticatedError("key"), grpc::StatusCode::UNAUTHENTICATED},
      {absl::UnimplementedError("u"), grpc::StatusCode::UNIMPLEMENTED},
      {absl::InternalError("i"), grpc::StatusCode::INTERNAL},
      {absl::NotFoundError("n"), grpc::StatusCode::NOT_FOUND},
      {absl::FailedPreconditionError("f"), grpc::StatusCode::FAILED_PRECONDITION},
      {absl::DataLossError("l"), grpc::StatusCode::DATA_LOSS},
  };
  for (const auto& [in, code] : cases) {
    grpc::Status out = ToGrpcStatus(in);
    EXPECT_EQ(out.error_code(), code) << in;
    EXPECT_EQ(out.error_message(), std::string(in.message()));
    EXPECT_EQ(FromGrpcStatus(out), in);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(StatusMappingTest, LabelsAreLowerCaseCodeNames) {
  EXPECT_EQ(StatusLabel(grpc::StatusCode::OK), "ok");
  EXPECT_EQ(StatusLabel(grpc::StatusCode::INVALID_ARGUMENT), "invalid_argument");
  EXPECT_EQ(StatusLabel(grpc::StatusCode::RESOURCE_EXHAUSTED), "resource_exhausted");
  EXPECT_EQ(StatusLabel(grpc::StatusCode::DEADLINE_EXCEEDED), "deadline_exceeded");
  EXPECT_EQ(StatusLabel(grpc::StatusCode::CANCELLED), "cancelled");
  EXPECT_EQ(StatusLabel(grpc::StatusCode::UNAUTHENTICATED), "unauthenticated");
  EXPECT_EQ(StatusLabel(static_cast<grpc::StatusCode>(99)), "unknown");
}

}  // namespace
}  // namespace vismoe::server
