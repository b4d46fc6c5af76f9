// End-to-end: the server with --tls_cert / --tls_key answers a client that
// trusts the certificate, and refuses plaintext on that port; bad TLS files
// stop it at start-up with a message naming the option and the file.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/server/tls_test_util.h"
#include "tests/testing/paths.h"

namespace vismoe::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<v1::InferenceService::Stub> TlsStub(int port, const std::string& root_pem) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = root_pem;
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  return v1::InferenceService::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl), args));
}

TEST(TlsServerE2eTest, ServesTlsClientsOnly) {
  const testing::TlsFiles files = testing::MakeSelfSignedTls("tls_server");
  ServerOptions o = testing::LoopbackOptions(testing::TinyModelDir());
  o.backend = "cpu";
  o.tls_cert = files.cert_path;
  o.tls_key = files.key_path;
  absl::StatusOr<std::unique_ptr<VismoeServer>> server = VismoeServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->LoadModel().ok());

  auto secure = TlsStub((*server)->port(), files.cert_pem);
  testing::StreamResult got = testing::RunGenerate(*secure, testing::TextRequest("hello", 3));
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_TRUE(got.has_final);
  EXPECT_FALSE(got.token_ids.empty());

  auto plain = testing::MakeStub((*server)->port());
  testing::StreamResult refused =
      testing::RunGenerate(*plain, testing::TextRequest("hello", 3), std::chrono::seconds(5));
  EXPECT_FALSE(refused.status.ok());
  EXPECT_FALSE(refused.has_final);

  // A client that does not trust this certificate is refused as well.
  const testing::TlsFiles stranger = testing::MakeSelfSignedTls("tls_stranger");
  auto untrusting = TlsStub((*server)->port(), stranger.cert_pem);
  EXPECT_FALSE(
      testing::RunGenerate(*untrusting, testing::TextRequest("hello", 3), std::chrono::seconds(5))
          .status.ok());
}

TEST(TlsServerE2eTest, GarbagePemIsAStartUpErrorNamingTheFile) {
  const testing::TlsFiles files = testing::MakeSelfSignedTls("tls_start");
  const std::string garbage = ::testing::TempDir() + "/tls_start_garbage.pem";
  testing::WriteText(garbage, "this is not PEM\n");
  ServerOptions o = testing::LoopbackOptions(testing::TinyModelDir());
  o.backend = "cpu";
  o.tls_cert = garbage;
  o.tls_key = files.key_path;
  absl::StatusOr<std::unique_ptr<VismoeServer>> server = VismoeServer::Start(o);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              AllOf(HasSubstr("option tls_cert"), HasSubstr(garbage),
                    HasSubstr("holds no PEM certificate")));
}

}  // namespace
}  // namespace vismoe::server
