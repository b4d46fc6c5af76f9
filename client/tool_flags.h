// Flags every client tool shares (connection and deadlines). Defined in
// tool_flags.cc, which is compiled into each executable and not into
// vismoe_client_lib, so test binaries that also link the server's flags
// cannot get duplicate flag definitions.
#ifndef VISMOE_CLIENT_TOOL_FLAGS_H_
#define VISMOE_CLIENT_TOOL_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/time/time.h"
#include "client/channel.h"

ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(bool, tls);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(std::string, api_key);
ABSL_DECLARE_FLAG(absl::Duration, timeout);
ABSL_DECLARE_FLAG(absl::Duration, connect_timeout);

namespace vismoe::client {

// The connection flags; --api_key falls back to $VISMOE_API_KEY.
ConnectionOptions ConnectionOptionsFromFlags();

// Prepares argv for absl::ParseCommandLine: pulls out the values of each
// repeatable flag in `repeatable` (into `repeated`, same order), validates
// the rest, and on a usage error prints it with the program name and exits 2.
// Returns the positional arguments (argv[0] excluded).
std::vector<std::string> ParseToolCommandLine(int argc, char** argv,
                                              const std::vector<std::string>& repeatable,
                                              std::vector<std::vector<std::string>>* repeated,
                                              const char* usage);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_TOOL_FLAGS_H_
