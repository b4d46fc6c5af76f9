// vismoe-load: load generator. Replays a request set (JSONL or --synthetic)
// closed-loop (--concurrency requests in flight) or open-loop (--rate
// Poisson arrivals/s), then prints a report table on stdout and optionally
// writes it as JSON (--json_report). Exit codes: 0 every request completed,
// 1 some failed (the report is still written), 2 usage error, 3 the server
// could not be reached at start.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/chat_completion_call.h"
#include "client/load_runner.h"
#include "client/policy_flags.h"
#include "client/rpc_error.h"
#include "client/tool_flags.h"

ABSL_FLAG(std::string, request_file, "",
          "JSONL request set: {\"prompt\", \"images\": [paths], \"max_new_tokens\", \"system\"}.");
ABSL_FLAG(bool, synthetic, false, "Use the built-in synthetic set (generated PNGs + prompts).");
ABSL_FLAG(int32_t, synthetic_count, 16, "Distinct requests in the synthetic set.");
ABSL_FLAG(int64_t, requests, 0,
          "Requests to send (cycling through the set); 0 = one pass over the set, unless "
          "--duration is given.");
ABSL_FLAG(absl::Duration, duration, absl::InfiniteDuration(),
          "Stop issuing requests after this long (e.g. 60s).");
ABSL_FLAG(int32_t, concurrency, 1,
          "Closed loop: requests in flight. Open loop: the most in flight at once.");
ABSL_FLAG(double, rate, 0,
          "Open loop: mean arrival rate in requests/s (Poisson); 0 = closed loop.");
ABSL_FLAG(int32_t, max_new_tokens, 32, "Tokens per request unless the set gives max_new_tokens.");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature (0 = greedy).");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the sampler, the synthetic set and the arrival process.");
ABSL_FLAG(std::string, token_compressor, "", "Token compressor override (empty = server default).");
ABSL_FLAG(double, keep_ratio, -1, "Keep ratio override in (0, 1] (<0 = server default).");
ABSL_FLAG(std::string, expert_predictor, "", "Expert predictor override (empty = server default).");
ABSL_FLAG(std::string, json_report, "", "Write the report as JSON to this file.");
ABSL_FLAG(std::string, api, "grpc",
          "Front end to load: grpc (--server) or openai (the OpenAI-compatible HTTP API at "
          "--http_server, streamed chat completions)");
ABSL_FLAG(std::string, http_server, "", "host:port of the server's HTTP API (--api=openai)");
ABSL_FLAG(bool, progress, false, "Show the live progress line even when stderr is not a TTY.");

namespace vismoe::client {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "vismoe-load: %s\n", message.c_str());
  return code;
}

