#include "server/server_options.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
  // Ports are 0-65535 (gRPC would take 99999 modulo 65536 silently).
  for (const char* bad :
       {"127.0.0.1:99999", "127.0.0.1:", "localhost", "[::1]:-1", "h:+80", "h:123456"}) {
    o = base;
    o.listen = bad;
    fails(o, "option listen: invalid value");
  }
  for (const char* good : {"127.0.0.1:0", "0.0.0.0:65535", "[::1]:50051", "unix:/tmp/v.sock"}) {
    o = base;
    o.listen = good;
    EXPECT_TRUE(FinalizeServerOptions(&o).ok()) << good;
  }
  o = base;
  o.metrics_listen = "9464";  // the metrics endpoint wants host:port as well
  fails(o, "option metrics_listen: invalid value \"9464\": expected host:port");
  o.metrics_listen = "127.0.0.1:70000";
  fails(o, "option metrics_listen: invalid value");
  o = base;
  o.host_moe_layers = 3;  // without a budget nothing is offloaded
  fails(o, "option host_moe_layers needs --gpu_memory_budget");
  o.gpu_memory_budget = 1 << 30;
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  o = base;
  o.max_jpeg_scans = 0;
  fails(o, "option max_jpeg_scans must be positive");
  // Options that start a thread each stay within what a system gives.
  o = base;
  o.workers = 100000;
  o.max_step_tokens = 200000;
  fails(o, "option workers must be in [1, 1024] (one thread each), got 100000");
  o = base;
  o.prepare_threads = 5000;
  fails(o, "option prepare_threads must be in [1, 1024]");
  o = base;
  o.engine_threads = 4096;
  fails(o, "option engine_threads must be in [0, 1024]");
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
  o.expert_skipping = "sometimes";
  fails(o, "option expert_skipping: unknown policy \"sometimes\" (none, dual-threshold)");
  o = base;
  o.expert_skipping = "dual-threshold";  // no thresholds and no profile
  o.skip_tau_text = 0.1;
  fails(o, "needs skip_tau_text and skip_tau_visual");
  o = base;
  o.miss_policy = "cpu-maybe";
  fails(o, "option miss_policy: unknown policy \"cpu-maybe\" (fetch, commit, cpu)");
  o = base;
  o.miss_policy = "commit";  // no threshold and no profile
  fails(o, "\"commit\" needs commit_threshold");
  o = base;
  o.host_experts = "pinned";
  fails(o, "option host_experts: unknown mode \"pinned\" (auto, mapped, packed)");
  o = base;
  o.expert_dtype = "int4";
  fails(o, "option expert_dtype must be auto or fp8, got 'int4'");
  o = base;
  o.host_moe_layers = -2;
  fails(o, "option host_moe_layers must be >= 0, got -2");
  o = base;
  o.workers = 0;
  fails(o, "workers");
  o = base;
  o.prepare_threads = 0;
  fails(o, "prepare_threads");
  o = base;
  o.workers = 8;
  o.max_step_tokens = 4;
  fails(o, "max_step_tokens (4) must be >= workers (8)");
  o = base;
  o.kv_cache_tokens = 100;
  fails(o, "kv_cache_tokens (100) must be 0 or >= max_context_tokens");
  o = base;
  o.backend = "tpu";
  fails(o, "backend");
  o = base;
  o.synthetic_routing = "zipf";
  fails(o, "option synthetic_routing");
  o = base;
  o.api_key = "a";
  o.api_key_file = "/f";
  fails(o, "mutually exclusive");
  o = base;
  o.api_key_file = "/nonexistent/key";
  fails(o, "cannot read");
}

TEST(ServerOptionsTest, HostExecutionOptions) {
  ServerOptions o;
  o.model = "/m";
  EXPECT_EQ(o.miss_policy, "fetch");  // today's behaviour by default
  EXPECT_EQ(o.host_moe_layers, 0);
  ASSERT_TRUE(SetServerOption("miss_policy", "cpu", &o).ok());
  ASSERT_TRUE(SetServerOption("host_moe_layers", "2", &o).ok());
  EXPECT_FALSE(FinalizeServerOptions(&o).ok()) << "host layers without a budget do nothing";
  ASSERT_TRUE(SetServerOption("gpu_memory_budget", "24GB", &o).ok());
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_EQ(o.miss_policy, "cpu");
  EXPECT_EQ(o.host_moe_layers, 2);
  EXPECT_THAT(o.DebugString(), HasSubstr("miss_policy = cpu"));
  EXPECT_EQ(o.host_experts, "auto");
  ASSERT_TRUE(SetServerOption("host_experts", "mapped", &o).ok());
  EXPECT_THAT(o.DebugString(), HasSubstr("host_experts = mapped"));
  ASSERT_TRUE(SetServerOption("expert_dtype", "fp8", &o).ok());
  EXPECT_THAT(o.DebugString(), HasSubstr("expert_dtype = fp8"));
  absl::Status bad = SetServerOption("host_moe_layers", "two", &o);
  EXPECT_THAT(std::string(bad.message()),
              HasSubstr("option host_moe_layers: invalid value \"two\": expected an integer"));
}

