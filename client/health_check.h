// grpc.health.v1 Check, used by `vismoe-cli health` (the Docker HEALTHCHECK)
// and by tests waiting for a server to come up.
#ifndef VISMOE_CLIENT_HEALTH_CHECK_H_
#define VISMOE_CLIENT_HEALTH_CHECK_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "client/channel.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace vismoe::client {

struct HealthResult {
  grpc::Status status;         // the RPC's status
  std::string serving_status;  // "SERVING", "NOT_SERVING", ... when status is OK
  bool serving() const { return status.ok() && serving_status == "SERVING"; }
};

// Asks the server's health service about `service` ("" = the whole server),
// bounded by `timeout`.
HealthResult CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                         const ConnectionOptions& options, const std::string& service,
                         absl::Duration timeout);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_HEALTH_CHECK_H_
