#include "client/tool_flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/cli_args.h"
#include "client/rpc_error.h"
#include "engine/core/help_flag.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Server address (host:port).");
ABSL_FLAG(bool, tls, false, "Use TLS with the system's root certificates.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM file with the CA certificate that signed the server's certificate (implies --tls).");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to verify in the server certificate instead of the address's host.");
ABSL_FLAG(std::string, api_key, "",
          "API key, sent as 'authorization: Bearer <key>'. Default: $VISMOE_API_KEY.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(300), "Deadline of each request.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(10),
          "How long to wait for the connection to the server.");

namespace vismoe::client {

ConnectionOptions ConnectionOptionsFromFlags() {
  ConnectionOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  options.tls = absl::GetFlag(FLAGS_tls);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.api_key = absl::GetFlag(FLAGS_api_key);
  if (options.api_key.empty()) {
    if (const char* env = std::getenv("VISMOE_API_KEY"); env != nullptr) options.api_key = env;
  }
  return options;
}

std::vector<std::string> ParseToolCommandLine(int argc, char** argv,
                                              const std::vector<std::string>& repeatable,
                                              std::vector<std::vector<std::string>>* repeated,
                                              const char* usage) {
  absl::SetProgramUsageMessage(usage);
  ExitOnHelpFlag(argc, argv, "/client/");
  std::vector<char*> args(argv, argv + argc);
  repeated->assign(repeatable.size(), {});
  absl::Status status;
  for (size_t i = 0; i < repeatable.size() && status.ok(); ++i) {
    status = ExtractRepeatedFlag(repeatable[i], &args, &(*repeated)[i]);
  }
  if (status.ok()) status = ValidateFlags(args);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], std::string(status.message()).c_str());
    std::exit(kExitUsageError);
  }
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  return std::vector<std::string>(positional.begin() + 1, positional.end());
}

}  // namespace vismoe::client
