// Runs the built vismoe-calibrate on the tiny fixture with the committed
// calibration set (tests/fixtures/calibration/requests.jsonl): the JSON report
// has every predictor side by side and the Eq. 10 table, the profile it wrote
// loads back and fits the model; bad inputs (a bad JSONL line, a missing
// image, a budget too small, a missing flag) exit 2 with a one-line message
// naming file:line or the flag.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/policy/calibration_profile.h"
#include "engine/model/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/child_process.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CalibrateRun {
  int rc = -1;
  std::string log;  // stdout + stderr
};

// vismoe-calibrate on the tiny fixture with a 12.5 MB budget (offloading
// needed) and B = 4, plus `extra` flags.
CalibrateRun Calibrate(const std::string& name, const std::vector<std::string>& extra) {
  const std::string log = ::testing::TempDir() + "/" + name + ".log";
  std::filesystem::remove(log);
  std::vector<std::string> argv = {testing::BinaryDir() + "/engine/vismoe-calibrate",
                                   "--model=" + testing::TinyModelDir(),
                                   "--max_context_tokens=4096",
                                   "--prefetch_count=4",
                                   "--copy_bandwidth=200M",
                                   "--threads=2",
                                   "--seed=1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  CalibrateRun run;
  auto rc = testing::RunToCompletion(argv, log, absl::Seconds(400));
  EXPECT_TRUE(rc.ok()) << rc.status();
  if (rc.ok()) run.rc = *rc;
  run.log = ReadFile(log);
  return run;
}

std::string FixtureRequests() { return testing::FixturesDir() + "/calibration/requests.jsonl"; }

TEST(VismoeCalibrateE2eTest, WritesProfileAndReport) {
  const std::string dir = ::testing::TempDir() + "/vismoe_calibrate_e2e";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string profile_path = dir + "/profile.json";
  const std::string report_path = dir + "/report.json";
  const CalibrateRun run =
      Calibrate("calibrate_ok", {"--requests=" + FixtureRequests(), "--budget=12.5M",
                                 "--out=" + profile_path, "--json_out=" + report_path});
  ASSERT_EQ(run.rc, 0) << run.log;
  EXPECT_THAT(run.log, HasSubstr("calibrate: trace 18/18"));
  EXPECT_THAT(run.log, HasSubstr("training mlp-lookahead"));
  EXPECT_THAT(run.log, HasSubstr("evaluate 5/5"));

  const nlohmann::json report = nlohmann::json::parse(ReadFile(report_path), nullptr, false);
  ASSERT_TRUE(report.is_object()) << ReadFile(report_path);
  for (const char* name : {"random", "history", "router-lookahead", "mlp-lookahead"}) {
    ASSERT_TRUE(report["hot_recall"].contains(name)) << name;
    for (const char* phase : {"prefill", "decode", "all"}) {
      const double v = report["hot_recall"][name][phase].get<double>();
      EXPECT_GE(v, 0.0);
      EXPECT_LE(v, 1.0);
    }
  }
  EXPECT_DOUBLE_EQ(report["hot_recall"]["random"]["all"].get<double>(), 0.25);
  EXPECT_GT(report["hot_recall"]["mlp-lookahead"]["all"].get<double>(),
            report["hot_recall"]["history"]["all"].get<double>());
  EXPECT_EQ(report["mlp_layer_hot_recall"].size(), 3u);  // MoE layers 1..3 are predicted
  EXPECT_GT(report["training"]["samples"].get<int>(), 0);
  const nlohmann::json& pinned = report["pinned"];
  const int max_valid = pinned["max_valid"].get<int>();
  ASSERT_GE(max_valid, 1);
  EXPECT_EQ(pinned["costs"].size(), static_cast<size_t>(max_valid + 1));
  const int chosen = pinned["chosen"].get<int>();
  EXPECT_GE(chosen, 1);  // --l_semantic default
  EXPECT_LE(chosen, max_valid);

  auto profile = CalibrationProfile::Load(profile_path);
  ASSERT_TRUE(profile.ok()) << profile.status();
  auto config = ModelConfig::Load(testing::TinyModelDir());
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(profile->CheckMatches(*config).ok());
  EXPECT_TRUE(profile->mlp.has_value());
  EXPECT_EQ(profile->chosen_pinned_layers, chosen);
  EXPECT_EQ(profile->hot_recall.size(), 4u);
  std::filesystem::remove_all(dir);
}

// Synthetic weights of the scaled "mid" config with realistic routing and
// sampled traces (greedy decoding of random weights cycles): calibration
// runs without a checkpoint, and the router-lookahead predictor recalls more
// than chance on the model's own routing.
TEST(VismoeCalibrateE2eTest, SyntheticRealisticRoutingCalibrates) {
  const std::string dir = ::testing::TempDir() + "/vismoe_calibrate_synthetic";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/requests.jsonl");
    for (const char* p : {"Write a story about a lighthouse.", "Explain how rivers form.",
                          "Describe a busy market.", "List ten animals and their homes."}) {
      f << R"({"prompt": ")" << p << R"(", "max_new_tokens": 48})"
        << "\n";
    }
  }
  const CalibrateRun run = Calibrate(
      "calibrate_synthetic",
      {"--model=" + testing::FixturesDir() + "/synthetic/qwen3-vl-mid", "--synthetic_weights",
       "--synthetic_routing=realistic", "--temperature=1", "--requests=" + dir + "/requests.jsonl",
       "--budget=200M", "--held_out=0.5", "--epochs=2", "--max_context_tokens=512",
       "--out=" + dir + "/profile.json", "--json_out=" + dir + "/report.json"});
  ASSERT_EQ(run.rc, 0) << run.log;
  EXPECT_THAT(run.log, HasSubstr("realistic routing"));
  const nlohmann::json report =
      nlohmann::json::parse(ReadFile(dir + "/report.json"), nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.log;
  const double random = report["hot_recall"]["random"]["all"].get<double>();
  EXPECT_DOUBLE_EQ(random, 4.0 / 32.0);  // B = 4 of 32 experts
  EXPECT_GT(report["hot_recall"]["router-lookahead"]["all"].get<double>(), random + 0.1);
  std::filesystem::remove_all(dir);
}

TEST(VismoeCalibrateE2eTest, BadInputExitsTwoWithFileAndLine) {
  const std::string dir = ::testing::TempDir() + "/vismoe_calibrate_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string out = "--out=" + dir + "/profile.json";

  const std::string bad_line = dir + "/bad_line.jsonl";
  std::ofstream(bad_line) << "{\"prompt\": \"fine\"}\n{\"prompt\": 3}\n";
  CalibrateRun run =
      Calibrate("calibrate_bad_line", {"--requests=" + bad_line, "--budget=12.5M", out});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_THAT(run.log, HasSubstr(bad_line + ":2:"));

  const std::string missing = dir + "/missing_image.jsonl";
  std::ofstream(missing) << "{\"prompt\": \"x\", \"images\": [\"nope.png\"]}\n";
  run = Calibrate("calibrate_missing_image", {"--requests=" + missing, "--budget=12.5M", out});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_THAT(run.log, HasSubstr(missing + ":1:"));
  EXPECT_THAT(run.log, HasSubstr("nope.png"));

  run =
      Calibrate("calibrate_small_budget", {"--requests=" + FixtureRequests(), "--budget=1M", out});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_THAT(run.log, HasSubstr("too small"));

  run = Calibrate("calibrate_no_budget", {"--requests=" + FixtureRequests(), out});
  EXPECT_EQ(run.rc, 2) << run.log;
  EXPECT_THAT(run.log, HasSubstr("--budget"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/profile.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vismoe