TEST(ServerOptionsTest, ExpertSkippingFlags) {
  ServerOptions o;
  o.model = "/m";
  EXPECT_EQ(o.expert_skipping, "none");  // lossy: off by default
  ASSERT_TRUE(SetServerOption("expert_skipping", "dual-threshold", &o).ok());
  ASSERT_TRUE(SetServerOption("skip_tau_text", "0.05", &o).ok());
  ASSERT_TRUE(SetServerOption("skip_tau_visual", "0.3", &o).ok());
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_DOUBLE_EQ(o.skip_tau_visual, 0.3);
  ASSERT_TRUE(SetServerOption("skip_tau_visual", "-1", &o).ok());  // from the profile
  o.calibration_profile = "/p.json";
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  absl::Status bad = SetServerOption("skip_tau_text", "-0.5", &o);
  EXPECT_THAT(std::string(bad.message()),
              HasSubstr("option skip_tau_text: invalid value \"-0.5\": expected a threshold >= 0"));
  bad = SetServerOption("skip_tau_visual", "lots", &o);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("option skip_tau_visual"));
}

TEST(ServerOptionsTest, MissPolicyFlags) {
  ServerOptions o;
  o.model = "/m";
  EXPECT_EQ(o.miss_policy, "fetch");         // commit is lossy: fetch by default
  EXPECT_DOUBLE_EQ(o.commit_owa_alpha1, 0);  // OWA off
  ASSERT_TRUE(SetServerOption("miss_policy", "commit", &o).ok());
  ASSERT_TRUE(SetServerOption("commit_threshold", "0.9", &o).ok());
  ASSERT_TRUE(SetServerOption("commit_owa_alpha1", "1.3", &o).ok());
  ASSERT_TRUE(SetServerOption("commit_owa_alpha2", "1.06", &o).ok());
  ASSERT_TRUE(SetServerOption("commit_owa_min_correct", "2", &o).ok());
  ASSERT_TRUE(SetServerOption("commit_owa_max_correct", "3", &o).ok());
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_DOUBLE_EQ(o.commit_threshold, 0.9);
  EXPECT_DOUBLE_EQ(o.commit_owa_alpha1, 1.3);
  EXPECT_DOUBLE_EQ(o.commit_owa_alpha2, 1.06);
  EXPECT_EQ(o.commit_owa_min_correct, 2);
  ASSERT_TRUE(SetServerOption("commit_threshold", "-1", &o).ok());  // from the profile
  o.calibration_profile = "/p.json";
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  absl::Status bad = SetServerOption("commit_owa_alpha2", "0", &o);
  EXPECT_THAT(
      std::string(bad.message()),
      HasSubstr("option commit_owa_alpha2: invalid value \"0\": expected a number in (0, 16]"));
  bad = SetServerOption("commit_owa_alpha1", "3e38", &o);
  EXPECT_THAT(std::string(bad.message()),
              HasSubstr("option commit_owa_alpha1: invalid value \"3e38\": expected a number in"));
  bad = SetServerOption("commit_owa_alpha2", "17", &o);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("option commit_owa_alpha2"));
  bad = SetServerOption("commit_owa_alpha1", "-2", &o);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("option commit_owa_alpha1"));
  bad = SetServerOption("commit_owa_min_correct", "0", &o);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("option commit_owa_min_correct"));
  bad = SetServerOption("commit_threshold", "-0.5", &o);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("option commit_threshold"));
}

TEST(ServerOptionsTest, SpeculativeExecutionFlag) {
  ServerOptions o;
  o.model = "/m";
  EXPECT_FALSE(o.speculative_execution);  // lossy: off by default
  ASSERT_TRUE(SetServerOption("speculative_execution", "true", &o).ok());
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_TRUE(o.speculative_execution);
  EXPECT_THAT(o.DebugString(), HasSubstr("speculative_execution = true"));
  const absl::Status bad = SetServerOption("speculative_execution", "maybe", &o);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("option speculative_execution"));
  EXPECT_THAT(std::string(bad.message()), HasSubstr("maybe"));
}

