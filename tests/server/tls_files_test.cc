#include "server/tls_files.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/tls_test_util.h"

namespace vismoe::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Message(const absl::StatusOr<TlsKeyPair>& r) {
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(TlsFilesTest, LoadsAMatchingPair) {
  const testing::TlsFiles files = testing::MakeSelfSignedTls("tls_pair");
  absl::StatusOr<TlsKeyPair> pair = LoadTlsKeyPair(files.cert_path, files.key_path);
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->cert_chain, files.cert_pem);
  EXPECT_THAT(pair->private_key, HasSubstr("-----BEGIN PRIVATE KEY-----"));
}

// Each failure names the option, the file and what is wrong with it (gRPC
// itself would only fail to bind the port).
TEST(TlsFilesTest, BadFilesNameTheOptionAndTheFile) {
  const testing::TlsFiles good = testing::MakeSelfSignedTls("tls_good");
  const testing::TlsFiles other = testing::MakeSelfSignedTls("tls_other");
  const std::string garbage = ::testing::TempDir() + "/tls_garbage.pem";
  testing::WriteText(garbage, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n");
  const std::string missing = ::testing::TempDir() + "/tls_missing.pem";

  EXPECT_THAT(Message(LoadTlsKeyPair(missing, good.key_path)),
              AllOf(HasSubstr("option tls_cert"), HasSubstr(missing), HasSubstr("cannot be read")));
  EXPECT_THAT(Message(LoadTlsKeyPair(good.cert_path, missing)),
              AllOf(HasSubstr("option tls_key"), HasSubstr("cannot be read")));
  EXPECT_THAT(Message(LoadTlsKeyPair(garbage, good.key_path)),
              AllOf(HasSubstr("option tls_cert"), HasSubstr(garbage),
                    HasSubstr("holds no PEM certificate")));
  EXPECT_THAT(Message(LoadTlsKeyPair(good.cert_path, garbage)),
              AllOf(HasSubstr("option tls_key"), HasSubstr(garbage),
                    HasSubstr("no readable PEM private key")));
  // The key in place of the certificate, and the other way round.
  EXPECT_THAT(Message(LoadTlsKeyPair(good.key_path, good.key_path)),
              HasSubstr("holds no PEM certificate"));
  EXPECT_THAT(Message(LoadTlsKeyPair(good.cert_path, good.cert_path)),
              HasSubstr("no readable PEM private key"));
  EXPECT_THAT(
      Message(LoadTlsKeyPair(good.cert_path, other.key_path)),
      AllOf(HasSubstr("option tls_key"), HasSubstr(other.key_path),
            HasSubstr("is not the key of the first certificate in"), HasSubstr(good.cert_path)));
}

}  // namespace
}  // namespace vismoe::server
