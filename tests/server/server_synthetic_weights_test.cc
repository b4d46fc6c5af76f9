// The server's synthetic_weights / synthetic_seed options: parsed from flags
// and config files, handed to the engine, and announced loudly in the log.
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "server/server_options.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/server/fake_engine.h"
#include "tests/server/server_test_util.h"

namespace vismoe::server {
namespace {

using ::testing::HasSubstr;

TEST(ServerSyntheticWeightsTest, OptionsParse) {
  ServerOptions o;
  o.model = "/m";
  EXPECT_FALSE(o.synthetic_weights);
  ASSERT_TRUE(SetServerOption("synthetic_weights", "true", &o).ok());
  ASSERT_TRUE(SetServerOption("synthetic_seed", "42", &o).ok());
  EXPECT_TRUE(o.synthetic_weights);
  EXPECT_EQ(o.synthetic_seed, 42);
  EXPECT_THAT(o.DebugString(), HasSubstr("synthetic_weights = true"));
  absl::Status bad = SetServerOption("synthetic_weights", "maybe", &o);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("synthetic_weights"));
  EXPECT_FALSE(SetServerOption("synthetic_seed", "-1", &o).ok());
  ServerOptions j;
  ASSERT_TRUE(ApplyConfigJson(R"({"synthetic_weights": true, "synthetic_seed": 7})", "c", &j).ok());
  EXPECT_TRUE(j.synthetic_weights);
  EXPECT_EQ(j.synthetic_seed, 7);
}

TEST(ServerSyntheticWeightsTest, EngineGetsTheOptionsAndTheLogWarns) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  ServerOptions o = testing::LoopbackOptions("/synthetic-model");
  o.synthetic_weights = true;
  o.synthetic_seed = 9;
  EngineOptions seen;
  auto factory = [&seen](const EngineOptions& eo) -> absl::StatusOr<std::unique_ptr<Engine>> {
    seen = eo;
    return std::unique_ptr<Engine>(std::make_unique<testing::FakeEngine>());
  };
  auto server = VismoeServer::Start(o, factory);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->LoadModel().ok());
  (*server)->Shutdown();
  spdlog::set_default_logger(previous);
  EXPECT_TRUE(seen.synthetic_weights);
  EXPECT_EQ(seen.synthetic_seed, 9u);
  EXPECT_EQ(seen.model_path, "/synthetic-model");
  EXPECT_THAT(log.str(), HasSubstr("MEANINGLESS"));
}

}  // namespace
}  // namespace vismoe::server
