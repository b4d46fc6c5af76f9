// The one place where engine/server absl::Status values become gRPC statuses,
// and where gRPC codes get their metric label.
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

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_STATUS_MAPPING_H_
