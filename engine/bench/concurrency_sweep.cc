#include "engine/bench/concurrency_sweep.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

namespace vismoe::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

struct StreamResult {
  absl::StatusOr<GenerateResult> result = absl::UnknownError("not run");
  Clock::time_point end;
};

absl::StatusOr<ConcurrencyRow> RunStreams(Engine& engine, const BenchRequest& request, int n,
                                          bool same_prompt) {
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    BenchRequest copy = request;
    if (!same_prompt) copy.prompt = absl::StrCat("Stream ", i + 1, ". ", request.prompt);
    requests.push_back(copy.ToGenerateRequest());
  }
  std::vector<StreamResult> results(n);
  const Clock::time_point start = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        results[i].result = engine.Generate(requests[i], {});
        results[i].end = Clock::now();
      });
    }
  }  // joined
  ConcurrencyRow row;
  row.streams = n;
  row.identical_outputs = true;
  Clock::time_point last_end = start;
  double first_token = 1e30;
  for (int i = 0; i < n; ++i) {
    if (!results[i].result.ok()) {
      const absl::Status& st = results[i].result.status();
      return absl::Status(st.code(), absl::StrCat("stream ", i + 1, " of ", n, ": ", st.message()));
    }
    const GenerateResult& r = *results[i].result;
    row.identical_outputs = row.identical_outputs && r.token_ids == results[0].result->token_ids;
    row.completion_tokens += r.usage.completion_tokens;
    row.decode_tokens += std::max(r.usage.completion_tokens - 1, 0);
    row.mean_ttft_seconds += r.timings.ttft_seconds / n;
    row.mean_tpot_seconds += r.timings.tpot_seconds / n;
    last_end = std::max(last_end, results[i].end);
    // This stream's first token, on the sweep's clock.
    first_token = std::min(first_token, Seconds(start, results[i].end) - r.timings.total_seconds +
                                            r.timings.ttft_seconds);
  }
  row.wall_seconds = Seconds(start, last_end);
  row.decode_seconds = row.wall_seconds - std::max(first_token, 0.0);
  return row;
}

}  // namespace

absl::StatusOr<std::vector<ConcurrencyRow>> RunConcurrencySweep(Engine& engine,
                                                                const BenchRequest& request,
                                                                const std::vector<int>& streams,
                                                                bool same_prompt) {
  std::vector<ConcurrencyRow> rows;
  for (int n : streams) {
    if (n < 1)
      return absl::InvalidArgumentError(absl::StrCat("concurrency sweep: ", n, " streams"));
    absl::StatusOr<ConcurrencyRow> row = RunStreams(engine, request, n, same_prompt);
    if (!row.ok()) return row.status();
    rows.push_back(*row);
  }
  return rows;
}

nlohmann::json ConcurrencyJson(const std::vector<ConcurrencyRow>& rows) {
  const ConcurrencyRow* one = nullptr;
  for (const ConcurrencyRow& r : rows) {
    if (r.streams == 1) one = &r;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const ConcurrencyRow& r : rows) {
    nlohmann::json j = {{"streams", r.streams},
                        {"completion_tokens", r.completion_tokens},
                        {"decode_tokens", r.decode_tokens},
                        {"wall_seconds", r.wall_seconds},
                        {"decode_seconds", r.decode_seconds},
                        {"output_tokens_per_s", r.output_tokens_per_s()},
                        {"decode_tokens_per_s", r.decode_tokens_per_s()},
                        {"mean_ttft_seconds", r.mean_ttft_seconds},
                        {"mean_tpot_seconds", r.mean_tpot_seconds},
                        {"identical_outputs", r.identical_outputs}};
    if (one != nullptr && one->output_tokens_per_s() > 0 && one->decode_tokens_per_s() > 0) {
      j["output_tokens_per_s_vs_one"] = r.output_tokens_per_s() / one->output_tokens_per_s();
      j["decode_tokens_per_s_vs_one"] = r.decode_tokens_per_s() / one->decode_tokens_per_s();
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace vismoe::bench
