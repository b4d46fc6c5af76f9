// Aggregation and formatting of a load-generator run: counts, throughput,
// latency percentiles and the server's offload statistics.
#ifndef VISMOE_CLIENT_LOAD_REPORT_H_
#define VISMOE_CLIENT_LOAD_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "client/percentile.h"
#include "nlohmann/json.hpp"

namespace vismoe::client {

// What one request produced; plain data so reports are testable without RPCs.
struct RequestRecord {
  int status_code = 0;        // grpc::StatusCode; 0 = OK
  std::string error_message;  // empty when OK
  double ttft_seconds = -1;   // client-side, -1 when no token arrived
  double tpot_seconds = -1;   // client-side, -1 with fewer than two tokens
  double e2e_seconds = 0;     // client-side end-to-end
  int prompt_tokens = 0;      // from the final message
  int completion_tokens = 0;
  uint64_t cache_queries = 0;
  uint64_t cache_hits = 0;
  uint64_t prefetch_needed = 0;
  uint64_t prefetch_recalled = 0;
  uint64_t bytes_h2d = 0;
  double stall_seconds = 0;
};

struct LoadReport {
  int64_t sent = 0;
  int64_t completed = 0;  // finished with status OK
  int64_t failed = 0;
  std::map<std::string, int64_t> errors_by_code;  // "UNAVAILABLE" -> count
  std::vector<std::string> sample_errors;         // first few distinct messages
  double wall_seconds = 0;
  double requests_per_second = 0;  // completed / wall
  double output_tokens_per_second = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  Distribution ttft;  // over completed requests that produced a token
  Distribution tpot;  // over completed requests with >= 2 tokens
  Distribution e2e;   // over completed requests
  uint64_t cache_queries = 0;
  uint64_t cache_hits = 0;
  std::optional<double> cache_hit_ratio;  // hits / queries; none without queries
  uint64_t prefetch_needed = 0;
  uint64_t prefetch_recalled = 0;
  std::optional<double> hot_recall;  // recalled / needed; none when nothing needed
  uint64_t bytes_h2d = 0;
  double stall_seconds = 0;
};

// Aggregates `records` of a run that took `wall_seconds`. Token and offload
// sums cover completed requests only.
LoadReport BuildLoadReport(const std::vector<RequestRecord>& records, double wall_seconds);

// JSON report: {"config": config, "requests": {...}, "throughput": {...},
// "latency_seconds": {"ttft", "tpot", "e2e"}, "server": {...}}.
nlohmann::json LoadReportToJson(const LoadReport& report, const nlohmann::json& config);

// A human-readable table.
std::string FormatLoadReport(const LoadReport& report);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_LOAD_REPORT_H_
