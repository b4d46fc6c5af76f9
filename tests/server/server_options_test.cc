#include "server/server_options.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseByteSizeTest, UnitsAndPlainBytes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("24GB"), 24000000000LL);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3LL << 29);
  EXPECT_EQ(*ParseByteSize(" 2 kib "), 2048);
  EXPECT_EQ(*ParseByteSize("7b"), 7);
  EXPECT_EQ(*ParseByteSize("0"), 0);
  for (const char* bad : {"", "GB", "12XB", "-5", "1e3", "99999999999TB"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

TEST(ServerOptionsTest, SetOptionParsesEachKind) {
  ServerOptions o;
  ASSERT_TRUE(SetServerOption("gpu_memory_budget", "24GB", &o).ok());
  EXPECT_EQ(o.gpu_memory_budget, 24000000000LL);
  ASSERT_TRUE(SetServerOption("max_queue", "7", &o).ok());
  EXPECT_EQ(o.max_queue, 7);
  ASSERT_TRUE(SetServerOption("drain_timeout", "2.5s", &o).ok());
  EXPECT_EQ(o.drain_timeout, absl::Milliseconds(2500));
  ASSERT_TRUE(SetServerOption("keep_ratio", "0.5", &o).ok());
  EXPECT_EQ(o.keep_ratio, 0.5);
  ASSERT_TRUE(SetServerOption("listen", "0.0.0.0:1234", &o).ok());
  EXPECT_EQ(o.listen, "0.0.0.0:1234");
  absl::Status s = SetServerOption("max_queue", "lots", &o);
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_queue"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("lots"));
  EXPECT_THAT(std::string(SetServerOption("nope", "1", &o).message()), HasSubstr("unknown option"));
  EXPECT_FALSE(SetServerOption("drain_timeout", "-1s", &o).ok());
}

TEST(ServerOptionsTest, ConfigJsonAppliesAndRejectsUnknownKeys) {
  ServerOptions o;
  ASSERT_TRUE(ApplyConfigJson(R"({"max_queue": 3, "backend": "cpu", "max_image_bytes": "1MiB",
                                  "keep_ratio": 0.25, "token_compressor": "affinity"})",
                              "cfg.json", &o)
                  .ok());
  EXPECT_EQ(o.max_queue, 3);
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_EQ(o.max_image_bytes, 1 << 20);
  EXPECT_EQ(o.keep_ratio, 0.25);
  absl::Status s = ApplyConfigJson(R"({"max_qeueu": 3})", "cfg.json", &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cfg.json"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_qeueu"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("known keys"));
  EXPECT_THAT(std::string(ApplyConfigJson("{not json", "c", &o).message()), HasSubstr("JSON"));
  EXPECT_THAT(std::string(ApplyConfigJson("[1]", "c", &o).message()), HasSubstr("object"));
  EXPECT_FALSE(ApplyConfigJson(R"({"max_queue": [1]})", "c", &o).ok());
}

TEST(ServerOptionsTest, FinalizeChecksCrossFieldRules) {
  ServerOptions base;
  base.model = "/m";
  ASSERT_TRUE(FinalizeServerOptions(&base).ok());

  auto fails = [](ServerOptions o, const char* substr) {
    absl::Status s = FinalizeServerOptions(&o);
    EXPECT_FALSE(s.ok()) << substr;
    EXPECT_THAT(std::string(s.message()), HasSubstr(substr));
  };
  ServerOptions o = base;
  o.model = "";
  fails(o, "model");
  o = base;
  o.tls_cert = "/c.pem";
  fails(o, "tls_cert and tls_key");
  o = base;
  o.token_compressor = "magic";
  fails(o, "unknown token_compressor \"magic\"");
  o = base;
  o.expert_predictor = "oracle";
  fails(o, "unknown expert_predictor");
  o = base;
  o.keep_ratio = 1.5;
  fails(o, "keep_ratio");
  o = base;
  o.workers = 0;
  fails(o, "workers");
  o = base;
  o.backend = "tpu";
  fails(o, "backend");
  o = base;
  o.api_key = "a";
  o.api_key_file = "/f";
  fails(o, "mutually exclusive");
  o = base;
  o.api_key_file = "/nonexistent/key";
  fails(o, "cannot read");
}

TEST(ServerOptionsTest, ApiKeyFileIsReadAndNeverPrinted) {
  const std::string path = ::testing::TempDir() + "/vismoe_api_key.txt";
  { std::ofstream(path) << "  s3cret-key\n"; }
  ServerOptions o;
  o.model = "/m";
  o.api_key_file = path;
  ASSERT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_EQ(o.api_key, "s3cret-key");
  const std::string dump = o.DebugString();
  EXPECT_THAT(dump, Not(HasSubstr("s3cret")));
  EXPECT_THAT(dump, HasSubstr("api_key = <set>"));
  EXPECT_THAT(dump, HasSubstr("max_queue = 64"));
  std::remove(path.c_str());
}

TEST(ServerOptionsTest, EveryKeyRoundTripsThroughDebugString) {
  const ServerOptions o;
  for (const std::string& key : ServerOptionKeys()) {
    EXPECT_THAT(o.DebugString(), HasSubstr("  " + key + " = ")) << key;
  }
}

}  // namespace
}  // namespace vismoe::server