TEST(ServerOptionsTest, ExpertPredictorsAndCalibrationProfile) {
  ServerOptions o;
  o.model = "/m";
  ASSERT_TRUE(SetServerOption("expert_predictor", "router-lookahead", &o).ok());
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_EQ(o.expert_predictor, "router-lookahead");
  // mlp-lookahead without a profile fails at start-up and says what to do.
  ASSERT_TRUE(SetServerOption("expert_predictor", "mlp-lookahead", &o).ok());
  absl::Status s = FinalizeServerOptions(&o);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("vismoe-calibrate"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--calibration_profile"));
  ASSERT_TRUE(SetServerOption("calibration_profile", "/p/profile.json", &o).ok());
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_EQ(o.calibration_profile, "/p/profile.json");
  ServerOptions j;
  j.model = "/m";
  ASSERT_TRUE(
      ApplyConfigJson(R"({"expert_predictor": "mlp-lookahead", "calibration_profile": "/c.json"})",
                      "c", &j)
          .ok());
  EXPECT_TRUE(FinalizeServerOptions(&j).ok());
  EXPECT_EQ(j.calibration_profile, "/c.json");
  EXPECT_THAT(j.DebugString(), HasSubstr("calibration_profile = /c.json"));
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

TEST(ServerOptionsTest, PreloadFlags) {
  ServerOptions o;
  o.model = "/m";
  EXPECT_EQ(o.preload, "none");  // off by default
  ASSERT_TRUE(SetServerOption("preload", "prefill-routing", &o).ok());
  ASSERT_TRUE(SetServerOption("preload_experts", "6", &o).ok());
  ASSERT_TRUE(SetServerOption("preload_share", "0.25", &o).ok());
  EXPECT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_EQ(o.preload_experts, 6);
  EXPECT_DOUBLE_EQ(o.preload_share, 0.25);
  EXPECT_THAT(o.DebugString(), HasSubstr("preload_share"));
  auto fails = [](ServerOptions x, const char* substr) {
    absl::Status s = FinalizeServerOptions(&x);
    EXPECT_THAT(std::string(s.message()), HasSubstr(substr));
  };
  ServerOptions bad = o;
  bad.preload = "oracle";
  fails(bad, "option preload: unknown policy \"oracle\" (none, prefill-routing)");
  bad = o;
  bad.preload_experts = -1;
  fails(bad, "option preload_experts must be >= 0");
  bad = o;
  bad.preload_share = 0;
  fails(bad, "option preload_share must be in (0, 1], got 0");
  bad.preload_share = 1.5;
  fails(bad, "option preload_share must be in (0, 1], got 1.5");
  EXPECT_THAT(std::string(SetServerOption("preload_share", "half", &o).message()),
              HasSubstr("option preload_share: invalid value \"half\""));
}

}  // namespace
}  // namespace vismoe::server

namespace vismoe::server {
namespace {

TEST(ServerOptionsTest, HttpApiFlags) {
  ServerOptions o;
  o.model = "/models/Qwen3-VL-30B-A3B-Instruct/";
  EXPECT_EQ(o.http_listen, "");  // off by default
  ASSERT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_EQ(o.served_model_name, "Qwen3-VL-30B-A3B-Instruct");
  ASSERT_TRUE(SetServerOption("http_listen", "0.0.0.0:8000", &o).ok());
  ASSERT_TRUE(SetServerOption("http_threads", "16", &o).ok());
  ASSERT_TRUE(SetServerOption("http_request_timeout", "90s", &o).ok());
  ASSERT_TRUE(SetServerOption("served_model_name", "qwen-vl", &o).ok());
  ASSERT_TRUE(FinalizeServerOptions(&o).ok());
  EXPECT_EQ(o.http_request_timeout, absl::Seconds(90));
  EXPECT_EQ(ServedModelName(o), "qwen-vl");
  EXPECT_THAT(o.DebugString(), HasSubstr("http_listen = 0.0.0.0:8000"));
  EXPECT_THAT(std::string(SetServerOption("http_request_timeout", "0s", &o).message()),
              HasSubstr("option http_request_timeout"));
  ServerOptions bad = o;
  bad.http_listen = "0.0.0.0:99999";
  EXPECT_THAT(std::string(FinalizeServerOptions(&bad).message()),
              HasSubstr("option http_listen: invalid value"));
  bad = o;
  bad.http_threads = 100000;
  EXPECT_THAT(std::string(FinalizeServerOptions(&bad).message()),
              HasSubstr("option http_threads must be in [1, 1024]"));
}

}  // namespace
}  // namespace vismoe::server
