// Connection settings shared by the client tools: channel creation (plain or
// TLS) and per-call metadata (API key).
#ifndef VISMOE_CLIENT_CHANNEL_H_
#define VISMOE_CLIENT_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace vismoe::client {

// Where and how to connect. Plain copyable data.
struct ConnectionOptions {
  std::string server = "127.0.0.1:50051";
  bool tls = false;             // TLS with the system roots (implied by tls_ca)
  std::string tls_ca;           // PEM file of the CA that signed the server certificate
  std::string tls_server_name;  // overrides the name checked against the certificate
  std::string api_key;          // sent as "authorization: Bearer <key>" when non-empty
};

// Creates a channel (lazily connecting). Errors: InvalidArgument for an empty
// server address, NotFound when the CA file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(
    const ConnectionOptions& options);

// Waits up to `timeout` for `channel` to connect. Unavailable with
// "cannot reach server at <addr>: ..." when it does not.
absl::Status WaitForConnection(grpc::Channel* channel, const std::string& server,
                               absl::Duration timeout);

// Sets the deadline (now + timeout; none when timeout is infinite) and the
// authorization metadata on a fresh context.
void PrepareContext(const ConnectionOptions& options, absl::Duration timeout,
                    grpc::ClientContext* context);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_CHANNEL_H_
