// vismoe-load and vismoe-eval against the real vismoe-server (tiny fixture
// model), run as child processes. Skips only when the server binary was not
// built; once it exists every failure is a test failure.
#include <fstream>
#include <string>
#include <vector>

#include "client/png_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/client_e2e_util.h"

namespace vismoe::testing {
namespace {

using ::testing::HasSubstr;

struct LoadE2eTestName {
  static constexpr const char* kScratch = "load_e2e";
};

class LoadE2eTest : public ServerSuiteTest<LoadE2eTestName> {
 protected:
  ToolResult Tool(const std::string& tool, std::vector<std::string> args) {
    args.insert(args.begin(), "--server=" + server_->address());
    return RunClientTool(*scratch_, tool, args);
  }

  static nlohmann::json ReadJson(const std::string& path) {
    return nlohmann::json::parse(ReadWholeFile(path), nullptr, false);
  }

  // The report's counts and percentile order.
  static void ExpectConsistentReport(const nlohmann::json& j, int requests) {
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["requests"]["sent"], requests);
    EXPECT_EQ(j["requests"]["completed"], requests) << j["requests"].dump();
    EXPECT_EQ(j["requests"]["failed"], 0);
    for (const char* m : {"ttft", "e2e"}) {
      const nlohmann::json& d = j["latency_seconds"][m];
      EXPECT_EQ(d["count"], requests) << m;
      EXPECT_GT(d["p50"].get<double>(), 0) << m;
      EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>()) << m;
      EXPECT_LE(d["p90"].get<double>(), d["p99"].get<double>()) << m;
    }
    EXPECT_GT(j["throughput"]["requests_per_second"].get<double>(), 0);
    EXPECT_GT(j["throughput"]["completion_tokens"].get<int>(), 0);
    EXPECT_TRUE(j["server"].contains("cache_hit_ratio"));
    EXPECT_TRUE(j["server"].contains("hot_recall"));
  }
};

TEST_F(LoadE2eTest, ClosedLoopSynthetic) {
  const std::string report = scratch_->File("closed.json");
  ToolResult r = Tool("vismoe-load", {"--synthetic", "--requests=6", "--concurrency=2",
                                      "--max_new_tokens=3", "--json_report=" + report});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << "\nserver log:\n" << server_->Log();
  EXPECT_THAT(r.out, HasSubstr("sent 6  completed 6  failed 0"));
  const nlohmann::json j = ReadJson(report);
  ExpectConsistentReport(j, 6);
  EXPECT_EQ(j["config"]["mode"], "closed_loop");
}

TEST_F(LoadE2eTest, OpenLoopFromJsonl) {
  std::vector<uint8_t> rgb(96 * 64 * 3, 128);
  std::ofstream(scratch_->File("a.png"), std::ios::binary)
      << client::EncodePngRgb(96, 64, rgb.data());
  std::ofstream(scratch_->File("reqs.jsonl"))
      << "{\"prompt\": \"Describe\", \"images\": [\"a.png\"], \"max_new_tokens\": 2}\n"
      << "{\"prompt\": \"Say hi\"}\n";
  const std::string report = scratch_->File("open.json");
  ToolResult r = Tool("vismoe-load",
                      {"--request_file=" + scratch_->File("reqs.jsonl"), "--rate=4", "--requests=4",
                       "--concurrency=2", "--max_new_tokens=3", "--json_report=" + report});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = ReadJson(report);
  ExpectConsistentReport(j, 4);
  EXPECT_EQ(j["config"]["mode"], "open_loop");
}

TEST_F(LoadE2eTest, EvalRunnerReportsAccuracy) {
  std::vector<uint8_t> rgb(64 * 64 * 3, 200);
  std::ofstream(scratch_->File("v.png"), std::ios::binary)
      << client::EncodePngRgb(64, 64, rgb.data());
  std::ofstream(scratch_->File("vqa.jsonl"))
      << "{\"image\": \"v.png\", \"question\": \"Is it grey?\", \"answer\": \"yes\", "
         "\"category\": \"pope\"}\n"
      << "{\"image\": \"v.png\", \"question\": \"Colour?\", \"choices\": [\"grey\", \"red\"], "
         "\"answer\": \"A\", \"category\": \"mc\"}\n";
  const std::string report = scratch_->File("eval.json");
  ToolResult r = Tool("vismoe-eval", {"--data=" + scratch_->File("vqa.jsonl"), "--max_new_tokens=2",
                                      "--json_report=" + report});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("overall"));
  const nlohmann::json j = ReadJson(report);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["overall"]["total"], 2);
  EXPECT_EQ(j["overall"]["errors"], 0);
  EXPECT_TRUE(j["categories"].contains("pope"));
  EXPECT_TRUE(j["categories"].contains("mc"));
  ASSERT_EQ(j["items"].size(), 2u);
  EXPECT_TRUE(j["items"][0]["prediction"].is_string());
}

TEST_F(LoadE2eTest, UsageErrors) {
  EXPECT_EQ(Tool("vismoe-load", {}).exit_code, 2);  // neither --synthetic nor --request_file
  EXPECT_EQ(Tool("vismoe-load", {"--synthetic", "--concurrency=0"}).exit_code, 2);
  std::ofstream(scratch_->File("bad.jsonl")) << "{\"prompt\": \"ok\"}\nnot json\n";
  ToolResult bad = Tool("vismoe-load", {"--request_file=" + scratch_->File("bad.jsonl")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("bad.jsonl:2: invalid JSON"));
  EXPECT_EQ(Tool("vismoe-eval", {}).exit_code, 2);
}

}  // namespace
}  // namespace vismoe::testing
