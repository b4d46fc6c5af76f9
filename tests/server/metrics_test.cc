// ServerMetrics: names, labels and values as served in the text exposition.
#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/http_get.h"

namespace vismoe {
namespace {

using Labels = std::map<std::string, std::string>;

// One parsed sample line: name{labels} value.
struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
};

std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    Sample s;
    const size_t space = line.rfind(' ');
    const absl::string_view head = line.substr(0, space);
    const std::string value(line.substr(space + 1));
    if (value == "NaN") {
      s.value = std::nan("");
    } else {
      EXPECT_TRUE(absl::SimpleAtod(value, &s.value)) << line;
    }
    const size_t brace = head.find('{');
    s.name = std::string(head.substr(0, brace));
    if (brace != absl::string_view::npos) {
      absl::string_view inner = head.substr(brace + 1, head.size() - brace - 2);
      for (absl::string_view kv : absl::StrSplit(inner, "\",", absl::SkipEmpty())) {
        const size_t eq = kv.find("=\"");
        absl::string_view v = kv.substr(eq + 2);
        absl::ConsumeSuffix(&v, "\"");
        s.labels[std::string(kv.substr(0, eq))] = std::string(v);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The value of the one sample with exactly this name and label set; fails
// the test (and returns -1) when there is none.
double Value(const std::string& text, const std::string& name, const Labels& labels = {}) {
  for (const Sample& s : ParseExposition(text)) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  ADD_FAILURE() << "no sample " << name << " with the given labels in:\n" << text;
  return -1;
}

bool HasSample(const std::string& text, const std::string& name, const Labels& labels) {
  for (const Sample& s : ParseExposition(text)) {
    if (s.name == name && s.labels == labels) return true;
  }
  return false;
}

std::unique_ptr<ServerMetrics> MakeMetrics(ServerMetrics::Options o = {}) {
  auto m = ServerMetrics::Create(o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(ServerMetricsTest, EveryDesignMetricIsDeclared) {
  auto m = MakeMetrics();
  ASSERT_NE(m, nullptr);
  const std::string text = m->Serialize();
  for (const char* name : {"vismoe_expert_cache_queries_total",
                           "vismoe_expert_cache_hits_total",
                           "vismoe_prefetch_needed_total",
                           "vismoe_prefetch_recalled_total",
                           "vismoe_prefetch_issued_total",
                           "vismoe_prefetch_used_total",
                           "vismoe_preloaded_experts_total",
                           "vismoe_preloaded_experts_used_total",
                           "vismoe_expert_bytes_h2d_total",
                           "vismoe_transfer_stall_seconds_total",
                           "vismoe_generated_tokens_total",
                           "vismoe_prompt_tokens_total",
                           "vismoe_visual_tokens_pruned_total",
                           "vismoe_experts_skipped_total",
                           "vismoe_experts_committed_total",
                           "vismoe_experts_host_computed_total",
                           "vismoe_expert_bytes_not_copied_total",
                           "vismoe_speculative_executions_total",
                           "vismoe_requests_total",
                           "vismoe_expert_cache_hit_ratio",
                           "vismoe_prefetch_recall",
                           "vismoe_slab_cache_slots",
                           "vismoe_queue_depth",
                           "vismoe_running_requests",
                           "vismoe_time_to_first_token_seconds",
                           "vismoe_time_per_output_token_seconds",
                           "vismoe_request_duration_seconds",
                           "vismoe_image_decode_seconds",
                           "vismoe_compression_seconds",
                           "vismoe_predictor_seconds",
                           "vismoe_preemptions_total"}) {
    EXPECT_TRUE(absl::StrContains(text, std::string("# TYPE ") + name + " ")) << name;
  }
  // Pre-created zero series so PromQL ratios have data before traffic.
  EXPECT_EQ(
      Value(text, "vismoe_expert_cache_queries_total", {{"phase", "prefill"}, {"layer", "0"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_expert_cache_hits_total", {{"phase", "decode"}, {"layer", "0"}}),
            0);
  EXPECT_EQ(Value(text, "vismoe_slab_cache_slots", {{"state", "speculative"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_prompt_tokens_total", {{"modality", "image"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_experts_skipped_total", {{"modality", "text"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_experts_skipped_total", {{"modality", "image"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_experts_committed_total", {{"choice", "router"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_experts_committed_total", {{"choice", "substitute"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_speculative_executions_total", {{"kept", "true"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_speculative_executions_total", {{"kept", "false"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_requests_total", {{"api", "grpc"}, {"status", "ok"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_requests_total", {{"api", "http"}, {"status", "ok"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_time_to_first_token_seconds_count", {{"api", "http"}}), 0);
  EXPECT_EQ(Value(text, "vismoe_preemptions_total"), 0);
  // gpu_memory_bytes{region} appears once the engine reports a region.
  EXPECT_FALSE(absl::StrContains(text, "vismoe_gpu_memory_bytes{"));
  EXPECT_TRUE(std::isnan(Value(text, "vismoe_expert_cache_hit_ratio")));
  EXPECT_TRUE(std::isnan(Value(text, "vismoe_prefetch_recall")));
  EXPECT_EQ(m->metrics_port(), 0);
}

TEST(ServerMetricsTest, ExpertCacheCountersByPhaseAndLayer) {
  auto m = MakeMetrics();
  ASSERT_NE(m, nullptr);
  for (int i = 0; i < 10; ++i) m->OnExpertQuery(Phase::kPrefill, 3, /*hit=*/i < 7);
  for (int i = 0; i < 4; ++i) m->OnExpertQuery(Phase::kDecode, 3, /*hit=*/i == 0);
  m->OnExpertQuery(Phase::kDecode, 12, true);
  m->OnExpertQuery(Phase::kDecode, -1, true);  // ignored: no such layer
  const std::string t = m->Serialize();
  EXPECT_EQ(Value(t, "vismoe_expert_cache_queries_total", {{"phase", "prefill"}, {"layer", "3"}}),
            10);
  EXPECT_EQ(Value(t, "vismoe_expert_cache_hits_total", {{"phase", "prefill"}, {"layer", "3"}}), 7);
  EXPECT_EQ(Value(t, "vismoe_expert_cache_queries_total", {{"phase", "decode"}, {"layer", "3"}}),
            4);
  EXPECT_EQ(Value(t, "vismoe_expert_cache_hits_total", {{"phase", "decode"}, {"layer", "3"}}), 1);
  EXPECT_EQ(Value(t, "vismoe_expert_cache_hits_total", {{"phase", "decode"}, {"layer", "12"}}), 1);
  // Layers in between are not invented.
  EXPECT_FALSE(
      HasSample(t, "vismoe_expert_cache_queries_total", {{"phase", "decode"}, {"layer", "5"}}));
  // Window ratio: 7 + 1 + 1 hits of 15 queries.
  EXPECT_DOUBLE_EQ(Value(t, "vismoe_expert_cache_hit_ratio"), 9.0 / 15.0);

  m->DeclareLayers(6);
  EXPECT_EQ(Value(m->Serialize(), "vismoe_expert_cache_queries_total",
                  {{"phase", "decode"}, {"layer", "5"}}),
            0);
}

TEST(ServerMetricsTest, PrefetchTransferAndPolicyCounters) {
  auto m = MakeMetrics();
  ASSERT_NE(m, nullptr);
  m->OnPrefetchNeeded(4, true);
  m->OnPrefetchNeeded(4, true);
  m->OnPrefetchNeeded(5, true);
  m->OnPrefetchNeeded(5, false);
  m->OnPrefetchIssued(20);
  m->OnPrefetchUsed(15);
  m->OnPreloadIssued(12);
  m->OnPreloadIssued(4);
  m->OnPreloadUsed(9);
  m->OnBytesHostToDevice(3u << 20);
  m->OnBytesHostToDevice(1u << 20);
  m->OnTransferStall(0.25);
  m->OnTransferStall(-1);  // broken timer: dropped
  m->OnVisualTokensPruned(128);
  m->OnExpertsHostComputed(3, 3000);
  m->OnExpertsHostComputed(1, 1000);
  m->OnExpertsSkipped(TokenModality::kText, 3);
  m->OnExpertsSkipped(TokenModality::kVisual, 40);
  m->OnExpertsSkipped(TokenModality::kVisual, 2);
  m->OnExpertsCommitted(7, 5);
  m->OnExpertsCommitted(1, 0);
  m->OnSpeculativeExecutions(6, 2);
  m->OnSpeculativeExecutions(3, 0);
  m->OnCompressionTime(0.0004);
  m->OnPredictorTime(0.00002);
  m->OnPredictorTime(0.00003);
  const std::string t = m->Serialize();
  EXPECT_EQ(Value(t, "vismoe_prefetch_needed_total"), 4);
  EXPECT_EQ(Value(t, "vismoe_prefetch_recalled_total"), 3);
  EXPECT_DOUBLE_EQ(Value(t, "vismoe_prefetch_recall"), 0.75);
  EXPECT_EQ(Value(t, "vismoe_prefetch_issued_total"), 20);
  EXPECT_EQ(Value(t, "vismoe_prefetch_used_total"), 15);
  EXPECT_EQ(Value(t, "vismoe_preloaded_experts_total"), 16);
  EXPECT_EQ(Value(t, "vismoe_preloaded_experts_used_total"), 9);
  EXPECT_EQ(Value(t, "vismoe_expert_bytes_h2d_total"), 4 << 20);
  EXPECT_DOUBLE_EQ(Value(t, "vismoe_transfer_stall_seconds_total"), 0.25);
  EXPECT_EQ(Value(t, "vismoe_visual_tokens_pruned_total"), 128);
  EXPECT_EQ(Value(t, "vismoe_experts_host_computed_total"), 4);
  EXPECT_EQ(Value(t, "vismoe_expert_bytes_not_copied_total"), 4000);
  EXPECT_EQ(Value(t, "vismoe_experts_skipped_total", {{"modality", "text"}}), 3);
  EXPECT_EQ(Value(t, "vismoe_experts_skipped_total", {{"modality", "image"}}), 42);
  EXPECT_EQ(Value(t, "vismoe_experts_committed_total", {{"choice", "router"}}), 8);
  EXPECT_EQ(Value(t, "vismoe_experts_committed_total", {{"choice", "substitute"}}), 5);
  EXPECT_EQ(Value(t, "vismoe_speculative_executions_total", {{"kept", "true"}}), 9);
  EXPECT_EQ(Value(t, "vismoe_speculative_executions_total", {{"kept", "false"}}), 2);
  EXPECT_EQ(Value(t, "vismoe_compression_seconds_count"), 1);
  EXPECT_EQ(Value(t, "vismoe_compression_seconds_bucket", {{"le", "0.0005"}}), 1);
  EXPECT_EQ(Value(t, "vismoe_compression_seconds_bucket", {{"le", "0.00025"}}), 0);
  EXPECT_EQ(Value(t, "vismoe_predictor_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(Value(t, "vismoe_predictor_seconds_sum"), 0.00005);
}

TEST(ServerMetricsTest, GaugesForSlotsMemoryAndAdmission) {
  auto m = MakeMetrics();
  ASSERT_NE(m, nullptr);
  m->SetSlotCount(SlotState::kFree, 3);
  m->SetSlotCount(SlotState::kRequired, 20);
  m->SetSlotCount(SlotState::kExpired, 9);
  m->SetSlotCount(SlotState::kExpired, 7);
  m->SetMemoryRegion("resident", 1000);
  m->SetMemoryRegion(std::string_view("slab_cache"), 5000);
  m->SetQueueDepth(4);
  m->SetRunningRequests(2);
  m->SetQueueDepth(3);
  const std::string t = m->Serialize();
  EXPECT_EQ(Value(t, "vismoe_slab_cache_slots", {{"state", "free"}}), 3);
  EXPECT_EQ(Value(t, "vismoe_slab_cache_slots", {{"state", "required"}}), 20);
  EXPECT_EQ(Value(t, "vismoe_slab_cache_slots", {{"state", "speculative"}}), 0);
  EXPECT_EQ(Value(t, "vismoe_slab_cache_slots", {{"state", "expired"}}), 7);
  EXPECT_EQ(Value(t, "vismoe_gpu_memory_bytes", {{"region", "resident"}}), 1000);
  EXPECT_EQ(Value(t, "vismoe_gpu_memory_bytes", {{"region", "slab_cache"}}), 5000);
  EXPECT_EQ(Value(t, "vismoe_queue_depth"), 3);
  EXPECT_EQ(Value(t, "vismoe_running_requests"), 2);
}

TEST(ServerMetricsTest, KvBlocksAndPreemptions) {
  auto m = MakeMetrics();
  ASSERT_NE(m, nullptr);
  m->SetKvBlocks(12, 64);
  m->OnPreemption();
  m->OnPreemption();
  m->SetKvBlocks(5, 64);
  const std::string t = m->Serialize();
  EXPECT_EQ(Value(t, "vismoe_kv_blocks", {{"state", "used"}}), 5);
  EXPECT_EQ(Value(t, "vismoe_kv_blocks", {{"state", "free"}}), 59);
  EXPECT_EQ(Value(t, "vismoe_preemptions_total"), 2);
}

TEST(ServerMetricsTest, RequestOutcomesAndResults) {
  auto m = MakeMetrics();
  ASSERT_NE(m, nullptr);
  using Api = ServerMetrics::Api;
  m->OnRequestFinished(Api::kGrpc, "ok");
  m->OnRequestFinished(Api::kGrpc, "ok");
  m->OnRequestFinished(Api::kGrpc, "invalid_argument");
  m->OnRequestFinished(Api::kHttp, "ok");
  GenerateResult r;
  r.usage.prompt_tokens = 556;  // 44 text + 512 visual, 256 of them kept
  r.usage.visual_tokens_before = 512;
  r.usage.visual_tokens_after = 256;
  r.usage.completion_tokens = 11;
  r.timings.ttft_seconds = 0.3;
  r.timings.tpot_seconds = 0.05;
  r.timings.total_seconds = 0.8;
  m->ObserveResult(Api::kGrpc, r);
  GenerateResult cancelled;  // cancelled before its first token
  cancelled.usage.prompt_tokens = 10;
  cancelled.timings.total_seconds = 0.01;
  m->ObserveResult(Api::kGrpc, cancelled);
  GenerateResult http = r;
  http.timings.ttft_seconds = 2;
  m->ObserveResult(Api::kHttp, http);
  m->ObserveImageDecode(0.004);
  const std::string t = m->Serialize();
  const Labels grpc = {{"api", "grpc"}};
  EXPECT_EQ(Value(t, "vismoe_requests_total", {{"api", "grpc"}, {"status", "ok"}}), 2);
  EXPECT_EQ(Value(t, "vismoe_requests_total", {{"api", "grpc"}, {"status", "invalid_argument"}}),
            1);
  EXPECT_EQ(Value(t, "vismoe_requests_total", {{"api", "http"}, {"status", "ok"}}), 1);
  EXPECT_EQ(Value(t, "vismoe_requests_total", {{"api", "http"}, {"status", "cancelled"}}), 0);
  EXPECT_EQ(Value(t, "vismoe_generated_tokens_total"), 22);
  EXPECT_EQ(Value(t, "vismoe_prompt_tokens_total", {{"modality", "text"}}), 44 + 10 + 44);
  EXPECT_EQ(Value(t, "vismoe_prompt_tokens_total", {{"modality", "image"}}), 512);
  EXPECT_EQ(Value(t, "vismoe_time_to_first_token_seconds_count", grpc), 1);
  EXPECT_DOUBLE_EQ(Value(t, "vismoe_time_to_first_token_seconds_sum", grpc), 0.3);
  EXPECT_EQ(
      Value(t, "vismoe_time_to_first_token_seconds_bucket", {{"api", "grpc"}, {"le", "0.25"}}), 0);
  EXPECT_EQ(Value(t, "vismoe_time_to_first_token_seconds_bucket", {{"api", "grpc"}, {"le", "0.5"}}),
            1);
  EXPECT_EQ(Value(t, "vismoe_time_per_output_token_seconds_count", grpc), 1);
  EXPECT_EQ(Value(t, "vismoe_request_duration_seconds_count", grpc), 2);
  EXPECT_DOUBLE_EQ(Value(t, "vismoe_time_to_first_token_seconds_sum", {{"api", "http"}}), 2);
  EXPECT_EQ(Value(t, "vismoe_request_duration_seconds_count", {{"api", "http"}}), 1);
  EXPECT_EQ(Value(t, "vismoe_image_decode_seconds_count"), 1);
  EXPECT_EQ(Value(t, "vismoe_image_decode_seconds_bucket", {{"le", "+Inf"}}), 1);
}

TEST(ServerMetricsTest, SlidingWindowForgetsOldEvents) {
  absl::Mutex mu;
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  ServerMetrics::Options o;
  o.window = absl::Seconds(10);
  o.clock = [&] {
    absl::MutexLock l(&mu);
    return now;
  };
  auto advance = [&](absl::Duration d) {
    absl::MutexLock l(&mu);
    now += d;
  };
  auto m = MakeMetrics(o);
  ASSERT_NE(m, nullptr);
  for (int i = 0; i < 4; ++i) m->OnExpertQuery(Phase::kDecode, 7, false);  // t = 0
  m->OnPrefetchNeeded(7, false);
  advance(absl::Seconds(5));
  for (int i = 0; i < 4; ++i) m->OnExpertQuery(Phase::kDecode, 7, true);  // t = 5
  m->OnPrefetchNeeded(7, true);
  EXPECT_DOUBLE_EQ(Value(m->Serialize(), "vismoe_expert_cache_hit_ratio"), 0.5);
  EXPECT_DOUBLE_EQ(Value(m->Serialize(), "vismoe_prefetch_recall"), 0.5);
  advance(absl::Seconds(5));  // t = 10: the t = 0 bucket left the window
  EXPECT_DOUBLE_EQ(Value(m->Serialize(), "vismoe_expert_cache_hit_ratio"), 1.0);
  EXPECT_DOUBLE_EQ(Value(m->Serialize(), "vismoe_prefetch_recall"), 1.0);
  advance(absl::Seconds(10));  // nothing left
  const std::string t = m->Serialize();
  EXPECT_TRUE(std::isnan(Value(t, "vismoe_expert_cache_hit_ratio")));
  // Counters are cumulative; only the convenience gauges forget.
  EXPECT_EQ(Value(t, "vismoe_expert_cache_queries_total", {{"phase", "decode"}, {"layer", "7"}}),
            8);
  // A bucket slot reused by a later second starts from zero (t = 20 maps onto t = 0's slot).
  m->OnExpertQuery(Phase::kDecode, 7, true);
  EXPECT_DOUBLE_EQ(Value(m->Serialize(), "vismoe_expert_cache_hit_ratio"), 1.0);
}

TEST(ServerMetricsTest, ConcurrentUpdatesAreAllCounted) {
  auto m = MakeMetrics();
  ASSERT_NE(m, nullptr);
  constexpr int kThreads = 4, kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kPerThread; ++i) {
        m->OnExpertQuery(i % 2 ? Phase::kDecode : Phase::kPrefill, (i + t) % 48, i % 4 != 0);
        m->OnPrefetchNeeded(i % 48, i % 2 == 0);
        if (i % 100 == 0) m->Serialize();
      }
    });
  }
  for (auto& th : threads) th.join();
  double queries = 0, hits = 0;
  for (const Sample& s : ParseExposition(m->Serialize())) {
    if (s.name == "vismoe_expert_cache_queries_total") queries += s.value;
    if (s.name == "vismoe_expert_cache_hits_total") hits += s.value;
  }
  EXPECT_EQ(queries, kThreads * kPerThread);
  EXPECT_EQ(hits, kThreads * kPerThread * 3 / 4);
  EXPECT_EQ(Value(m->Serialize(), "vismoe_prefetch_needed_total"), kThreads * kPerThread);
}

TEST(ServerMetricsTest, RejectsBadOptions) {
  for (const char* addr : {"9464", ":9464", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:70000"}) {
    auto m = ServerMetrics::Create(std::string(addr));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << addr;
  }
  ServerMetrics::Options o;
  o.window = absl::Milliseconds(1500);
  EXPECT_EQ(ServerMetrics::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.window = absl::ZeroDuration();
  EXPECT_EQ(ServerMetrics::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServerMetricsTest, ExposerServesMetricsOverHttp) {
  auto m = ServerMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(m.ok()) << m.status();
  const int port = (*m)->metrics_port();
  ASSERT_GT(port, 0);
  (*m)->OnExpertQuery(Phase::kDecode, 2, true);
  (*m)->SetQueueDepth(5);
  auto resp = testing::HttpGet("127.0.0.1", port, "/metrics");
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->status, 200);
  EXPECT_EQ(Value(resp->body, "vismoe_queue_depth"), 5);
  EXPECT_EQ(
      Value(resp->body, "vismoe_expert_cache_hits_total", {{"phase", "decode"}, {"layer", "2"}}),
      1);
  EXPECT_DOUBLE_EQ(Value(resp->body, "vismoe_expert_cache_hit_ratio"), 1.0);

  // The port is taken: a second exposer on it fails cleanly.
  auto again = ServerMetrics::Create("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();

  // Destroying the metrics stops the exposer.
  m->reset();
  EXPECT_FALSE(testing::HttpGet("127.0.0.1", port, "/metrics", absl::Seconds(2)).ok());
}

// An open TCP connection to 127.0.0.1:port that has sent `bytes` and then
// nothing more; closed when destroyed. -1 when the connect failed.
class StalledConnection {
 public:
  StalledConnection(int port, const std::string& bytes) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        (!bytes.empty() && write(fd_, bytes.data(), bytes.size()) < 0)) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~StalledConnection() {
    if (fd_ >= 0) close(fd_);
  }
  StalledConnection(const StalledConnection&) = delete;
  StalledConnection& operator=(const StalledConnection&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// Idle connections and half-sent requests must not block scrapes: there are
// more workers than such clients, and they are dropped after the read timeout.
TEST(ServerMetricsTest, IdleAndHalfRequestConnectionsDoNotBlockScrapes) {
  auto m = ServerMetrics::Create("127.0.0.1:0");
  ASSERT_TRUE(m.ok()) << m.status();
  const int port = (*m)->metrics_port();
  std::vector<std::unique_ptr<StalledConnection>> stalled;
  for (int i = 0; i < 3; ++i) {
    stalled.push_back(std::make_unique<StalledConnection>(port, ""));
    stalled.push_back(
        std::make_unique<StalledConnection>(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  }
  for (const auto& c : stalled) ASSERT_TRUE(c->ok());
  absl::SleepFor(absl::Milliseconds(200));  // let the exposer accept them all
  const absl::Time start = absl::Now();
  auto resp = testing::HttpGet("127.0.0.1", port, "/metrics", absl::Seconds(5));
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));

  // Twice as many stalled clients as workers: scrapes still get through once
  // the read timeout has dropped them.
  while (stalled.size() < 2 * ServerMetrics::kExposerThreads) {
    stalled.push_back(std::make_unique<StalledConnection>(port, ""));
  }
  resp = testing::HttpGet("127.0.0.1", port, "/metrics",
                          absl::Milliseconds(3 * ServerMetrics::kExposerReadTimeoutMs + 2000));
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->status, 200);
}

}  // namespace
}  // namespace vismoe
