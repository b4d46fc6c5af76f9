// Runs the built vismoe-bench on the tiny fixture under a budget that forces
// offloading, and checks its JSON report: every documented field is present
// and the derived ones agree with the counters they come from.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/child_process.h"
#include "tests/testing/paths.h"

namespace vismoe {
namespace {

TEST(VismoeBenchE2eTest, ReportsOffloadFieldsConsistently) {
  const std::string out = ::testing::TempDir() + "/vismoe_bench_report.json";
  const std::string log = ::testing::TempDir() + "/vismoe_bench.log";
  // 12.5 MB: resident + 8 MiB KV cache + one pinned MoE layer + 30 slabs
  // for the other 48 experts, so the deeper layers must copy experts in.
  auto rc = testing::RunToCompletion(
      {testing::BinaryDir() + "/engine/vismoe-bench", "--model=" + testing::TinyModelDir(),
       "--budget=12.5M", "--max_context_tokens=4096", "--pinned_layers=1", "--copy_bandwidth=200M",
       "--prefetch=history", "--eviction=guarded", "--max_new_tokens=8", "--threads=2",
       "--json_out=" + out},
      log, absl::Seconds(300));
  ASSERT_TRUE(rc.ok()) << rc.status();
  std::ifstream log_in(log);
  std::stringstream log_text;
  log_text << log_in.rdbuf();
  ASSERT_EQ(*rc, 0) << log_text.str();

  std::ifstream in(out);
  ASSERT_TRUE(in) << "no report at " << out;
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json r = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_TRUE(r.is_object()) << ss.str();
  for (const char* key : {"ttft_seconds_mean",
                          "tpot_seconds_mean",
                          "total_seconds",
                          "cache_queries",
                          "cache_hits",
                          "hit_ratio",
                          "prefetch_needed",
                          "prefetch_recalled",
                          "hot_recall",
                          "prefetch_issued",
                          "prefetch_used",
                          "bytes_h2d",
                          "stall_seconds",
                          "missed_experts",
                          "missed_bytes",
                          "expert_bytes",
                          "copy_bandwidth_measured_bytes_per_s",
                          "compute_seconds",
                          "bound_seconds",
                          "per_request"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  const double queries = r["cache_queries"].get<double>();
  const double hits = r["cache_hits"].get<double>();
  ASSERT_GT(queries, 0);
  EXPECT_LT(hits, queries) << "the budget should force misses";
  EXPECT_NEAR(r["hit_ratio"].get<double>(), hits / queries, 1e-12);
  const double needed = r["prefetch_needed"].get<double>();
  ASSERT_GT(needed, 0);
  EXPECT_NEAR(r["hot_recall"].get<double>(), r["prefetch_recalled"].get<double>() / needed, 1e-12);
  EXPECT_EQ(r["missed_bytes"].get<double>(),
            r["missed_experts"].get<double>() * r["expert_bytes"].get<double>());
  EXPECT_GE(r["bytes_h2d"].get<double>(), r["missed_bytes"].get<double>());
  const double bw = r["copy_bandwidth_measured_bytes_per_s"].get<double>();
  ASSERT_GT(bw, 0);
  const double bound =
      std::max(r["compute_seconds"].get<double>(), r["missed_bytes"].get<double>() / bw);
  EXPECT_NEAR(r["bound_seconds"].get<double>(), bound, 1e-9 * std::max(1.0, bound));
  ASSERT_TRUE(r["per_request"].is_array());
  ASSERT_EQ(r["per_request"].size(), 1u);
  EXPECT_EQ(r["per_request"][0]["completion_tokens"].get<int>(), 8);
  EXPECT_GT(r["ttft_seconds_mean"].get<double>(), 0);
}

}  // namespace
}  // namespace vismoe
