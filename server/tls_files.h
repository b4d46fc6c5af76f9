// TLS key material for the gRPC server: the certificate chain and private key
// files read and checked with OpenSSL before gRPC sees them. gRPC only logs a
// bad PEM and then fails to bind, which the server would report as an address
// problem; here each failure names the option, the file and what is wrong.
//
// Thread safety: stateless free function.
#ifndef VISMOE_SERVER_TLS_FILES_H_
#define VISMOE_SERVER_TLS_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace vismoe::server {

struct TlsKeyPair {
  std::string cert_chain;   // PEM, leaf certificate first
  std::string private_key;  // PEM
};

// InvalidArgument "option tls_cert: ..." / "option tls_key: ..." when a file
// cannot be read, holds no PEM certificate (cert) or no unencrypted PEM
// private key (key), or when the key does not belong to the first (leaf)
// certificate.
absl::StatusOr<TlsKeyPair> LoadTlsKeyPair(const std::string& cert_path,
                                          const std::string& key_path);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_TLS_FILES_H_
