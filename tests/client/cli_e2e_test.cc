// vismoe-cli against the real vismoe-server (tiny fixture model) over
// loopback gRPC, run as child processes. Skips only when the server binary
// was not built; once it exists every failure is a test failure.
#include <string>
#include <vector>

#include "client/png_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/client_e2e_util.h"
#include "tests/testing/golden_cases.h"
#include "tests/testing/paths.h"

namespace vismoe::testing {
namespace {

using ::testing::HasSubstr;

struct CliE2eTestName {
  static constexpr const char* kScratch = "cli_e2e";
};

class CliE2eTest : public ServerSuiteTest<CliE2eTestName> {
 protected:
  ToolResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), "--server=" + server_->address());
    return RunClientTool(*scratch_, "vismoe-cli", args);
  }
};

TEST_F(CliE2eTest, StreamsTextThenStatsAndJsonAgrees) {
  ToolResult text = Cli({"--prompt=Hello there", "--max_new_tokens=6"});
  ASSERT_EQ(text.exit_code, 0) << text.err << "\nserver log:\n" << server_->Log();
  for (const char* key : {"finish", "usage", "timings", "offload", "Hot Recall"}) {
    EXPECT_THAT(text.err, HasSubstr(key));
  }

  ToolResult json = Cli({"--prompt=Hello there", "--max_new_tokens=6", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json.out;
  ASSERT_TRUE(j["text"].is_string());
  ASSERT_TRUE(j["token_ids"].is_array());
  EXPECT_EQ(j["token_ids"].size(), j["usage"]["completion_tokens"].get<size_t>());
  EXPECT_GE(j["usage"]["completion_tokens"].get<int>(), 1);
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 6);
  EXPECT_THAT(std::vector<std::string>({"eos", "length", "stop_string"}),
              ::testing::Contains(j["finish_reason"].get<std::string>()));
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_TRUE(j["timings"]["client_total_seconds"].is_number());
  EXPECT_TRUE(j["offload"]["cache_queries"].is_number());
  // Greedy decoding is deterministic: the streamed text equals the JSON text.
  EXPECT_EQ(text.out,
            j["text"].get<std::string>() + (j["text"].get<std::string>().empty() ? "" : "\n"));
}

TEST_F(CliE2eTest, SendsImages) {
  std::vector<uint8_t> rgb(64 * 64 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 13);
  const std::string path = scratch_->File("img.png");
  std::ofstream(path, std::ios::binary) << client::EncodePngRgb(64, 64, rgb.data());
  ToolResult r = Cli({"--prompt=What is this?", "--image=" + path, "--image", path,
                      "--max_new_tokens=2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_GT(j["usage"]["visual_tokens_before"].get<int>(), 0);
}

TEST_F(CliE2eTest, InfoAndHealth) {
  ToolResult info = Cli({"info"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("model_type"));
  EXPECT_THAT(info.out, HasSubstr("qwen3_vl_moe"));
  ToolResult info_json = Cli({"info", "--json"});
  ASSERT_EQ(info_json.exit_code, 0) << info_json.err;
  EXPECT_FALSE(nlohmann::json::parse(info_json.out, nullptr, false).is_discarded());

  ToolResult health = Cli({"health"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_THAT(health.out, HasSubstr("SERVING"));
}

TEST_F(CliE2eTest, ErrorsMapToExitCodes) {
  ToolResult bad = Cli({"--prompt=x", "--temperature=-1"});
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("rejected the request"));

  ToolResult usage = Cli({});
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
  ToolResult unknown_flag = Cli({"--prompt=x", "--no_such_flag=1"});
  EXPECT_EQ(unknown_flag.exit_code, 2) << unknown_flag.err;
  ToolResult missing_image = Cli({"--prompt=x", "--image=" + scratch_->File("missing.png")});
  EXPECT_EQ(missing_image.exit_code, 2);
  EXPECT_THAT(missing_image.err, HasSubstr("missing.png"));

  const std::string dead = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  ToolResult unreachable = RunClientTool(
      *scratch_, "vismoe-cli", {"--server=" + dead, "--prompt=x", "--connect_timeout=1s"});
  EXPECT_EQ(unreachable.exit_code, 3);
  EXPECT_THAT(unreachable.err, HasSubstr("cannot reach server at " + dead));
  ToolResult dead_health = RunClientTool(*scratch_, "vismoe-cli", {"health", "--server=" + dead});
  EXPECT_EQ(dead_health.exit_code, 1);  // Docker HEALTHCHECK: 1 = unhealthy
}

// A server started with --api_key: the key travels as "authorization: Bearer".
TEST(CliApiKeyE2eTest, KeyFromFlagOrEnvironment) {
  if (!ServerUnderTest::BinaryExists()) {
    GTEST_SKIP() << ServerUnderTest::BinaryPath() << " was not built";
  }
  ScratchDir scratch("cli_api_key_e2e");
  absl::StatusOr<std::unique_ptr<ServerUnderTest>> server =
      ServerUnderTest::Start(scratch, {"--api_key=k-123"}, "k-123");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = "--server=" + (*server)->address();
  ToolResult no_key =
      RunClientTool(scratch, "vismoe-cli", {addr, "--prompt=hi", "--max_new_tokens=1"});
  EXPECT_EQ(no_key.exit_code, 1);
  EXPECT_THAT(no_key.err, HasSubstr("requires an API key"));
  ToolResult with_key = RunClientTool(
      scratch, "vismoe-cli", {addr, "--api_key=k-123", "--prompt=hi", "--max_new_tokens=1"});
  EXPECT_EQ(with_key.exit_code, 0) << with_key.err;
  // The same through $VISMOE_API_KEY, which keeps the key out of argv.
  ToolResult from_env = RunClientTool(scratch, "/usr/bin/env",
                                      {"VISMOE_API_KEY=k-123", ClientToolPath("vismoe-cli"), addr,
                                       "--prompt=hi", "--max_new_tokens=1"});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.err;
}

// DeepSeek-VL2 through the CLI: an image file and a prompt come back as the
// published model's greedy tokens (golden multi_tile: the image, then its text).
TEST(CliDeepseekVl2E2eTest, AnImageAndAPromptGiveThePublishedTokens) {
  if (!ServerUnderTest::BinaryExists()) {
    GTEST_SKIP() << ServerUnderTest::BinaryPath() << " was not built";
  }
  ScratchDir scratch("cli_e2e_vl2");
  const std::string fixtures = FixturesDir();
  absl::StatusOr<std::unique_ptr<ServerUnderTest>> server = ServerUnderTest::Start(
      scratch,
      {"--model=" + fixtures + "/tiny-deepseek-vl2", "--backend=cpu", "--max_context_tokens=512"});
  ASSERT_TRUE(server.ok()) << server.status();
  ToolResult r = RunClientTool(
      scratch, "vismoe-cli",
      {"--server=" + (*server)->address(), "--image=" + fixtures + "/golden/images/odd_301x217.png",
       "--prompt=\nWhat is in the picture?", "--max_new_tokens=12", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << "\nserver log:\n" << (*server)->Log();
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const nlohmann::json cases = ReadJsonFile(fixtures + "/golden/deepseek_vl2_cases.json");
  const std::vector<int> greedy = cases[1]["greedy_ids"].get<std::vector<int>>();
  ASSERT_EQ(cases[1]["name"], "multi_tile");
  EXPECT_EQ(j["token_ids"].get<std::vector<int>>(),
            std::vector<int>(greedy.begin(), greedy.begin() + 12));
  EXPECT_EQ(j["usage"]["visual_tokens_before"].get<int>(), 49);
}

}  // namespace
}  // namespace vismoe::testing
