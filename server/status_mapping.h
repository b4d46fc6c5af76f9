// The one place where engine/server absl::Status values become gRPC statuses
// or HTTP statuses (the OpenAI-compatible API), and where codes get their
// metric label.
//
// Thread safety: stateless free functions.
#ifndef VISMOE_SERVER_STATUS_MAPPING_H_
#define VISMOE_SERVER_STATUS_MAPPING_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace vismoe::server {

// Same code, same message. absl and gRPC share the canonical code numbering;
// the switch makes the mapping explicit and maps anything unknown to UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Inverse of ToGrpcStatus (used by tests and clients of the library).
absl::Status FromGrpcStatus(const grpc::Status& status);

// Lower-case code name used as the `status` label of vismoe_requests_total:
// "ok", "cancelled", "invalid_argument", "resource_exhausted", ...
std::string StatusLabel(grpc::StatusCode code);

// The HTTP status of an error on the OpenAI-compatible API: 400 for a bad
// request (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE), 401
// UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 429
// RESOURCE_EXHAUSTED (the admission queue is full: retry later), 499
// CANCELLED (nginx's "client closed request"; the client is gone), 501
// UNIMPLEMENTED, 503 UNAVAILABLE (loading, shutting down), 504
// DEADLINE_EXCEEDED, 500 for the rest. OK is 200.
int ToHttpStatus(absl::StatusCode code);

// The `type` of an OpenAI error body for an HTTP status:
// "invalid_request_error" (4xx but 401/403/429), "authentication_error",
// "permission_error", "rate_limit_error", "server_error" (5xx).
const char* OpenAiErrorType(int http_status);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_STATUS_MAPPING_H_
