// A real Prometheus scrapes (1) a running vismoe-server on the tiny model under
// a memory budget, serving real image and text requests, and (2) a bare
// ServerMetrics exposer fed a known event stream. In both, every PromQL
// expression of the Grafana dashboard and the alert rules in deploy/ must
// return data, and the hit ratio read back through PromQL must be the one the
// process counted.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/metrics.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/http_get.h"
#include "tests/testing/paths.h"
#include "tests/testing/prometheus_api.h"

namespace vismoe {
namespace {

using testing::PromQuery;

// What the feed reported, to compare with what Prometheus computes.
struct FedTotals {
  uint64_t queries = 0, hits = 0, needed = 0, recalled = 0;
};

// A realistic event stream of a serving process, fed for `duration` in
// rounds of 100 ms: an 8-layer model with 2 pinned layers (always hit) and
// 6 offloaded layers (3 of 4 lookups hit), prefill and decode, prefetching,
// transfers, policy timings, requests finishing with several statuses.
// The one place to change if the feed becomes a real vismoe-server.
FedTotals FeedRealisticTraffic(ServerMetrics& m, absl::Duration duration) {
  FedTotals t;
  m.SetMemoryRegion("resident", 6ll << 30);
  m.SetMemoryRegion("pinned_prefix", 4ll << 30);
  m.SetMemoryRegion("slab_cache", 10ll << 30);
  m.SetMemoryRegion("activations", 1ll << 30);
  m.SetMemoryRegion("kv_cache", 2ll << 30);
  const char* const kStatuses[] = {
      "ok", "ok",       "ok", "ok", "invalid_argument", "ok", "resource_exhausted",
      "ok", "internal", "ok"};
  const absl::Time end = absl::Now() + duration;
  for (int round = 0; absl::Now() < end; ++round) {
    m.SetQueueDepth(8 + round % 5);
    m.SetRunningRequests(2);
    const Phase phase = round % 4 == 0 ? Phase::kPrefill : Phase::kDecode;
    for (int layer = 0; layer < 8; ++layer) {
      for (int k = 0; k < 8; ++k) {  // top-8 routing
        const bool hit = layer < 2 || k % 4 != 0;
        m.OnExpertQuery(phase, layer, hit);
        ++t.queries;
        t.hits += hit;
        if (layer >= 2) {
          const bool recalled = k % 5 != 0;
          m.OnPrefetchNeeded(layer, recalled);
          ++t.needed;
          t.recalled += recalled;
        }
      }
    }
    m.OnPrefetchIssued(20);
    m.OnPrefetchUsed(14);
    m.OnBytesHostToDevice(12ull * (9ull << 20));  // 12 experts of 9 MiB
    m.OnTransferStall(0.004);
    m.OnPredictorTime(0.00015);
    m.SetSlotCount(SlotState::kFree, 4);
    m.SetSlotCount(SlotState::kRequired, 40 + round % 3);
    m.SetSlotCount(SlotState::kSpeculative, 30);
    m.SetSlotCount(SlotState::kExpired, 26 - round % 3);
    if (phase == Phase::kPrefill) {
      m.ObserveImageDecode(0.006);
      m.OnCompressionTime(0.0008);
      m.OnVisualTokensPruned(256);
      const char* status = kStatuses[(round / 4) % 10];
      m.OnRequestFinished(ServerMetrics::Api::kGrpc, status);
      GenerateResult r;
      r.usage.prompt_tokens = 300;
      r.usage.visual_tokens_before = 512;
      r.usage.visual_tokens_after = 256;
      r.usage.completion_tokens = std::string(status) == "ok" ? 64 : 0;
      r.timings.ttft_seconds = 0.4 + 0.01 * (round % 7);
      r.timings.tpot_seconds = 0.045;
      r.timings.total_seconds = 3.2;
      m.ObserveResult(ServerMetrics::Api::kGrpc, r);
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return t;
}

// A scratch directory removed (recursively, best effort) at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "vismoe_prom_XXXXXX";
    path_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~TempDir() {
    if (!path_.empty()) {
      testing::RunToCompletion({"rm", "-rf", path_}, "/dev/null", absl::Seconds(30)).IgnoreError();
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Polls `promql` until `pred` holds for its result or the deadline passes.
template <typename Pred>
bool WaitForQuery(int port, const std::string& promql, absl::Duration timeout, Pred pred) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    auto r = PromQuery(port, promql);
    if (r.ok() && pred(*r)) return true;
    absl::SleepFor(absl::Milliseconds(250));
  }
  return false;
}

double Scalar(int port, const std::string& promql) {
  auto r = PromQuery(port, promql);
  EXPECT_TRUE(r.ok()) << promql << ": " << r.status();
  if (!r.ok() || r->size() != 1) {
    ADD_FAILURE() << promql << " did not return exactly one sample";
    return std::nan("");
  }
  return (*r)[0].value;
}

// A Prometheus child process scraping 127.0.0.1:`target_port` every second,
// with the alert rules of deploy/ loaded; waits (bounded) for a first scrape.
struct RunningPrometheus {
  std::unique_ptr<testing::ChildProcess> child;
  int port = 0;
};

void StartPrometheus(const std::string& dir, int target_port, RunningPrometheus* out) {
  const std::optional<std::string> prometheus = testing::FindOnPath("prometheus");
  ASSERT_TRUE(prometheus.has_value())
      << "the 'prometheus' binary is not on PATH; install it with deploy/install-deps.sh";
  const std::string alerts = testing::SourceDir() + "/deploy/prometheus/alerts.yml";
  const std::string config = dir + "/prometheus.yml";
  {
    std::ofstream cfg(config);
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "rule_files:\n  - \"" << alerts << "\"\n"
        << "scrape_configs:\n  - job_name: vismoe\n    static_configs:\n"
        << "      - targets: [\"127.0.0.1:" << target_port << "\"]\n";
    ASSERT_TRUE(cfg.good());
  }
  auto port = testing::PickUnusedLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  auto child = testing::ChildProcess::Start(
      {*prometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir + "/data",
       absl::StrCat("--web.listen-address=127.0.0.1:", *port)},
      dir + "/prometheus.log");
  ASSERT_TRUE(child.ok()) << child.status();
  out->child = std::make_unique<testing::ChildProcess>(std::move(*child));
  out->port = *port;
  const bool up = WaitForQuery(out->port, "up{job=\"vismoe\"} == 1", absl::Seconds(60),
                               [](const auto& r) { return !r.empty(); });
  ASSERT_TRUE(up) << "Prometheus never scraped the target; its log:\n" << out->child->Log();
}

// Waits until Prometheus has scraped `queries` expert lookups in total.
void WaitForQueries(const RunningPrometheus& prom, double queries) {
  ASSERT_TRUE(WaitForQuery(prom.port, "sum(vismoe_expert_cache_queries_total)", absl::Seconds(30),
                           [&](const auto& r) { return r.size() == 1 && r[0].value == queries; }))
      << "the last scrape never caught up with " << queries << " queries; log:\n"
      << prom.child->Log();
}

// Every dashboard expression returns data; every alert rule is loaded,
// evaluates cleanly, and each operand of its condition returns data (the
// condition itself is empty while not firing); a typo'd name returns nothing.
void CheckDashboardAndAlerts(int p) {
  const std::string alerts = testing::SourceDir() + "/deploy/prometheus/alerts.yml";
  // Every dashboard expression returns data.
  auto exprs = testing::DashboardExpressions(
      testing::SourceDir() + "/deploy/grafana/dashboards/vismoe.json", "1m");
  ASSERT_TRUE(exprs.ok()) << exprs.status();
  EXPECT_GE(exprs->size(), 20u);
  for (const std::string& e : *exprs) {
    auto r = PromQuery(p, e);
    ASSERT_TRUE(r.ok()) << "dashboard query failed: " << e << "\n" << r.status();
    EXPECT_FALSE(r->empty()) << "dashboard query returned no data: " << e;
  }

  // Every alert rule is loaded, evaluates cleanly, and each operand of its
  // condition returns data (the condition itself is empty while not firing).
  auto alerts_text = testing::ReadFileToString(alerts);
  ASSERT_TRUE(alerts_text.ok()) << alerts_text.status();
  size_t declared = 0;
  for (absl::string_view line : absl::StrSplit(*alerts_text, '\n')) {
    if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "- alert:")) ++declared;
  }
  nlohmann::json rules;
  ASSERT_TRUE(WaitForQuery(p, "vector(1)", absl::Seconds(20),
                           [&](const auto&) {
                             auto data = testing::PromApi(p, "rules");
                             if (!data.ok()) return false;
                             size_t evaluated = 0;
                             for (const auto& g : (*data)["groups"]) {
                               for (const auto& rule : g["rules"]) {
                                 if (rule.value("health", "") == "ok") ++evaluated;
                               }
                             }
                             rules = *data;
                             return evaluated == declared;
                           }))
      << "not every alert rule evaluated with health ok: " << rules.dump(2);
  size_t checked = 0;
  for (const auto& g : rules["groups"]) {
    for (const auto& rule : g["rules"]) {
      const std::string q = rule.value("query", "");
      auto whole = PromQuery(p, q);
      EXPECT_TRUE(whole.ok()) << rule.value("name", "") << ": " << whole.status();
      const std::vector<std::string> operands = testing::TopLevelOperands(q);
      EXPECT_FALSE(operands.empty()) << q;
      for (const std::string& o : operands) {
        auto r = PromQuery(p, o);
        ASSERT_TRUE(r.ok()) << rule.value("name", "") << ": " << o << "\n" << r.status();
        EXPECT_FALSE(r->empty()) << "alert " << rule.value("name", "")
                                 << ": operand returned no data: " << o;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, declared);
  EXPECT_GE(declared, 3u);

  // A typo'd metric name is caught by the same check.
  auto typo = PromQuery(p, "sum(rate(vismoe_expert_cache_hit_total[1m]))");
  ASSERT_TRUE(typo.ok());
  EXPECT_TRUE(typo->empty());
}

TEST(MetricsPrometheusE2eTest, DashboardAndAlertQueriesReturnDataOnAKnownFeed) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto metrics = ServerMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ServerMetrics& m = **metrics;
  RunningPrometheus prom;
  ASSERT_NO_FATAL_FAILURE(StartPrometheus(dir.path(), m.metrics_port(), &prom));
  const int p = prom.port;

  const FedTotals fed = FeedRealisticTraffic(m, absl::Seconds(5));
  ASSERT_NO_FATAL_FAILURE(WaitForQueries(prom, static_cast<double>(fed.queries)));
  // The values read back are the values fed.
  const double fed_ratio = static_cast<double>(fed.hits) / static_cast<double>(fed.queries);
  const double fed_recall = static_cast<double>(fed.recalled) / static_cast<double>(fed.needed);
  EXPECT_DOUBLE_EQ(
      Scalar(p, "sum(vismoe_expert_cache_hits_total) / sum(vismoe_expert_cache_queries_total)"),
      fed_ratio);
  EXPECT_DOUBLE_EQ(Scalar(p, "vismoe_expert_cache_hit_ratio"), fed_ratio);
  EXPECT_DOUBLE_EQ(Scalar(p, "vismoe_prefetch_recall"), fed_recall);
  EXPECT_NEAR(Scalar(p,
                     "sum(rate(vismoe_expert_cache_hits_total[1m])) / "
                     "sum(rate(vismoe_expert_cache_queries_total[1m]))"),
              fed_ratio, 0.03);
  EXPECT_NEAR(Scalar(p,
                     "sum(rate(vismoe_prefetch_recalled_total[1m])) / "
                     "sum(rate(vismoe_prefetch_needed_total[1m]))"),
              fed_recall, 0.03);

  CheckDashboardAndAlerts(p);
  prom.child->Stop();
  EXPECT_FALSE(prom.child->Running());
}

// The sum of one metric family (all label values) in a text exposition.
double FamilySum(const std::string& exposition, const std::string& family) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::StartsWith(line, family)) continue;
    const absl::string_view rest = line.substr(family.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;  // a longer name
    const size_t space = line.rfind(' ');
    sum += std::stod(std::string(line.substr(space + 1)));
  }
  return sum;
}

TEST(MetricsPrometheusE2eTest, RunningServerDashboardAndAlertQueriesReturnData) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // The tiny model under a budget that pins one MoE layer and leaves a small
  // slab cache, with affinity compression: every offload and policy metric
  // moves. 12.5 MB = resident + 8 MiB KV cache + pinned layer + 30 slabs.
  server::ServerOptions o = testing::LoopbackOptions(testing::TinyModelDir());
  o.backend = "cpu";
  o.engine_threads = 2;
  o.metrics_listen = "127.0.0.1:0";
  o.gpu_memory_budget = 12'500'000;
  o.max_context_tokens = 4096;
  o.pinned_layers = 1;
  o.copy_bandwidth = 200'000'000;
  o.eviction = "guarded";
  o.token_compressor = "affinity";
  o.keep_ratio = 0.5;
  auto server = server::VismoeServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->LoadModel().ok());
  RunningPrometheus prom;
  ASSERT_NO_FATAL_FAILURE(StartPrometheus(dir.path(), (*server)->metrics()->metrics_port(), &prom));
  const int p = prom.port;

  // Real traffic over gRPC: image and text requests for a few seconds (so
  // rate() windows hold several scrapes), plus one rejected request.
  auto stub = testing::MakeStub((*server)->port());
  const std::string png = testing::EncodePng(testing::TestPicture(96, 64, 3));
  int sent_ok = 0;
  const absl::Time end = absl::Now() + absl::Seconds(5);
  for (int i = 0; absl::Now() < end || i < 3; ++i) {
    v1::GenerateRequest r = testing::TextRequest(absl::StrCat("Describe picture ", i), 4);
    if (i % 2 == 0) {
      r.mutable_messages(0)->mutable_parts()->Add()->mutable_image()->set_data(png);
    }
    testing::StreamResult got = testing::RunGenerate(*stub, r);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    ++sent_ok;
  }
  v1::GenerateRequest bad = testing::TextRequest("too many tokens", 1);
  bad.mutable_sampling()->set_max_new_tokens(1 << 30);
  EXPECT_EQ(testing::RunGenerate(*stub, bad).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  const std::string exposition = (*server)->metrics()->Serialize();
  const double queries = FamilySum(exposition, "vismoe_expert_cache_queries_total");
  const double hits = FamilySum(exposition, "vismoe_expert_cache_hits_total");
  ASSERT_GT(queries, 0);
  ASSERT_LT(hits, queries) << "the budget should force cache misses";
  ASSERT_NO_FATAL_FAILURE(WaitForQueries(prom, queries));

  // What Prometheus computes is what the server counted.
  EXPECT_DOUBLE_EQ(
      Scalar(p, "sum(vismoe_expert_cache_hits_total) / sum(vismoe_expert_cache_queries_total)"),
      hits / queries);
  EXPECT_DOUBLE_EQ(Scalar(p, "sum(vismoe_requests_total{status=\"ok\"})"), sent_ok);
  EXPECT_DOUBLE_EQ(Scalar(p, "sum(vismoe_requests_total{status=\"invalid_argument\"})"), 1);
  EXPECT_GT(Scalar(p, "sum(vismoe_visual_tokens_pruned_total)"), 0);
  EXPECT_GT(Scalar(p, "sum(vismoe_expert_bytes_h2d_total)"), 0);
  CheckDashboardAndAlerts(p);
  prom.child->Stop();
  EXPECT_FALSE(prom.child->Running());
}

TEST(TopLevelOperandsTest, SplitsComparisonsAndSetOperators) {
  EXPECT_EQ(testing::TopLevelOperands("up{job=\"vismoe\"} == 0"),
            std::vector<std::string>{"up{job=\"vismoe\"}"});
  EXPECT_EQ(testing::TopLevelOperands("sum(a{x=~\"a|b\"}) / sum(b) < 0.5 and sum(b) > 1"),
            (std::vector<std::string>{"sum(a{x=~\"a|b\"}) / sum(b)", "sum(b)"}));
  EXPECT_EQ(testing::TopLevelOperands("min_over_time(q[5m]) >= 8"),
            std::vector<std::string>{"min_over_time(q[5m])"});
  EXPECT_EQ(testing::TopLevelOperands("rate(x[5m]) or vector(0)"),
            (std::vector<std::string>{"rate(x[5m])", "vector(0)"}));
  EXPECT_EQ(testing::TopLevelOperands("count(x > 3)"), std::vector<std::string>{"count(x > 3)"});
}

}  // namespace
}  // namespace vismoe
