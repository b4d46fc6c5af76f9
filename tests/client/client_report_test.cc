// Load and eval report aggregation and JSON shape.
#include "client/eval_report.h"
#include "client/load_report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vismoe::client {
namespace {

using ::testing::HasSubstr;

RequestRecord Ok(double ttft, double tpot, double e2e, int tokens) {
  RequestRecord r;
  r.ttft_seconds = ttft;
  r.tpot_seconds = tpot;
  r.e2e_seconds = e2e;
  r.completion_tokens = tokens;
  r.prompt_tokens = 10;
  r.cache_queries = 10;
  r.cache_hits = 7;
  r.prefetch_needed = 4;
  r.prefetch_recalled = 3;
  r.bytes_h2d = 1000;
  r.stall_seconds = 0.5;
  return r;
}

RequestRecord Err(int code, const std::string& msg) {
  RequestRecord r;
  r.status_code = code;
  r.error_message = msg;
  r.e2e_seconds = 99;  // must not enter the latency distributions
  r.completion_tokens = 1000;
  return r;
}

TEST(LoadReportTest, AggregatesCountsRatesAndRatios) {
  const std::vector<RequestRecord> records = {Ok(0.1, 0.01, 1.0, 10), Ok(0.2, 0.02, 2.0, 20),
                                              Ok(0.3, -1, 3.0, 1),    Err(14, "down"),
                                              Err(14, "down"),        Err(3, "bad image")};
  const LoadReport r = BuildLoadReport(records, 2.0);
  EXPECT_EQ(r.sent, 6);
  EXPECT_EQ(r.completed, 3);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.errors_by_code.at("UNAVAILABLE"), 2);
  EXPECT_EQ(r.errors_by_code.at("INVALID_ARGUMENT"), 1);
  EXPECT_EQ(r.sample_errors.size(), 2u);  // distinct messages only
  EXPECT_DOUBLE_EQ(r.requests_per_second, 1.5);
  EXPECT_EQ(r.completion_tokens, 31);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_second, 15.5);
  EXPECT_EQ(r.e2e.count, 3u);
  EXPECT_DOUBLE_EQ(r.e2e.p50, 2.0);
  EXPECT_DOUBLE_EQ(r.e2e.max, 3.0);
  EXPECT_EQ(r.tpot.count, 2u);  // the one-token request has no TPOT
  ASSERT_TRUE(r.cache_hit_ratio.has_value());
  EXPECT_DOUBLE_EQ(*r.cache_hit_ratio, 21.0 / 30.0);  // sum hits / sum queries
  ASSERT_TRUE(r.hot_recall.has_value());
  EXPECT_DOUBLE_EQ(*r.hot_recall, 9.0 / 12.0);  // sum recalled / sum needed
  EXPECT_EQ(r.bytes_h2d, 3000u);
}

TEST(LoadReportTest, NoQueriesMeansNoRatio) {
  RequestRecord rec;
  rec.e2e_seconds = 1;
  const LoadReport r = BuildLoadReport({rec}, 1.0);
  EXPECT_FALSE(r.cache_hit_ratio.has_value());
  EXPECT_FALSE(r.hot_recall.has_value());
  const nlohmann::json j = LoadReportToJson(r, nlohmann::json::object());
  EXPECT_TRUE(j["server"]["cache_hit_ratio"].is_null());
  EXPECT_TRUE(j["server"]["hot_recall"].is_null());
  EXPECT_THAT(FormatLoadReport(r), HasSubstr("n/a"));
}

TEST(LoadReportTest, JsonShape) {
  const LoadReport r = BuildLoadReport({Ok(0.1, 0.01, 1.0, 10), Err(4, "late")}, 1.0);
  const nlohmann::json j = LoadReportToJson(r, {{"concurrency", 2}});
  EXPECT_EQ(j["config"]["concurrency"], 2);
  EXPECT_EQ(j["requests"]["sent"], 2);
  EXPECT_EQ(j["requests"]["completed"], 1);
  EXPECT_EQ(j["requests"]["failed"], 1);
  EXPECT_EQ(j["requests"]["errors_by_code"]["DEADLINE_EXCEEDED"], 1);
  EXPECT_TRUE(j["requests"]["sample_errors"].is_array());
  EXPECT_TRUE(j["wall_seconds"].is_number());
  for (const char* k :
       {"requests_per_second", "output_tokens_per_second", "prompt_tokens", "completion_tokens"}) {
    EXPECT_TRUE(j["throughput"][k].is_number()) << k;
  }
  for (const char* m : {"ttft", "tpot", "e2e"}) {
    for (const char* k : {"count", "mean", "min", "max", "p50", "p90", "p99"}) {
      EXPECT_TRUE(j["latency_seconds"][m][k].is_number()) << m << "." << k;
    }
  }
  for (const char* k : {"cache_queries", "cache_hits", "cache_hit_ratio", "prefetch_needed",
                        "prefetch_recalled", "hot_recall", "bytes_h2d", "stall_seconds"}) {
    EXPECT_TRUE(j["server"][k].is_number()) << k;
  }
  const std::string table = FormatLoadReport(r);
  EXPECT_THAT(table, HasSubstr("sent 2  completed 1  failed 1"));
  EXPECT_THAT(table, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(table, HasSubstr("Hot Recall 75.00%"));
}

EvalOutcome Outcome(const std::string& category, bool ok, bool correct) {
  EvalOutcome o;
  o.category = category;
  o.rpc_ok = ok;
  o.match.correct = correct;
  if (!ok) o.error = "UNAVAILABLE: down";
  return o;
}

TEST(EvalReportTest, PerCategoryAndOverall) {
  const std::vector<EvalOutcome> outcomes = {
      Outcome("color", true, true), Outcome("color", true, false), Outcome("count", true, true),
      Outcome("count", false, false), Outcome("count", true, true)};
  const EvalReport r = BuildEvalReport(outcomes);
  EXPECT_EQ(r.overall.total, 5);
  EXPECT_EQ(r.overall.correct, 3);
  EXPECT_EQ(r.overall.errors, 1);
  EXPECT_DOUBLE_EQ(r.overall.accuracy, 0.6);
  EXPECT_DOUBLE_EQ(r.categories.at("color").accuracy, 0.5);
  EXPECT_DOUBLE_EQ(r.categories.at("count").accuracy, 2.0 / 3.0);

  const nlohmann::json j = EvalReportToJson(r, outcomes, {{"data", "x"}}, true);
  EXPECT_EQ(j["overall"]["total"], 5);
  EXPECT_EQ(j["categories"]["count"]["errors"], 1);
  ASSERT_EQ(j["items"].size(), 5u);
  EXPECT_EQ(j["items"][3]["error"], "UNAVAILABLE: down");
  EXPECT_FALSE(j["items"][3]["correct"].get<bool>());
  EXPECT_FALSE(EvalReportToJson(r, outcomes, {}, false).contains("items"));
  EXPECT_THAT(FormatEvalReport(r), HasSubstr("overall"));
  EXPECT_THAT(FormatEvalReport(r), HasSubstr("60.00%"));
}

}  // namespace
}  // namespace vismoe::client
