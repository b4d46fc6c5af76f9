#include "client/rpc_error.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace vismoe::client {

std::string StatusCodeName(int code) {
  static const char* const kNames[] = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return kNames[code];
  }
  return absl::StrCat("CODE_", code);
}

std::string DescribeRpcError(const grpc::Status& status, const std::string& server) {
  const std::string& msg = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::UNAVAILABLE:
      return absl::StrCat("cannot reach server at ", server, ": ", msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::StrCat("request to ", server,
                          " did not finish before its deadline (raise --timeout): ", msg);
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::StrCat("server at ", server,
                          " requires an API key (pass --api_key or set VISMOE_API_KEY): ", msg);
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::StrCat("server at ", server, " refused the request: ", msg);
    case grpc::StatusCode::INVALID_ARGUMENT:
      return absl::StrCat("server at ", server, " rejected the request: ", msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      // gRPC's own size check says "Received message larger than max (N vs. M)".
      if (absl::StrContains(msg, "larger than max")) {
        return absl::StrCat("the request is larger than server at ", server,
                            " accepts (its max_message_bytes); retrying will not help: ", msg);
      }
      return absl::StrCat("server at ", server,
                          " is out of capacity (queue full); retry later: ", msg);
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::StrCat("server at ", server,
                          " does not implement this method (not a VisMoE server, or another "
                          "API version?): ",
                          msg);
    case grpc::StatusCode::CANCELLED:
      return absl::StrCat("request to ", server, " was cancelled: ", msg);
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS:
      return absl::StrCat("server at ", server, " failed with ",
                          StatusCodeName(status.error_code()), ": ", msg);
    default:
      return absl::StrCat("server at ", server, " returned ", StatusCodeName(status.error_code()),
                          ": ", msg);
  }
}

int ExitCodeForRpc(const grpc::Status& status) {
  if (status.ok()) return kExitOk;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return kExitConnectionError;
  return kExitServerError;
}

int ExitCodeForStatus(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (absl::IsUnavailable(status)) return kExitConnectionError;
  return kExitServerError;
}

}  // namespace vismoe::client
