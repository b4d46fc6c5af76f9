// vismoe-cli: one request to a VisMoE server, streamed to stdout.
//
//   vismoe-cli [generate] --prompt="..." [--image=PATH ...] [flags]
//   vismoe-cli info                      # GetModelInfo
//   vismoe-cli health [--service=NAME]   # grpc.health.v1 Check
//
// Output: the answer is streamed to stdout as it arrives, followed by a
// newline; the stats block (finish reason, usage, timings, offload counters)
// goes to stderr so stdout stays just the answer. --json prints one JSON
// object on stdout instead (nothing streamed). Exit codes: 0 ok, 1 server
// error (or not SERVING), 2 usage error, 3 cannot reach the server; `health`
// exits 1 for every failure, as Docker's HEALTHCHECK expects.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "client/channel.h"
#include "client/cli_output.h"
#include "client/generate_call.h"
#include "client/health_check.h"
#include "client/request_builder.h"
#include "client/rpc_error.h"
#include "client/tool_flags.h"
#include "vismoe/v1/inference.grpc.pb.h"

ABSL_FLAG(std::string, prompt, "", "User prompt text.");
ABSL_FLAG(std::vector<std::string>, image, {},
          "Image file (JPEG, PNG or WebP) placed before the prompt; repeat for several.");
ABSL_FLAG(std::string, system, "", "Optional system message.");
ABSL_FLAG(int32_t, max_new_tokens, 0, "Tokens to generate at most (0 = server default).");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature (0 = greedy).");
ABSL_FLAG(int32_t, top_k, 0, "Top-k sampling (0 = off).");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling mass in (0, 1] (1 = off).");
ABSL_FLAG(uint64_t, seed, 0, "Sampler seed.");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop string; repeat for several.");
ABSL_FLAG(
    std::string, token_compressor, "",
    "Visual token compressor override: none|random|saliency|affinity (empty = server default).");
ABSL_FLAG(double, keep_ratio, -1,
          "Visual token keep ratio override in (0, 1] (<0 = server default).");
ABSL_FLAG(std::string, expert_predictor, "",
          "Expert predictor override: none|history|router-lookahead|mlp-lookahead.");
ABSL_FLAG(std::string, request_id, "", "Request id (empty = server generated).");
ABSL_FLAG(bool, json, false, "Print one JSON object instead of streaming text and stats.");
ABSL_FLAG(std::string, service, "", "health: the service to check (empty = whole server).");

namespace vismoe::client {
namespace {

constexpr char kUsage[] =
    "vismoe-cli [generate|info|health] --server=HOST:PORT ...\n"
    "  generate (default): --prompt=TEXT [--image=PATH ...] [--json]\n"
    "  info:   print the model the server has loaded\n"
    "  health: exit 0 when the server reports SERVING, 1 otherwise";

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "vismoe-cli: %s\n", message.c_str());
  return code;
}

int RunHealth(const std::shared_ptr<grpc::Channel>& channel, const ConnectionOptions& conn) {
  HealthResult result = CheckHealth(channel, conn, absl::GetFlag(FLAGS_service),
                                    absl::GetFlag(FLAGS_connect_timeout));
  if (!result.status.ok()) return Fail(DescribeRpcError(result.status, conn.server), 1);
  std::printf("%s\n", result.serving_status.c_str());
  return result.serving() ? kExitOk : kExitServerError;
}

int RunInfo(vismoe::v1::InferenceService::Stub* stub, const ConnectionOptions& conn) {
  grpc::ClientContext context;
  PrepareContext(conn, absl::GetFlag(FLAGS_timeout), &context);
  vismoe::v1::ModelInfo info;
  grpc::Status status = stub->GetModelInfo(&context, vismoe::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return Fail(DescribeRpcError(status, conn.server), ExitCodeForRpc(status));
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ModelInfoToJson(info).dump(2).c_str());
  } else {
    std::printf("%s", FormatModelInfo(info).c_str());
  }
  return kExitOk;
}

