// promtool (from the Debian 'prometheus' package) accepts the Prometheus
// config and alert rules shipped in deploy/prometheus/.
#include <fstream>

#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/prometheus_api.h"

namespace vismoe {
namespace {

class PromtoolCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<std::string> p = testing::FindOnPath("promtool");
    ASSERT_TRUE(p.has_value())
        << "'promtool' is not on PATH; install the 'prometheus' package (deploy/install-deps.sh)";
    promtool_ = *p;
    log_ = ::testing::TempDir() + "promtool_check_test.log";
    std::remove(log_.c_str());
  }

  // Exit code of `promtool args...`; its output is printed on failure.
  int Run(std::vector<std::string> args) {
    args.insert(args.begin(), promtool_);
    auto code = testing::RunToCompletion(args, log_, absl::Seconds(60));
    EXPECT_TRUE(code.ok()) << code.status();
    auto out = testing::ReadFileToString(log_);
    output_ = out.ok() ? *out : "";
    std::remove(log_.c_str());
    return code.ok() ? *code : -1;
  }

  std::string promtool_, log_, output_;
};

TEST_F(PromtoolCheckTest, ConfigIsValid) {
  // Also checks the rule files the config names (alerts.yml, beside it).
  EXPECT_EQ(Run({"check", "config", testing::SourceDir() + "/deploy/prometheus/prometheus.yml"}), 0)
      << output_;
  EXPECT_NE(output_.find("1 rule files found"), std::string::npos) << output_;
}

TEST_F(PromtoolCheckTest, AlertRulesAreValid) {
  EXPECT_EQ(Run({"check", "rules", testing::SourceDir() + "/deploy/prometheus/alerts.yml"}), 0)
      << output_;
  EXPECT_NE(output_.find("SUCCESS"), std::string::npos) << output_;
}

TEST_F(PromtoolCheckTest, BrokenRulesAreRejected) {
  // The check above can fail: promtool rejects invalid PromQL.
  const std::string bad = ::testing::TempDir() + "promtool_bad_rules.yml";
  {
    std::ofstream out(bad);
    out << "groups:\n  - name: bad\n    rules:\n      - alert: Bad\n"
           "        expr: sum(rate(vismoe_requests_total[5m]) > \n";
  }
  EXPECT_NE(Run({"check", "rules", bad}), 0) << output_;
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace vismoe