int Main(int argc, char** argv) {
  std::vector<std::vector<std::string>> repeated;
  std::vector<std::string> positional = ParseToolCommandLine(
      argc, argv, {}, &repeated,
      "vismoe-load --server=HOST:PORT (--request_file=FILE | --synthetic) "
      "[--requests=N] [--duration=60s] [--concurrency=N | --rate=R] [--json_report=FILE]");
  if (!positional.empty())
    return Fail("unexpected argument '" + positional[0] + "'", kExitUsageError);

  const std::string request_file = absl::GetFlag(FLAGS_request_file);
  const bool synthetic = absl::GetFlag(FLAGS_synthetic);
  if (request_file.empty() == !synthetic) {
    return Fail("pass exactly one of --request_file=FILE and --synthetic", kExitUsageError);
  }
  LoadOptions options;
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.rate = absl::GetFlag(FLAGS_rate);
  options.max_requests = absl::GetFlag(FLAGS_requests);
  options.duration = absl::GetFlag(FLAGS_duration);
  options.request_timeout = absl::GetFlag(FLAGS_timeout);
  options.seed = absl::GetFlag(FLAGS_seed);
  if (options.concurrency < 1) return Fail("--concurrency must be >= 1", kExitUsageError);
  if (options.rate < 0) return Fail("--rate must be >= 0", kExitUsageError);
  if (options.max_requests < 0) return Fail("--requests must be >= 0", kExitUsageError);
  if (options.duration <= absl::ZeroDuration())
    return Fail("--duration must be > 0", kExitUsageError);
  if (absl::GetFlag(FLAGS_synthetic_count) < 1) {
    return Fail("--synthetic_count must be >= 1", kExitUsageError);
  }

  std::vector<PromptSpec> specs;
  if (synthetic) {
    specs = MakeSyntheticRequestSet(absl::GetFlag(FLAGS_synthetic_count), options.seed);
  } else {
    absl::StatusOr<std::vector<PromptSpec>> loaded = LoadRequestSet(request_file);
    if (!loaded.ok()) return Fail(std::string(loaded.status().message()), kExitUsageError);
    specs = *std::move(loaded);
  }
  if (options.max_requests == 0 && options.duration == absl::InfiniteDuration()) {
    options.max_requests = static_cast<int64_t>(specs.size());
  }
  options.sampling.set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  options.sampling.set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  options.sampling.set_seed(options.seed);
  options.policy =
      MakePolicyOverrides(absl::GetFlag(FLAGS_token_compressor), absl::GetFlag(FLAGS_keep_ratio),
                          absl::GetFlag(FLAGS_expert_predictor));

  const ConnectionOptions conn = ConnectionOptionsFromFlags();
  const std::string api = absl::GetFlag(FLAGS_api);
  CallFn call;
  std::unique_ptr<vismoe::v1::InferenceService::Stub> stub;
  std::string target = conn.server;
  if (api == "openai") {
    absl::StatusOr<HttpTarget> http = ParseHttpTarget(absl::GetFlag(FLAGS_http_server));
    if (!http.ok()) return Fail(std::string(http.status().message()), kExitUsageError);
    http->api_key = conn.api_key;
    target = absl::GetFlag(FLAGS_http_server);
    call = [http = *http](const vismoe::v1::GenerateRequest& request, absl::Duration timeout) {
      return RunChatCompletion(http, request, timeout);
    };
  } else if (api == "grpc") {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateClientChannel(conn);
    if (!channel.ok()) return Fail(std::string(channel.status().message()), kExitUsageError);
    if (absl::Status s =
            WaitForConnection(channel->get(), conn.server, absl::GetFlag(FLAGS_connect_timeout));
        !s.ok()) {
      return Fail(std::string(s.message()), kExitConnectionError);
    }
    stub = vismoe::v1::InferenceService::NewStub(*channel);
    call = [stub = stub.get(), &conn](const vismoe::v1::GenerateRequest& request,
                                      absl::Duration timeout) {
      return RunGenerate(stub, conn, request, timeout, nullptr);
    };
  } else {
    return Fail("--api must be grpc or openai", kExitUsageError);
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const bool progress = absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO) == 1;
  LoadRun run = RunLoad(call, specs, options, progress ? stderr : nullptr, &g_stop);
  LoadReport report = BuildLoadReport(run.records, run.wall_seconds);

  nlohmann::json config{
      {"api", api},
      {"server", target},
      {"request_set", synthetic ? absl::StrCat("synthetic:", specs.size()) : request_file},
      {"mode", options.rate > 0 ? "open_loop" : "closed_loop"},
      {"concurrency", options.concurrency},
      {"rate", options.rate},
      {"requests", options.max_requests},
      {"duration_seconds", options.duration == absl::InfiniteDuration()
                               ? nlohmann::json(nullptr)
                               : nlohmann::json(absl::ToDoubleSeconds(options.duration))},
      {"max_new_tokens", options.sampling.max_new_tokens()},
      {"temperature", options.sampling.temperature()},
      {"policy", PolicyToJson(options.policy)},
      {"interrupted", g_stop.load()},
  };
  std::printf("%s", FormatLoadReport(report).c_str());
  if (const std::string path = absl::GetFlag(FLAGS_json_report); !path.empty()) {
    if (absl::Status s = WriteJsonFile(path, LoadReportToJson(report, config)); !s.ok()) {
      return Fail(std::string(s.message()), kExitServerError);
    }
  }
  if (report.failed == 0) return kExitOk;
  if (report.completed == 0 && report.errors_by_code.size() == 1 &&
      report.errors_by_code.count("UNAVAILABLE") == 1) {
    return Fail(absl::StrCat("every request failed: cannot reach server at ", target),
                kExitConnectionError);
  }
  return Fail(absl::StrCat(report.failed, " of ", report.sent, " requests failed"),
              kExitServerError);
}

}  // namespace
}  // namespace vismoe::client

int main(int argc, char** argv) { return vismoe::client::Main(argc, argv); }