// Builds the request from the flags; a usage error is printed and its exit
// code returned (0 on success).
int BuildRequestFromFlags(const std::vector<std::string>& image_paths,
                          const std::vector<std::string>& stops,
                          vismoe::v1::GenerateRequest* request) {
  PromptSpec spec;
  spec.prompt = absl::GetFlag(FLAGS_prompt);
  spec.system = absl::GetFlag(FLAGS_system);
  for (const std::string& path : image_paths) {
    absl::StatusOr<ImageInput> image = ReadImageFile(path);
    if (!image.ok()) return Fail(std::string(image.status().message()), kExitUsageError);
    spec.images.push_back(*std::move(image));
  }
  if (spec.prompt.empty() && spec.images.empty()) {
    return Fail("nothing to send: pass --prompt and/or --image (see --help)", kExitUsageError);
  }
  vismoe::v1::SamplingParams sampling;
  sampling.set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  sampling.set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  sampling.set_top_k(absl::GetFlag(FLAGS_top_k));
  if (absl::GetFlag(FLAGS_top_p) != 1.0) {
    sampling.set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  }
  sampling.set_seed(absl::GetFlag(FLAGS_seed));
  for (const std::string& s : stops) sampling.add_stop(s);
  vismoe::v1::PolicyOverrides policy;
  if (!absl::GetFlag(FLAGS_token_compressor).empty()) {
    policy.set_token_compressor(absl::GetFlag(FLAGS_token_compressor));
  }
  if (absl::GetFlag(FLAGS_keep_ratio) >= 0) {
    policy.set_keep_ratio(static_cast<float>(absl::GetFlag(FLAGS_keep_ratio)));
  }
  if (!absl::GetFlag(FLAGS_expert_predictor).empty()) {
    policy.set_expert_predictor(absl::GetFlag(FLAGS_expert_predictor));
  }
  *request = BuildGenerateRequest(spec, sampling, policy, absl::GetFlag(FLAGS_request_id));
  return kExitOk;
}

int RunGenerateCommand(vismoe::v1::InferenceService::Stub* stub, const ConnectionOptions& conn,
                       const vismoe::v1::GenerateRequest& request) {
  const bool json = absl::GetFlag(FLAGS_json);
  DeltaCallback stream_to_stdout = [](const vismoe::v1::TokenDelta& delta) {
    std::fwrite(delta.text().data(), 1, delta.text().size(), stdout);
    std::fflush(stdout);
  };
  GenerateOutcome outcome = RunGenerate(stub, conn, request, absl::GetFlag(FLAGS_timeout),
                                        json ? DeltaCallback() : stream_to_stdout);
  if (!json && !outcome.text.empty()) std::printf("\n");
  if (!outcome.status.ok()) {
    return Fail(DescribeRpcError(outcome.status, conn.server), ExitCodeForRpc(outcome.status));
  }
  if (json) {
    std::printf("%s\n", OutcomeToJson(outcome).dump().c_str());
  } else {
    std::fprintf(stderr, "--\n%s", FormatStats(outcome).c_str());
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  std::vector<std::vector<std::string>> repeated;
  std::vector<std::string> positional =
      ParseToolCommandLine(argc, argv, {"image", "stop"}, &repeated, kUsage);
  const std::string command = positional.empty() ? "generate" : positional[0];
  if (positional.size() > 1) {
    return Fail("unexpected argument '" + positional[1] + "' (see --help)", kExitUsageError);
  }
  if (command != "generate" && command != "info" && command != "health") {
    return Fail("unknown command '" + command + "': expected generate, info or health",
                kExitUsageError);
  }
  const ConnectionOptions conn = ConnectionOptionsFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateClientChannel(conn);
  if (!channel.ok()) return Fail(std::string(channel.status().message()), kExitUsageError);
  if (command == "health") return RunHealth(*channel, conn);

  vismoe::v1::GenerateRequest request;
  if (command == "generate") {
    std::vector<std::string> images = repeated[0];
    for (const std::string& path : absl::GetFlag(FLAGS_image)) images.push_back(path);
    if (int code = BuildRequestFromFlags(images, repeated[1], &request); code != kExitOk) {
      return code;
    }
  }

  if (absl::Status s =
          WaitForConnection(channel->get(), conn.server, absl::GetFlag(FLAGS_connect_timeout));
      !s.ok()) {
    return Fail(std::string(s.message()), kExitConnectionError);
  }
  auto stub = vismoe::v1::InferenceService::NewStub(*channel);
  if (command == "info") return RunInfo(stub.get(), conn);
  return RunGenerateCommand(stub.get(), conn, request);
}

}  // namespace
}  // namespace vismoe::client

int main(int argc, char** argv) { return vismoe::client::Main(argc, argv); }
