#include "client/load_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/request_builder.h"

namespace vismoe::client {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Shared state of one run. Guarded by `mu` except the atomics.
struct RunState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int64_t, Clock::time_point>> arrivals;  // open loop: index, due time
  bool arrivals_done = false;
  std::vector<RequestRecord> records;
  std::atomic<int64_t> next_index{0};
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> completed_tokens{0};
  std::atomic<int64_t> failed{0};
  std::atomic<bool> finished{false};
};

}  // namespace

RequestRecord RecordFromOutcome(const GenerateOutcome& outcome, double queue_seconds) {
  RequestRecord r;
  r.status_code = static_cast<int>(outcome.status.error_code());
  r.error_message = outcome.status.error_message();
  r.ttft_seconds = outcome.ttft_seconds >= 0 ? outcome.ttft_seconds + queue_seconds : -1;
  r.tpot_seconds = outcome.tpot_seconds;
  r.e2e_seconds = outcome.total_seconds + queue_seconds;
  if (outcome.has_final) {
    const vismoe::v1::FinalResult& f = outcome.final_result;
    r.prompt_tokens = f.usage().prompt_tokens();
    r.completion_tokens = f.usage().completion_tokens();
    r.cache_queries = f.offload().cache_queries();
    r.cache_hits = f.offload().cache_hits();
    r.prefetch_needed = f.offload().prefetch_needed();
    r.prefetch_recalled = f.offload().prefetch_recalled();
    r.bytes_h2d = f.offload().bytes_h2d();
    r.stall_seconds = f.offload().stall_seconds();
  }
  return r;
}

LoadRun RunLoad(vismoe::v1::InferenceService::StubInterface* stub,
                const ConnectionOptions& connection, const std::vector<PromptSpec>& specs,
                const LoadOptions& options, std::FILE* progress, const std::atomic<bool>* stop) {
  const CallFn call = [stub, &connection](const vismoe::v1::GenerateRequest& request,
                                          absl::Duration timeout) {
    return RunGenerate(stub, connection, request, timeout, nullptr);
  };
  return RunLoad(call, specs, options, progress, stop);
}

LoadRun RunLoad(const CallFn& call, const std::vector<PromptSpec>& specs,
                const LoadOptions& options, std::FILE* progress, const std::atomic<bool>* stop) {
  RunState state;
  const Clock::time_point start = Clock::now();
  const bool bounded_duration = options.duration != absl::InfiniteDuration();
  const Clock::time_point end = bounded_duration
                                    ? start + absl::ToChronoNanoseconds(options.duration)
                                    : Clock::time_point::max();
  auto may_issue = [&](int64_t index) {
    if (options.max_requests > 0 && index >= options.max_requests) return false;
    if (stop != nullptr && stop->load()) return false;
    return Clock::now() < end;
  };

  auto run_one = [&](int64_t index, double queue_seconds) {
    const PromptSpec& spec = specs[static_cast<size_t>(index) % specs.size()];
    vismoe::v1::GenerateRequest request =
        BuildGenerateRequest(spec, options.sampling, options.policy, absl::StrCat("load-", index));
    state.in_flight.fetch_add(1);
    GenerateOutcome outcome = call(request, options.request_timeout);
    RequestRecord record = RecordFromOutcome(outcome, queue_seconds);
    state.in_flight.fetch_sub(1);
    if (record.status_code == 0) {
      state.completed_tokens.fetch_add(record.completion_tokens);
    } else {
      state.failed.fetch_add(1);
    }
    std::lock_guard<std::mutex> lock(state.mu);
    state.records.push_back(std::move(record));
  };

  const bool open_loop = options.rate > 0;
  std::vector<std::thread> workers;
  for (int w = 0; w < options.concurrency; ++w) {
    workers.emplace_back([&] {
      if (!open_loop) {
        for (;;) {
          const int64_t index = state.next_index.fetch_add(1);
          if (!may_issue(index)) return;
          run_one(index, 0);
        }
      }
      for (;;) {
        std::pair<int64_t, Clock::time_point> arrival;
        {
          std::unique_lock<std::mutex> lock(state.mu);
          state.cv.wait(lock, [&] { return !state.arrivals.empty() || state.arrivals_done; });
          if (state.arrivals.empty()) return;
          arrival = state.arrivals.front();
          state.arrivals.pop_front();
        }
        run_one(arrival.first, Seconds(Clock::now() - arrival.second));
      }
    });
  }

  std::thread dispatcher;
  if (open_loop) {
    dispatcher = std::thread([&] {
      std::mt19937_64 rng(options.seed);
      std::exponential_distribution<double> gap(options.rate);
      Clock::time_point due = start;
      for (int64_t index = 0;; ++index) {
        // Sleep in short steps so a stop request or the end of the run is seen.
        while (Clock::now() < due && may_issue(index)) {
          std::this_thread::sleep_for(
              std::min<Clock::duration>(due - Clock::now(), std::chrono::milliseconds(100)));
        }
        if (!may_issue(index)) break;
        {
          std::lock_guard<std::mutex> lock(state.mu);
          state.arrivals.emplace_back(index, due);
        }
        state.cv.notify_one();
        due += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      }
      std::lock_guard<std::mutex> lock(state.mu);
      state.arrivals_done = true;
      state.cv.notify_all();
    });
  }

  std::thread reporter;
  if (progress != nullptr) {
    reporter = std::thread([&] {
      while (!state.finished.load()) {
        int64_t done;
        {
          std::lock_guard<std::mutex> lock(state.mu);
          done = static_cast<int64_t>(state.records.size());
        }
        const double elapsed = Seconds(Clock::now() - start);
        std::fprintf(
            progress,
            "\r[%6.1fs] done %lld  failed %lld  in flight %lld  %.2f req/s  %.1f tok/s   ", elapsed,
            static_cast<long long>(done), static_cast<long long>(state.failed.load()),
            static_cast<long long>(state.in_flight.load()),
            elapsed > 0 ? static_cast<double>(done - state.failed.load()) / elapsed : 0.0,
            elapsed > 0 ? static_cast<double>(state.completed_tokens.load()) / elapsed : 0.0);
        std::fflush(progress);
        for (int i = 0; i < 5 && !state.finished.load(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
      std::fprintf(progress, "\n");
      std::fflush(progress);
    });
  }

  if (dispatcher.joinable()) dispatcher.join();
  for (std::thread& t : workers) t.join();
  LoadRun run;
  run.wall_seconds = Seconds(Clock::now() - start);
  state.finished.store(true);
  if (reporter.joinable()) reporter.join();
  run.records = std::move(state.records);
  return run;
}

}  // namespace vismoe::client
