// Drives a request set against a server: closed loop (a fixed number of
// requests in flight) or open loop (arrivals at a target rate).
#ifndef VISMOE_CLIENT_LOAD_RUNNER_H_
#define VISMOE_CLIENT_LOAD_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "absl/time/time.h"
#include "client/channel.h"
#include "client/generate_call.h"
#include "client/load_report.h"
#include "client/request_set.h"
#include "vismoe/v1/inference.grpc.pb.h"

namespace vismoe::client {

struct LoadOptions {
  // Closed loop: requests kept in flight. Open loop: the most in flight at
  // once (arrivals beyond it wait in a client-side queue).
  int concurrency = 1;
  // > 0: open loop with Poisson arrivals at this mean rate (requests/s).
  double rate = 0;
  // Stop issuing after this many requests (0 = no bound) ...
  int64_t max_requests = 0;
  // ... or after this long (infinite = no bound). At least one bound is required.
  absl::Duration duration = absl::InfiniteDuration();
  // Deadline of each request, so a run always ends.
  absl::Duration request_timeout = absl::Seconds(300);
  uint64_t seed = 0;  // arrival process seed
  vismoe::v1::SamplingParams sampling;
  vismoe::v1::PolicyOverrides policy;
};

struct LoadRun {
  std::vector<RequestRecord> records;  // one per request sent, in completion order
  double wall_seconds = 0;             // first send to last completion
};

// Converts one call's outcome into a report record. `queue_seconds` (time an
// open-loop arrival waited for a free slot) is added to TTFT and end-to-end
// latency so a saturated client does not hide server latency.
RequestRecord RecordFromOutcome(const GenerateOutcome& outcome, double queue_seconds);

// Runs the load. Requests cycle through `specs` in order. `progress` (may be
// null) receives a live one-line status every 0.5 s, rewritten with '\r'.
// `stop` (may be null) ends issuing early when set (e.g. by SIGINT); requests
// in flight finish or hit their deadline.
// REQUIRES: !specs.empty(), concurrency >= 1, a bound on requests or duration.
LoadRun RunLoad(vismoe::v1::InferenceService::StubInterface* stub,
                const ConnectionOptions& connection, const std::vector<PromptSpec>& specs,
                const LoadOptions& options, std::FILE* progress, const std::atomic<bool>* stop);

// The same through any front end: `call` runs one request within its timeout
// (RunGenerate over gRPC, RunChatCompletion over the HTTP API). It is called
// from `options.concurrency` threads at once.
using CallFn = std::function<GenerateOutcome(const vismoe::v1::GenerateRequest&, absl::Duration)>;
LoadRun RunLoad(const CallFn& call, const std::vector<PromptSpec>& specs,
                const LoadOptions& options, std::FILE* progress, const std::atomic<bool>* stop);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_LOAD_RUNNER_H_
