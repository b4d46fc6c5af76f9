// Every vismoe_ metric name used by the Grafana dashboard and the alert rules
// in deploy/ is one ServerMetrics exports (a static check; the e2e test with
// a real Prometheus goes further).
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/metrics.h"
#include "tests/testing/prometheus_api.h"

namespace vismoe {
namespace {

// Series names ServerMetrics can emit: each "# TYPE name kind" line, plus the
// _bucket/_sum/_count series of histograms.
std::set<std::string> ExportedSeriesNames() {
  auto m = ServerMetrics::Create("");
  EXPECT_TRUE(m.ok());
  // Families whose label children appear on first use.
  (*m)->SetMemoryRegion("resident", 1);
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit((*m)->Serialize(), '\n')) {
    if (!absl::StartsWith(line, "# TYPE ")) continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    names.insert(f[2]);
    if (f[3] == "histogram") {
      for (const char* s : {"_bucket", "_sum", "_count"}) names.insert(f[2] + s);
    }
  }
  return names;
}

// Every maximal [a-z0-9_:] word starting with "vismoe_" in `text`.
std::set<std::string> ReferencedNames(const std::string& text) {
  std::set<std::string> out;
  for (size_t i = text.find("vismoe_"); i != std::string::npos; i = text.find("vismoe_", i)) {
    const bool word_start = i == 0 || !(std::isalnum(static_cast<unsigned char>(text[i - 1])) ||
                                        text[i - 1] == '_' || text[i - 1] == '-');
    size_t j = i;
    while (j < text.size() && (std::islower(static_cast<unsigned char>(text[j])) ||
                               std::isdigit(static_cast<unsigned char>(text[j])) ||
                               text[j] == '_' || text[j] == ':')) {
      ++j;
    }
    if (word_start) out.insert(text.substr(i, j - i));
    i = j;
  }
  return out;
}

TEST(DeployMetricNamesTest, DashboardUsesOnlyExportedNames) {
  const std::set<std::string> exported = ExportedSeriesNames();
  ASSERT_GT(exported.size(), 20u);
  auto exprs = testing::DashboardExpressions(
      testing::SourceDir() + "/deploy/grafana/dashboards/vismoe.json", "1m");
  ASSERT_TRUE(exprs.ok()) << exprs.status();
  std::set<std::string> used;
  for (const std::string& e : *exprs) {
    for (const std::string& n : ReferencedNames(e)) {
      EXPECT_TRUE(exported.count(n)) << "dashboard uses unknown metric " << n << " in: " << e;
      used.insert(n);
    }
  }
  // The panels the design asks for are there.
  for (const char* n :
       {"vismoe_expert_cache_hits_total", "vismoe_prefetch_recalled_total",
        "vismoe_expert_bytes_h2d_total", "vismoe_transfer_stall_seconds_total",
        "vismoe_time_to_first_token_seconds_bucket", "vismoe_time_per_output_token_seconds_bucket",
        "vismoe_queue_depth", "vismoe_requests_total", "vismoe_gpu_memory_bytes",
        "vismoe_slab_cache_slots", "vismoe_experts_committed_total",
        "vismoe_speculative_executions_total"}) {
    EXPECT_TRUE(used.count(n)) << "dashboard has no panel on " << n;
  }
}

TEST(DeployMetricNamesTest, AlertRulesUseOnlyExportedNames) {
  const std::set<std::string> exported = ExportedSeriesNames();
  auto text = testing::ReadFileToString(testing::SourceDir() + "/deploy/prometheus/alerts.yml");
  ASSERT_TRUE(text.ok()) << text.status();
  // Alert names (VismoeX) are capitalised and so never match.
  const std::set<std::string> used = ReferencedNames(*text);
  EXPECT_GE(used.size(), 3u);
  for (const std::string& n : used) {
    EXPECT_TRUE(exported.count(n)) << "alerts.yml uses unknown metric " << n;
  }
}

TEST(DeployMetricNamesTest, ReferencedNamesFindsWholeWords) {
  EXPECT_EQ(ReferencedNames("sum(rate(vismoe_a_total[1m])) / x_vismoe_b + vismoe_c{l=\"v\"}"),
            (std::set<std::string>{"vismoe_a_total", "vismoe_c"}));
}

}  // namespace
}  // namespace vismoe
