#include "client/load_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/rpc_error.h"

namespace vismoe::client {
namespace {

constexpr size_t kMaxSampleErrors = 5;

nlohmann::json OptionalToJson(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string OptionalPercent(const std::optional<double>& v) {
  return v.has_value() ? absl::StrFormat("%.2f%%", *v * 100) : std::string("n/a");
}

std::string LatencyRow(const char* name, const Distribution& d) {
  if (d.count == 0) return absl::StrFormat("  %-8s %8s\n", name, "n/a");
  return absl::StrFormat("  %-8s %8.1f %8.1f %8.1f %8.1f %8.1f %6d\n", name, d.mean * 1e3,
                         d.p50 * 1e3, d.p90 * 1e3, d.p99 * 1e3, d.max * 1e3, d.count);
}

}  // namespace

LoadReport BuildLoadReport(const std::vector<RequestRecord>& records, double wall_seconds) {
  LoadReport r;
  r.wall_seconds = wall_seconds;
  std::vector<double> ttft, tpot, e2e;
  for (const RequestRecord& rec : records) {
    ++r.sent;
    if (rec.status_code != 0) {
      ++r.failed;
      ++r.errors_by_code[StatusCodeName(rec.status_code)];
      const std::string msg =
          absl::StrCat(StatusCodeName(rec.status_code), ": ", rec.error_message);
      if (r.sample_errors.size() < kMaxSampleErrors &&
          std::find(r.sample_errors.begin(), r.sample_errors.end(), msg) == r.sample_errors.end()) {
        r.sample_errors.push_back(msg);
      }
      continue;
    }
    ++r.completed;
    e2e.push_back(rec.e2e_seconds);
    if (rec.ttft_seconds >= 0) ttft.push_back(rec.ttft_seconds);
    if (rec.tpot_seconds >= 0) tpot.push_back(rec.tpot_seconds);
    r.prompt_tokens += rec.prompt_tokens;
    r.completion_tokens += rec.completion_tokens;
    r.cache_queries += rec.cache_queries;
    r.cache_hits += rec.cache_hits;
    r.prefetch_needed += rec.prefetch_needed;
    r.prefetch_recalled += rec.prefetch_recalled;
    r.bytes_h2d += rec.bytes_h2d;
    r.stall_seconds += rec.stall_seconds;
  }
  if (wall_seconds > 0) {
    r.requests_per_second = static_cast<double>(r.completed) / wall_seconds;
    r.output_tokens_per_second = static_cast<double>(r.completion_tokens) / wall_seconds;
  }
  r.ttft = Summarize(std::move(ttft));
  r.tpot = Summarize(std::move(tpot));
  r.e2e = Summarize(std::move(e2e));
  if (r.cache_queries > 0) {
    r.cache_hit_ratio = static_cast<double>(r.cache_hits) / static_cast<double>(r.cache_queries);
  }
  if (r.prefetch_needed > 0) {
    r.hot_recall =
        static_cast<double>(r.prefetch_recalled) / static_cast<double>(r.prefetch_needed);
  }
  return r;
}

nlohmann::json LoadReportToJson(const LoadReport& r, const nlohmann::json& config) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [code, count] : r.errors_by_code) errors[code] = count;
  return nlohmann::json{
      {"config", config},
      {"requests",
       {{"sent", r.sent},
        {"completed", r.completed},
        {"failed", r.failed},
        {"errors_by_code", errors},
        {"sample_errors", r.sample_errors}}},
      {"wall_seconds", r.wall_seconds},
      {"throughput",
       {{"requests_per_second", r.requests_per_second},
        {"output_tokens_per_second", r.output_tokens_per_second},
        {"prompt_tokens", r.prompt_tokens},
        {"completion_tokens", r.completion_tokens}}},
      {"latency_seconds",
       {{"ttft", DistributionToJson(r.ttft)},
        {"tpot", DistributionToJson(r.tpot)},
        {"e2e", DistributionToJson(r.e2e)}}},
      {"server",
       {{"cache_queries", r.cache_queries},
        {"cache_hits", r.cache_hits},
        {"cache_hit_ratio", OptionalToJson(r.cache_hit_ratio)},
        {"prefetch_needed", r.prefetch_needed},
        {"prefetch_recalled", r.prefetch_recalled},
        {"hot_recall", OptionalToJson(r.hot_recall)},
        {"bytes_h2d", r.bytes_h2d},
        {"stall_seconds", r.stall_seconds}}},
  };
}

std::string FormatLoadReport(const LoadReport& r) {
  std::string out;
  absl::StrAppendFormat(&out, "requests   sent %d  completed %d  failed %d  in %.2f s\n", r.sent,
                        r.completed, r.failed, r.wall_seconds);
  for (const auto& [code, count] : r.errors_by_code) {
    absl::StrAppendFormat(&out, "  %-20s %d\n", code, count);
  }
  for (const std::string& e : r.sample_errors) absl::StrAppend(&out, "  e.g. ", e, "\n");
  absl::StrAppendFormat(
      &out, "throughput %.2f req/s  %.1f output tok/s  (%d prompt, %d output tokens)\n",
      r.requests_per_second, r.output_tokens_per_second, r.prompt_tokens, r.completion_tokens);
  absl::StrAppendFormat(&out, "latency ms %8s %8s %8s %8s %8s %6s\n", "mean", "p50", "p90", "p99",
                        "max", "n");
  absl::StrAppend(&out, LatencyRow("TTFT", r.ttft), LatencyRow("TPOT", r.tpot),
                  LatencyRow("E2E", r.e2e));
  absl::StrAppendFormat(&out, "server     cache hit ratio %s (%d/%d)  Hot Recall %s (%d/%d)\n",
                        OptionalPercent(r.cache_hit_ratio), r.cache_hits, r.cache_queries,
                        OptionalPercent(r.hot_recall), r.prefetch_recalled, r.prefetch_needed);
  absl::StrAppendFormat(&out, "           %.1f MiB host->device, %.3f s transfer stall\n",
                        static_cast<double>(r.bytes_h2d) / (1 << 20), r.stall_seconds);
  return out;
}

}  // namespace vismoe::client
