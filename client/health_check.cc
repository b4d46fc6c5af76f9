#include "client/health_check.h"

#include "client/grpc_health.grpc.pb.h"

namespace vismoe::client {

HealthResult CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                         const ConnectionOptions& options, const std::string& service,
                         absl::Duration timeout) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  PrepareContext(options, timeout, &context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  HealthResult result;
  result.status = stub->Check(&context, request, &response);
  if (result.status.ok()) {
    result.serving_status =
        grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  }
  return result;
}

}  // namespace vismoe::client
