#include "client/channel.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "client/jsonl.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace vismoe::client {

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(
    const ConnectionOptions& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("--server must not be empty");
  grpc::ChannelArguments args;
  // Answers are small, but a client may receive long completions; requests
  // carry images, which gRPC does not limit on the sending side.
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls || !options.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca.empty()) {
      absl::StatusOr<std::string> pem = ReadFileToString(options.tls_ca);
      if (!pem.ok()) {
        return absl::NotFoundError(absl::StrCat("--tls_ca: ", pem.status().message()));
      }
      ssl.pem_root_certs = *std::move(pem);
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(options.server, credentials, args);
}

absl::Status WaitForConnection(grpc::Channel* channel, const std::string& server,
                               absl::Duration timeout) {
  const auto deadline = std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
  if (channel->WaitForConnected(deadline)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "cannot reach server at ", server, ": no connection within ", absl::FormatDuration(timeout)));
}

void PrepareContext(const ConnectionOptions& options, absl::Duration timeout,
                    grpc::ClientContext* context) {
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  }
  if (!options.api_key.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options.api_key));
  }
}

}  // namespace vismoe::client
