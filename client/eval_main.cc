// vismoe-eval: accuracy runner over a VQA JSONL set
//   {"image": PATH, "question": ..., "choices": [...], "answer": ..., "category": ...}
// Greedy decoding with a short answer budget; answers are scored by
// multiple-choice letter/text, yes/no (POPE-style) or normalised exact match.
// Prints a per-category table on stdout; --json_report writes it as JSON.
// Exit codes: 0 every request completed (whatever the accuracy), 1 some
// requests failed, 2 usage error, 3 cannot reach the server.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/eval_runner.h"
#include "client/policy_flags.h"
#include "client/rpc_error.h"
#include "client/tool_flags.h"

ABSL_FLAG(std::string, data, "", "VQA JSONL file (image paths relative to it).");
ABSL_FLAG(int64_t, limit, 0, "Evaluate only the first N items (0 = all).");
ABSL_FLAG(int32_t, concurrency, 1, "Requests in flight.");
ABSL_FLAG(int32_t, max_new_tokens, 16, "Answer length budget in tokens.");
ABSL_FLAG(std::string, token_compressor, "", "Token compressor override (empty = server default).");
ABSL_FLAG(double, keep_ratio, -1, "Keep ratio override in (0, 1] (<0 = server default).");
ABSL_FLAG(std::string, expert_predictor, "", "Expert predictor override (empty = server default).");
ABSL_FLAG(std::string, expert_skipping, "",
          "Expert skipping override: none | dual-threshold (empty = server default).");
ABSL_FLAG(double, skip_tau_text, -1, "Text-token skipping threshold override (<0 = server's).");
ABSL_FLAG(double, skip_tau_visual, -1, "Visual-token skipping threshold override (<0 = server's).");
ABSL_FLAG(std::string, miss_policy, "",
          "Miss policy override: fetch | commit | cpu (empty = server default).");
ABSL_FLAG(double, commit_threshold, -1, "Commit certainty threshold override (<0 = server's).");
ABSL_FLAG(double, commit_owa_alpha1, -1,
          "Commit OWA alpha_1 override, 0 = OWA off (<0 = server's).");
ABSL_FLAG(double, commit_owa_alpha2, -1, "Commit OWA alpha_2 override (<0 = server's).");
ABSL_FLAG(std::string, json_report, "", "Write the report as JSON to this file.");
ABSL_FLAG(bool, include_items, true, "Include every item's prediction in the JSON report.");
ABSL_FLAG(bool, progress, false, "Show progress even when stderr is not a TTY.");

namespace vismoe::client {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "vismoe-eval: %s\n", message.c_str());
  return code;
}

int Main(int argc, char** argv) {
  std::vector<std::vector<std::string>> repeated;
  std::vector<std::string> positional = ParseToolCommandLine(
      argc, argv, {}, &repeated,
      "vismoe-eval --server=HOST:PORT --data=FILE.jsonl [--concurrency=N] [--json_report=FILE]");
  if (!positional.empty())
    return Fail("unexpected argument '" + positional[0] + "'", kExitUsageError);
  const std::string data = absl::GetFlag(FLAGS_data);
  if (data.empty()) return Fail("--data=FILE is required", kExitUsageError);
  EvalOptions options;
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  options.request_timeout = absl::GetFlag(FLAGS_timeout);
  options.policy =
      MakePolicyOverrides(absl::GetFlag(FLAGS_token_compressor), absl::GetFlag(FLAGS_keep_ratio),
                          absl::GetFlag(FLAGS_expert_predictor));
  AddSkippingOverrides(absl::GetFlag(FLAGS_expert_skipping), absl::GetFlag(FLAGS_skip_tau_text),
                       absl::GetFlag(FLAGS_skip_tau_visual), &options.policy);
  AddMissPolicyOverrides(absl::GetFlag(FLAGS_miss_policy), absl::GetFlag(FLAGS_commit_threshold),
                         absl::GetFlag(FLAGS_commit_owa_alpha1),
                         absl::GetFlag(FLAGS_commit_owa_alpha2), &options.policy);
  if (options.concurrency < 1) return Fail("--concurrency must be >= 1", kExitUsageError);
  if (options.max_new_tokens < 1) return Fail("--max_new_tokens must be >= 1", kExitUsageError);
  absl::StatusOr<std::vector<EvalItem>> items = LoadEvalSet(data);
  if (!items.ok()) return Fail(std::string(items.status().message()), kExitUsageError);
  if (const int64_t limit = absl::GetFlag(FLAGS_limit);
      limit > 0 && static_cast<size_t>(limit) < items->size()) {
    items->resize(static_cast<size_t>(limit));
  }

  const ConnectionOptions conn = ConnectionOptionsFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateClientChannel(conn);
  if (!channel.ok()) return Fail(std::string(channel.status().message()), kExitUsageError);
  if (absl::Status s =
          WaitForConnection(channel->get(), conn.server, absl::GetFlag(FLAGS_connect_timeout));
      !s.ok()) {
    return Fail(std::string(s.message()), kExitConnectionError);
  }
  auto stub = vismoe::v1::InferenceService::NewStub(*channel);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const bool progress = absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO) == 1;
  std::vector<EvalOutcome> outcomes =
      RunEval(stub.get(), conn, *items, options, progress ? stderr : nullptr, &g_stop);
  EvalReport report = BuildEvalReport(outcomes);
  std::printf("%s", FormatEvalReport(report).c_str());
  nlohmann::json config{{"server", conn.server},
                        {"data", data},
                        {"items", items->size()},
                        {"max_new_tokens", options.max_new_tokens},
                        {"concurrency", options.concurrency},
                        {"policy", PolicyToJson(options.policy)},
                        {"interrupted", g_stop.load()}};
  if (const std::string path = absl::GetFlag(FLAGS_json_report); !path.empty()) {
    nlohmann::json j =
        EvalReportToJson(report, outcomes, config, absl::GetFlag(FLAGS_include_items));
    if (absl::Status s = WriteJsonFile(path, j); !s.ok()) {
      return Fail(std::string(s.message()), kExitServerError);
    }
  }
  if (report.overall.errors == 0) return kExitOk;
  for (const EvalOutcome& o : outcomes) {
    if (!o.rpc_ok) {
      Fail(absl::StrCat(report.overall.errors, " of ", report.overall.total,
                        " requests failed; first: line ", o.line, ": ", o.error),
           kExitServerError);
      break;
    }
  }
  return kExitServerError;
}

}  // namespace
}  // namespace vismoe::client

int main(int argc, char** argv) { return vismoe::client::Main(argc, argv); }
