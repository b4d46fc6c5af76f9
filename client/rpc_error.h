// Human-readable RPC errors and the tools' exit codes.
#ifndef VISMOE_CLIENT_RPC_ERROR_H_
#define VISMOE_CLIENT_RPC_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace vismoe::client {

// Exit codes of vismoe-cli, vismoe-load and vismoe-eval.
enum ExitCode : int {
  kExitOk = 0,
  kExitServerError = 1,      // the server answered with an error (or NOT_SERVING)
  kExitUsageError = 2,       // bad flags or unreadable input files
  kExitConnectionError = 3,  // the server could not be reached
};

// "UNAVAILABLE", "INVALID_ARGUMENT", ... ("CODE_<n>" for unknown values).
std::string StatusCodeName(int code);

// One line explaining a failed call to `server`, e.g.
// "cannot reach server at 127.0.0.1:50051: failed to connect to all addresses".
std::string DescribeRpcError(const grpc::Status& status, const std::string& server);

// kExitConnectionError for UNAVAILABLE, kExitOk for OK, else kExitServerError.
int ExitCodeForRpc(const grpc::Status& status);

// Same mapping for an absl::Status produced by the client's own helpers.
int ExitCodeForStatus(const absl::Status& status);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_RPC_ERROR_H_
